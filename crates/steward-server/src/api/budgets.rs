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

use super::body;
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
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use steward_core::impact::LIMIT_AMOUNT_MAX;
use steward_core::{scopes, KeyId, LimitId};
use steward_store::{Actor, BudgetSpec, BudgetStatus, StoreError, BUDGET_DIMENSION_INVOCATIONS};
use steward_wire::{Budget, BudgetBody, BudgetDeleted, BudgetUsage};

/// The alert threshold a new budget gets when the put names none: the share of a cap past which
/// the view reports `alerting` (the hosted product's documented default is the same 80%).
pub(crate) const BUDGET_ALERT_THRESHOLD_DEFAULT: f64 = 0.8;

/// Why a put naming a cost cap is refused: nothing prices a call (every call would cost 0
/// cents), so the cap could never refuse, and a stored cap that never refuses would mislead.
pub(crate) const COST_CAP_REFUSED: &str = "Steward prices no call (every call costs 0 cents), so a cost cap could never refuse; leave it out or null, and cap `dimensionCaps.invocations` instead";

fn view(s: &BudgetStatus) -> Budget {
    let b = &s.budget;
    let u = s.usage;
    let cap = b.spec.invocations_cap();
    let used = u.used();
    let alerting =
        b.spec.enabled && cap.is_some_and(|cap| used as f64 >= b.spec.alert_threshold * cap as f64);
    let usage = BudgetUsage {
        consumed: u.consumed,
        reserved: u.reserved,
        unknown_exposure: u.exposure,
        available: cap.map(|cap| u.available(cap)),
    };
    Budget {
        api_key_id: b.key_id.clone(),
        enabled: b.spec.enabled,
        // Never the stored value: a cap put before caps were refused at save enforces nothing,
        // and the answer must not claim one.
        monthly_cost_cents_cap: None,
        dimension_caps: b.spec.dimension_caps.clone(),
        alert_threshold: b.spec.alert_threshold,
        period: "month".to_string(),
        window_start: s.window_start.to_rfc3339(),
        usage: BTreeMap::from([(BUDGET_DIMENSION_INVOCATIONS.to_string(), usage)]),
        estimated_cost_cents: 0,
        alerting,
        reconciliation_required: u.exposure > 0,
        created_at: b.created_at.to_rfc3339(),
        updated_at: b.updated_at.to_rfc3339(),
    }
}

/// The API key a budget caps, by id (`key_...`); a key of another environment is 404.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ApiKeyPath {
    /// The key's id.
    #[param(rename = "apiKeyId")]
    #[serde(rename = "apiKeyId")]
    api_key_id: String,
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

fn amount(field: &str, value: i64) -> ApiResult<i64> {
    if (0..=LIMIT_AMOUNT_MAX).contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::validation(
            field,
            format!("must be an integer from 0 to {LIMIT_AMOUNT_MAX}"),
        ))
    }
}

fn dimension_caps(given: BTreeMap<String, i64>) -> ApiResult<BTreeMap<String, i64>> {
    let mut caps = BTreeMap::new();
    for (dimension, cap) in given {
        let field = format!("dimensionCaps.{dimension}");
        if dimension != BUDGET_DIMENSION_INVOCATIONS {
            return Err(ApiError::validation(
                field,
                format!(
                    "is not a dimension Steward counts (only `{BUDGET_DIMENSION_INVOCATIONS}`)"
                ),
            ));
        }
        caps.insert(dimension, amount(&field, cap)?);
    }
    Ok(caps)
}

/// The spec after applying the body to `current` (or to the defaults): a field left out keeps
/// its value, `null` clears a cap. A cost cap is refused ([`COST_CAP_REFUSED`]); one stored by
/// an earlier version is cleared by any put.
fn apply(body: BudgetBody, current: Option<BudgetSpec>) -> ApiResult<BudgetSpec> {
    let mut spec = current.unwrap_or(BudgetSpec {
        monthly_cost_cents_cap: None,
        dimension_caps: BTreeMap::new(),
        alert_threshold: BUDGET_ALERT_THRESHOLD_DEFAULT,
        enabled: true,
    });
    if body.monthly_cost_cents_cap.is_some() {
        return Err(ApiError::validation(
            "monthlyCostCentsCap",
            COST_CAP_REFUSED,
        ));
    }
    spec.monthly_cost_cents_cap = None;
    match body.dimension_caps {
        None => {}
        Some(None) => spec.dimension_caps.clear(),
        Some(Some(caps)) => spec.dimension_caps = dimension_caps(caps)?,
    }
    if let Some(t) = body.alert_threshold {
        if !(t > 0.0 && t <= 1.0) {
            return Err(ApiError::validation(
                "alertThreshold",
                "must be a number greater than 0 and at most 1",
            ));
        }
        spec.alert_threshold = t;
    }
    if let Some(enabled) = body.enabled {
        spec.enabled = enabled;
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
    Ok(ok(budgets.iter().map(view).collect::<Vec<_>>()))
}

#[utoipa::path(
    get,
    path = "/budgets/{apiKeyId}",
    operation_id = "budgets_get",
    tag = "budgets",
    params(ApiKeyPath),
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
    Path(ApiKeyPath { api_key_id: id }): Path<ApiKeyPath>,
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
    params(ApiKeyPath, doc::IdempotencyHeader),
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
    Path(ApiKeyPath { api_key_id: id }): Path<ApiKeyPath>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_WRITE)?;
    let map = body::object(&bytes)?;
    let put: BudgetBody = body::typed(&map)?;
    let request = json!({"op": "budget.put", "key": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let key = key_in_env(&state, &caller, &id).await?;
        let now = state.clock.now();
        let current = state.store.budget(&caller.env.id, &key, now).await?;
        let spec = apply(put, current.map(|c| c.budget.spec))?;
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
    params(ApiKeyPath, doc::IdempotencyHeader),
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
    Path(ApiKeyPath { api_key_id: id }): Path<ApiKeyPath>,
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
        Ok((
            StatusCode::OK,
            BudgetDeleted {
                api_key_id: key,
                deleted: true,
            },
        ))
    })
    .await
}
