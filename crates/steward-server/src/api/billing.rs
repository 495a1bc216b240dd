//! `billing`: the reads a governed caller may want about its own spending, answered from its
//! key's budget (`app/billing.rs`). Steward is self-hosted and bills nothing: the hosted
//! product's plans, invoices, usage history, cost estimate and payment configuration answer
//! `FEATURE_NOT_AVAILABLE` (402, the SDK's `FeatureNotAvailableError`), documented in
//! docs/DECISIONS.md. Every read needs `impact-limits:read`.

use super::openapi as doc;
use super::query::Query;
use crate::app;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use std::collections::BTreeMap;
use steward_store::BUDGET_DIMENSION_INVOCATIONS;
use steward_wire::{BillingQuota, BillingUsage, WorkspaceBudget};

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
    let usage = app::billing::current_usage(&state, &caller).await?;
    Ok(ok(BillingUsage {
        api_key_id: usage.key_id,
        period_start: usage.month.start.to_rfc3339(),
        period_end: usage.month.end.to_rfc3339(),
        usage: BTreeMap::from([(BUDGET_DIMENSION_INVOCATIONS.to_string(), usage.invocations)]),
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
    let quota = app::billing::quota(&state, &caller).await?;
    Ok(ok(BillingQuota {
        api_key_id: quota.key_id.clone(),
        period_start: quota.month.start.to_rfc3339(),
        period_end: quota.month.end.to_rfc3339(),
        dimension: BUDGET_DIMENSION_INVOCATIONS.to_string(),
        budgeted: quota.budgeted,
        cap: quota.cap,
        used: quota.used,
        remaining: quota.remaining(),
        reconciliation_required: quota.exposure > 0,
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
    app::billing::workspace_budget(&caller)?;
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
                Err(app::billing::not_offered(&caller, $what))
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
