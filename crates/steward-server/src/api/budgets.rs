//! `budgets`: per-API-key caps on what a key may start in a calendar month (UTC), enforced when
//! an invoke is admitted (`steward_store::budget`). Reading needs `impact-limits:read`; putting
//! and deleting need `impact-limits:write`, which no agent role holds: a budget is an operator's
//! cap on an agent's key, and the agent may read it but never raise it.
//!
//! One invocation counts 1 in the `invocations` dimension when it is recorded (approval-gated
//! ones included); its reservation is consumed when it succeeds, released when it fails or is
//! refused, denied or expired, and kept as exposure while its outcome is unknown. Steward prices
//! nothing, so `estimatedCostCents` is always 0, and a `monthlyCostCentsCap`, which could never
//! refuse, is refused at save ([`COST_CAP_REFUSED`]) and always answered as `null`.

use super::body::{self, only_known};
use super::idempotent;
use super::openapi as doc;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use steward_core::impact::LIMIT_AMOUNT_MAX;
use steward_core::{scopes, KeyId, LimitId};
use steward_store::{Actor, BudgetSpec, BudgetStatus, StoreError, BUDGET_DIMENSION_INVOCATIONS};

/// The fields a budget put may carry.
pub(crate) const FIELDS: [&str; 4] = [
    "monthlyCostCentsCap",
    "dimensionCaps",
    "alertThreshold",
    "enabled",
];

/// The alert threshold a new budget gets when the put names none: the share of a cap past which
/// the view reports `alerting` (the hosted product's documented default is the same 80%).
pub(crate) const BUDGET_ALERT_THRESHOLD_DEFAULT: f64 = 0.8;

/// Why a put naming a cost cap is refused: nothing prices a call (every call would cost 0
/// cents), so the cap could never refuse, and a stored cap that never refuses would mislead.
pub(crate) const COST_CAP_REFUSED: &str = "Steward prices no call (every call costs 0 cents), so a cost cap could never refuse; leave it out or null, and cap `dimensionCaps.invocations` instead";

fn view(s: &BudgetStatus) -> Value {
    let b = &s.budget;
    let u = s.usage;
    let cap = b.spec.invocations_cap();
    let used = u.used();
    let alerting =
        b.spec.enabled && cap.is_some_and(|cap| used as f64 >= b.spec.alert_threshold * cap as f64);
    json!({
        "apiKeyId": b.key_id,
        "enabled": b.spec.enabled,
        // Never the stored value: a cap put before caps were refused at save enforces nothing,
        // and the answer must not claim one.
        "monthlyCostCentsCap": Value::Null,
        "dimensionCaps": b.spec.dimension_caps,
        "alertThreshold": b.spec.alert_threshold,
        "period": "month",
        "windowStart": s.window_start.to_rfc3339(),
        "usage": {
            BUDGET_DIMENSION_INVOCATIONS: {
                "consumed": u.consumed,
                "reserved": u.reserved,
                "unknownExposure": u.exposure,
                "available": cap.map(|cap| u.available(cap)),
            }
        },
        "estimatedCostCents": 0,
        "alerting": alerting,
        "reconciliationRequired": u.exposure > 0,
        "createdAt": b.created_at.to_rfc3339(),
        "updatedAt": b.updated_at.to_rfc3339(),
    })
}

/// The key named in the path, if it belongs to the caller's environment; anything else is 404.
async fn key_in_env(state: &AppState, caller: &Caller, id: &str) -> ApiResult<KeyId> {
    let missing = || ApiError::not_found("api key");
    let id = KeyId::parse(id).map_err(|_| missing())?;
    match state.store.key(&id).await? {
        Some(key) if key.env_id == caller.env.id => Ok(id),
        _ => Err(missing()),
    }
}

fn amount(field: &str, value: &Value) -> ApiResult<i64> {
    match value.as_i64() {
        Some(a) if (0..=LIMIT_AMOUNT_MAX).contains(&a) => Ok(a),
        _ => Err(ApiError::validation(
            field,
            format!("must be an integer from 0 to {LIMIT_AMOUNT_MAX}"),
        )),
    }
}

fn dimension_caps(value: &Value) -> ApiResult<BTreeMap<String, i64>> {
    let Some(map) = value.as_object() else {
        return Err(ApiError::validation(
            "dimensionCaps",
            "must be an object of dimension to cap",
        ));
    };
    let mut caps = BTreeMap::new();
    for (dimension, cap) in map {
        let field = format!("dimensionCaps.{dimension}");
        if dimension != BUDGET_DIMENSION_INVOCATIONS {
            return Err(ApiError::validation(
                field,
                format!(
                    "is not a dimension Steward counts (only `{BUDGET_DIMENSION_INVOCATIONS}`)"
                ),
            ));
        }
        caps.insert(dimension.clone(), amount(&field, cap)?);
    }
    Ok(caps)
}

