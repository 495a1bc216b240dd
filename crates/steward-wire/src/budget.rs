//! Per-key budgets: the view of a key's cap with this month's usage, and the body that puts
//! one.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use steward_core::KeyId;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::ToSchema;

/// `monthlyCostCentsCap`: always `null` (a cost cap is refused at save and never reported).
fn always_null() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Null)
        .description(Some(
            "Always `null`: Steward prices no call, so it holds no cost cap.",
        ))
        .build()
}

/// One dimension's usage in the current month.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetUsage {
    pub consumed: i64,
    pub reserved: i64,
    pub unknown_exposure: i64,
    /// `null` when the dimension has no cap.
    pub available: Option<i64>,
}

/// A key's budget with this month's usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    #[schema(value_type = String)]
    pub api_key_id: KeyId,
    pub enabled: bool,
    /// Always `null`: never the stored value (a cap put before caps were refused at save
    /// enforces nothing, and the answer must not claim one).
    #[schema(schema_with = always_null)]
    pub monthly_cost_cents_cap: Option<i64>,
    pub dimension_caps: BTreeMap<String, i64>,
    pub alert_threshold: f64,
    /// Always `month`.
    pub period: String,
    pub window_start: String,
    pub usage: BTreeMap<String, BudgetUsage>,
    /// Always 0: Steward prices nothing.
    pub estimated_cost_cents: i64,
    pub alerting: bool,
    /// True while unknown effects hold exposure against the budget.
    pub reconciliation_required: bool,
    pub created_at: String,
    pub updated_at: String,
}

/// A deleted budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetDeleted {
    #[schema(value_type = String)]
    pub api_key_id: KeyId,
    /// Always `true`.
    pub deleted: bool,
}

/// `PUT /budgets/{apiKeyId}`: a field left out keeps its value (or its default on a new
/// budget); `null` clears a cap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetBody {
    /// Only `null` (or left out): Steward prices no call, so a cost cap could never refuse and
    /// any value is `VALIDATION_ERROR` naming `monthlyCostCentsCap`. Read as any JSON so the
    /// server can refuse it with that reason.
    #[serde(default)]
    #[schema(schema_with = always_null)]
    pub monthly_cost_cents_cap: Option<Value>,
    /// Per dimension, the most it may count in a UTC calendar month; only `invocations`.
    /// `null` clears every cap.
    #[serde(
        default,
        deserialize_with = "crate::nullable::field",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<BTreeMap<String, i64>>)]
    pub dimension_caps: Option<Option<BTreeMap<String, i64>>>,
    /// The share of a cap past which the budget reports `alerting` (default 0.8).
    #[serde(default)]
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    pub alert_threshold: Option<f64>,
    /// A disabled budget counts and refuses nothing (default `true`).
    #[serde(default)]
    pub enabled: Option<bool>,
}
