//! The billing reads' records (`api/billing.rs`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use utoipa::ToSchema;

/// What the calling key recorded this month.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct BillingUsage {
    api_key_id: String,
    period_start: String,
    period_end: String,
    /// Per dimension; only `invocations`.
    usage: BTreeMap<String, u64>,
    /// Always 0: Steward prices nothing.
    estimated_cost_cents: i64,
}

/// The calling key's cap this month.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct BillingQuota {
    api_key_id: String,
    period_start: String,
    period_end: String,
    /// Always `invocations`.
    dimension: String,
    /// Whether a live, enabled budget caps the key.
    budgeted: bool,
    cap: Option<i64>,
    used: i64,
    remaining: Option<i64>,
    reconciliation_required: bool,
}

/// The workspace's alert-only target: Steward has none.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct WorkspaceBudget {
    /// Always `false`.
    enabled: bool,
    /// Always `true`.
    alert_only: bool,
    monthly_target_cents: Option<i64>,
    estimated_cost_cents: i64,
}
