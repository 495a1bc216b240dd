//! The billing reads: what the calling key recorded and may still start this month. Steward
//! bills nothing; these answer from the key's budget.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use steward_core::KeyId;
use utoipa::ToSchema;

/// What the calling key recorded this month.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BillingUsage {
    #[schema(value_type = String)]
    pub api_key_id: KeyId,
    pub period_start: String,
    pub period_end: String,
    /// Per dimension; only `invocations`.
    pub usage: BTreeMap<String, u64>,
    /// Always 0: Steward prices nothing.
    pub estimated_cost_cents: i64,
}

/// The calling key's cap this month.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BillingQuota {
    #[schema(value_type = String)]
    pub api_key_id: KeyId,
    pub period_start: String,
    pub period_end: String,
    /// Always `invocations`.
    pub dimension: String,
    /// Whether a live, enabled budget caps the key.
    pub budgeted: bool,
    pub cap: Option<i64>,
    pub used: i64,
    pub remaining: Option<i64>,
    pub reconciliation_required: bool,
}

/// The workspace's alert-only target: Steward has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkspaceBudget {
    /// Always `false`.
    pub enabled: bool,
    /// Always `true`.
    pub alert_only: bool,
    pub monthly_target_cents: Option<i64>,
    pub estimated_cost_cents: i64,
}

impl WorkspaceBudget {
    /// The only answer: no target, nothing estimated.
    pub fn none() -> Self {
        Self {
            enabled: false,
            alert_only: true,
            monthly_target_cents: None,
            estimated_cost_cents: 0,
        }
    }
}
