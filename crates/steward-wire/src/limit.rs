//! Impact limits and the answers to a delete.

use serde::{Deserialize, Serialize};
use steward_core::LimitId;
use utoipa::ToSchema;

/// An impact limit with its usage in the current window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limit {
    #[schema(value_type = String)]
    pub id: LimitId,
    pub name: String,
    pub dimension: String,
    pub unit: String,
    pub currency: Option<String>,
    /// `day` or `month` (a calendar window in UTC), or `total` (forever).
    pub period: String,
    pub amount: i64,
    pub action_name: Option<String>,
    /// Only effects whose resource starts with this count (`null`: every effect).
    pub resource_prefix: Option<String>,
    pub archived: bool,
    pub archived_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub window_start: String,
    pub consumed: i64,
    pub reserved: i64,
    pub unknown_exposure: i64,
    #[schema(minimum = 0)]
    pub available: i64,
}

/// A deleted action, policy or webhook subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Deleted {
    pub id: String,
    /// Always `true`.
    pub deleted: bool,
}

impl Deleted {
    pub fn new(id: impl ToString) -> Self {
        Self {
            id: id.to_string(),
            deleted: true,
        }
    }
}

/// A deleted secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretDeleted {
    pub name: String,
    /// Always `true`.
    pub deleted: bool,
}
