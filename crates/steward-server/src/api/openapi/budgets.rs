//! The budgets API's path parameter, body and records (`api/budgets.rs`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::{IntoParams, ToSchema};

/// `monthlyCostCentsCap`: always `null` (a cost cap is refused at save and never reported).
fn always_null() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Null)
        .description(Some(
            "Always `null`: Steward prices no call, so it holds no cost cap.",
        ))
        .build()
}

/// The API key a budget caps, by id (`key_...`); a key of another environment is 404.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ApiKeyPath {
    /// The key's id.
    #[param(rename = "apiKeyId")]
    api_key_id: String,
}

/// `PUT /budgets/{apiKeyId}`: a field left out keeps its value (or its default on a new
/// budget); `null` clears a cap.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct BudgetBody {
    /// Only `null` (or left out): Steward prices no call, so a cost cap could never refuse and
    /// any number is `VALIDATION_ERROR` naming `monthlyCostCentsCap`.
    #[schema(schema_with = always_null)]
    monthly_cost_cents_cap: Option<i64>,
    /// Per dimension, the most it may count in a UTC calendar month; only `invocations`.
    dimension_caps: Option<BTreeMap<String, i64>>,
    /// The share of a cap past which the budget reports `alerting` (default 0.8).
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    alert_threshold: Option<f64>,
    /// A disabled budget counts and refuses nothing (default `true`).
    enabled: Option<bool>,
}

impl BudgetBody {
    pub const FIELDS: &[&str] = &super::super::budgets::FIELDS;
}

/// One dimension's usage in the current month.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct BudgetUsage {
    consumed: i64,
    reserved: i64,
    unknown_exposure: i64,
    /// `null` when the dimension has no cap.
    available: Option<i64>,
}

/// A key's budget with this month's usage.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Budget {
    api_key_id: String,
    enabled: bool,
    /// Always `null`: Steward prices no call, so it holds no cost cap.
    #[schema(schema_with = always_null)]
    monthly_cost_cents_cap: Option<i64>,
    dimension_caps: BTreeMap<String, i64>,
    alert_threshold: f64,
    /// Always `month`.
    period: String,
    window_start: String,
    usage: BTreeMap<String, BudgetUsage>,
    /// Always 0: Steward prices nothing.
    estimated_cost_cents: i64,
    alerting: bool,
    /// True while unknown effects hold exposure against the budget.
    reconciliation_required: bool,
    created_at: String,
    updated_at: String,
}

/// A deleted budget.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct BudgetDeleted {
    api_key_id: String,
    /// Always `true`.
    deleted: bool,
}