/// The spec after applying the body to `current` (or to the defaults): a field left out keeps
/// its value, `null` clears a cap. A cost cap is refused ([`COST_CAP_REFUSED`]); one stored by
/// an earlier version is cleared by any put.
fn apply(map: &Map<String, Value>, current: Option<BudgetSpec>) -> ApiResult<BudgetSpec> {
    let mut spec = current.unwrap_or(BudgetSpec {
        monthly_cost_cents_cap: None,
        dimension_caps: BTreeMap::new(),
        alert_threshold: BUDGET_ALERT_THRESHOLD_DEFAULT,
        enabled: true,
    });
    match map.get("monthlyCostCentsCap") {
        None | Some(Value::Null) => spec.monthly_cost_cents_cap = None,
        Some(_) => {
            return Err(ApiError::validation(
                "monthlyCostCentsCap",
                COST_CAP_REFUSED,
            ))
        }
    }
    match map.get("dimensionCaps") {
        None => {}
        Some(Value::Null) => spec.dimension_caps.clear(),
        Some(v) => spec.dimension_caps = dimension_caps(v)?,
    }
    if let Some(v) = map.get("alertThreshold") {
        match v.as_f64() {
            Some(t) if t > 0.0 && t <= 1.0 => spec.alert_threshold = t,
            _ => {
                return Err(ApiError::validation(
                    "alertThreshold",
                    "must be a number greater than 0 and at most 1",
                ))
            }
        }
    }
    if let Some(v) = map.get("enabled") {
        spec.enabled = v
            .as_bool()
            .ok_or_else(|| ApiError::validation("enabled", "must be true or false"))?;
    }
    Ok(spec)
}

#[utoipa::path(
    get,
    path = "/budgets",
    operation_id = "budgets_list",
    tag = "budgets",
    responses(
        (status = 200, description = "every budgeted key with this month's usage", body = doc::List<doc::Budget>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_READ)?;
    let budgets = state
        .store
        .list_budgets(&caller.env.id, state.clock.now())
        .await?;
    Ok(ok(Value::Array(budgets.iter().map(view).collect())))
}

#[utoipa::path(
    get,
    path = "/budgets/{apiKeyId}",
    operation_id = "budgets_get",
    tag = "budgets",
    params(doc::ApiKeyPath),
    responses(
        (status = 200, description = "the key's budget with this month's usage", body = doc::Single<doc::Budget>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_READ)?;
    let key = key_in_env(&state, &caller, &id).await?;
    let found = state
        .store
        .budget(&caller.env.id, &key, state.clock.now())
        .await?
        .ok_or_else(|| ApiError::not_found("budget"))?;
    Ok(ok(view(&found)))
}

#[utoipa::path(
    put,
    path = "/budgets/{apiKeyId}",
    operation_id = "budgets_put",
    tag = "budgets",
    params(doc::ApiKeyPath, doc::IdempotencyHeader),
    request_body = doc::BudgetBody,
    responses(
        (status = 200, description = "the key's budget after the change", body = doc::Single<doc::Budget>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_WRITE)?;
    let map = body::object(&bytes)?;
    only_known(&map, &FIELDS)?;
    let request = json!({"op": "budget.put", "key": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let key = key_in_env(&state, &caller, &id).await?;
        let now = state.clock.now();
        let current = state.store.budget(&caller.env.id, &key, now).await?;
        let spec = apply(&map, current.map(|c| c.budget.spec))?;
        let limit_id = LimitId::from_unique(&crate::clock::unique());
        let status = state
            .store
            .put_budget(
                &caller.env.id,
                &key,
                &limit_id,
                &spec,
                &Actor::key(&caller.key.id, now),
            )
            .await
            .map_err(|e| match e {
                StoreError::NotFound { .. } => ApiError::not_found("api key"),
                e => e.into(),
            })?;
        Ok((StatusCode::OK, view(&status)))
    })
    .await
}

#[utoipa::path(
    delete,
    path = "/budgets/{apiKeyId}",
    operation_id = "budgets_delete",
    tag = "budgets",
    params(doc::ApiKeyPath, doc::IdempotencyHeader),
    responses(
        (status = 200, description = "the budget removed: the key is no longer capped", body = doc::Single<doc::BudgetDeleted>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_WRITE)?;
    let request = json!({"op": "budget.delete", "key": id});
    idempotent::run(&state, &caller, &headers, request, || async {
        let key = key_in_env(&state, &caller, &id).await?;
        let now = state.clock.now();
        let deleted = state
            .store
            .delete_budget(&caller.env.id, &key, &Actor::key(&caller.key.id, now))
            .await?;
        if !deleted {
            return Err(ApiError::not_found("budget"));
        }
        Ok((StatusCode::OK, json!({"apiKeyId": key, "deleted": true})))
    })
    .await
}
