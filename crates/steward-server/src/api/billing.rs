//! `billing`: the reads a governed caller may want about its own spending, answered from its
//! key's budget (`api/budgets.rs`). Steward is self-hosted and bills nothing: the hosted
//! product's plans, invoices, usage history, cost estimate and payment configuration answer
//! `FEATURE_NOT_AVAILABLE` (402, the SDK's `FeatureNotAvailableError`), documented in
//! docs/DECISIONS.md. Every read needs `impact-limits:read`.

use super::openapi as doc;
use super::query::Query;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{codes, ApiError, ApiResult};
use crate::state::AppState;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use std::collections::BTreeMap;
use steward_core::impact::Period;
use steward_core::{scopes, Millis};
use steward_store::BUDGET_DIMENSION_INVOCATIONS;
use steward_wire::{BillingQuota, BillingUsage, WorkspaceBudget};

/// Long enough from a month's first instant to land in the next month, in milliseconds.
const MONTH_SPAN_MS_MAX: i64 = 32 * 86_400_000;

/// The UTC calendar month containing `now`: `(start, end)`, end exclusive.
fn month(now: Millis) -> (Millis, Millis) {
    let start = Period::Month.window_start(now);
    let end = Period::Month.window_start(Millis(start.0 + MONTH_SPAN_MS_MAX));
    (start, end)
}

fn not_offered(what: &str) -> ApiError {
    ApiError::of(
        codes::FEATURE_NOT_AVAILABLE,
        format!("{what} is not offered by Steward: it is self-hosted and bills nothing"),
    )
}

#[utoipa::path(
    get,
    path = "/billing/usage/current",
    operation_id = "billing_current_usage",
    tag = "billing",
    responses(
        (status = 200, description = "what the calling key recorded this month", body = doc::Single<doc::BillingUsage>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn current_usage(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_READ)?;
    let (start, end) = month(state.clock.now());
    let invocations = state
        .store
        .key_invocations_since(&caller.env.id, &caller.key.id, start)
        .await?;
    Ok(ok(BillingUsage {
        api_key_id: caller.key.id.clone(),
        period_start: start.to_rfc3339(),
        period_end: end.to_rfc3339(),
        usage: BTreeMap::from([(BUDGET_DIMENSION_INVOCATIONS.to_string(), invocations)]),
        estimated_cost_cents: 0,
    }))
}

#[utoipa::path(
    get,
    path = "/billing/quota",
    operation_id = "billing_quota",
    tag = "billing",
    responses(
        (status = 200, description = "the calling key's cap this month and what is left of it", body = doc::Single<doc::BillingQuota>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn quota(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_READ)?;
    let now = state.clock.now();
    let (start, end) = month(now);
    let budget = state
        .store
        .budget(&caller.env.id, &caller.key.id, now)
        .await?
        .filter(|b| b.budget.spec.enabled);
    let (cap, used, exposure) = match &budget {
        Some(b) => (
            b.budget.spec.invocations_cap(),
            b.usage.used(),
            b.usage.exposure,
        ),
        None => {
            let count = state
                .store
                .key_invocations_since(&caller.env.id, &caller.key.id, start)
                .await?;
            (None, i64::try_from(count).unwrap_or(i64::MAX), 0)
        }
    };
    Ok(ok(BillingQuota {
        api_key_id: caller.key.id.clone(),
        period_start: start.to_rfc3339(),
        period_end: end.to_rfc3339(),
        dimension: BUDGET_DIMENSION_INVOCATIONS.to_string(),
        budgeted: budget.is_some(),
        cap,
        used,
        remaining: cap.map(|cap| cap.saturating_sub(used).max(0)),
        reconciliation_required: exposure > 0,
    }))
}

#[utoipa::path(
    get,
    path = "/billing/budget",
    operation_id = "billing_workspace_budget",
    tag = "billing",
    responses(
        (status = 200, description = "the workspace's alert-only spending target: Steward has none (caps are per key, `budgets`)", body = doc::Single<doc::WorkspaceBudget>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn workspace_budget(caller: Caller) -> ApiResult<Response> {
    caller.require(scopes::IMPACT_LIMITS_READ)?;
    Ok(ok(WorkspaceBudget::none()))
}

/// `days` of `GET /billing/usage/history`, checked and not used.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // Parsed to be checked, not used.
pub struct HistoryQuery {
    days: Option<u32>,
}

/// `limit` of `GET /billing/invoices`, checked and not used.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // Parsed to be checked, not used.
pub struct InvoicesQuery {
    limit: Option<u32>,
}

/// The hosted product's billing reads Steward does not offer, one handler each (the router
/// needs a function per route). Their query parameters (`days`, `limit`) are checked and not
/// documented: nothing is listed, so there is nothing to page.
macro_rules! not_offered {
    ($($name:ident, $path:literal, $what:literal $(, $query:ty)?;)+) => {
        $(
            #[utoipa::path(
                get,
                path = $path,
                operation_id = concat!("billing_", stringify!($name)),
                tag = "billing",
                responses(
                    doc::NotOffered,
                    doc::Guarded,
                    doc::Invalid,
                )
            )]
            pub async fn $name(caller: Caller $(, _query: Query<$query>)?) -> ApiResult<Response> {
                caller.require(scopes::IMPACT_LIMITS_READ)?;
                Err(not_offered($what))
            }
        )+
    };
}

not_offered! {
    current_plan, "/billing/plan", "a billing plan";
    plans, "/billing/plans", "billing plans";
    usage_history, "/billing/usage/history", "usage history", HistoryQuery;
    cost_estimate, "/billing/cost-estimate", "a cost estimate";
    invoices, "/billing/invoices", "invoices", InvoicesQuery;
    stripe_config, "/billing/stripe-config", "payment configuration";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_runs_from_its_first_instant_to_the_next_months() {
        // 2026-02-14T12:00:00Z
        let (start, end) = month(Millis(1_771_070_400_000));
        assert_eq!(start.to_rfc3339(), "2026-02-01T00:00:00.000Z");
        assert_eq!(end.to_rfc3339(), "2026-03-01T00:00:00.000Z");
    }
}
