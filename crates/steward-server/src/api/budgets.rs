//! `budgets`: per-API-key caps on what a key may start in a calendar month (UTC), enforced when
//! an invoke is admitted (`steward_store::budget`). Reading needs `impact-limits:read`; putting
//! and deleting need `impact-limits:write`, which no agent role holds: a budget is an operator's
//! cap on an agent's key, and the agent may read it but never raise it.
//!
//! One invocation counts 1 in the `invocations` dimension when it is recorded (approval-gated
//! ones included); its reservation is consumed when it succeeds, released when it fails or is
//! refused, denied or expired, and kept as exposure while its outcome is unknown. Steward prices
//! nothing, so `estimatedCostCents` is always 0, and a `monthlyCostCentsCap`, which could never
//! refuse, is refused at save (`app::budgets::COST_CAP_REFUSED`) and always answered as `null`.

use super::body;
use super::idempotent;
use super::openapi as doc;
use crate::app;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use steward_core::scopes;
use steward_store::{BudgetStatus, BUDGET_DIMENSION_INVOCATIONS};
use steward_wire::{Budget, BudgetBody, BudgetDeleted, BudgetUsage};

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
    let budgets = app::budgets::list(&state, &caller).await?;
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
    let found = app::budgets::get(&state, &caller, &id).await?;
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
        let status = app::budgets::put(&state, &caller, &id, put).await?;
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
        let key = app::budgets::delete(&state, &caller, &id).await?;
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
