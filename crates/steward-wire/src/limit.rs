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

/// The window a limit counts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Day,
    Month,
    Total,
}

/// `POST /impact-limits`. The server reads the limit from the body's object (the core's
/// `LimitSpec::from_create` names each field it refuses), after refusing any field this type
/// does not describe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitBody {
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
    /// `money`, `resource_mutations`, or a unit of your own.
    #[schema(pattern = "^[a-z][a-z0-9_]{0,31}$")]
    pub dimension: String,
    #[schema(inline)]
    pub period: Period,
    /// A non-negative integer in the limit's unit (minor units for money).
    #[schema(minimum = 0, maximum = 1000000000000000_i64)]
    pub amount: i64,
    /// A three-letter currency such as `usd`; required for money.
    #[schema(pattern = "^[A-Za-z]{3}$")]
    pub currency: Option<String>,
    pub unit: Option<String>,
    /// Only invocations of this action count.
    pub action_name: Option<String>,
    /// Only effects whose resource (the URL of what they change: a refund's payment intent, a
    /// template action's rendered URL) starts with this count; an effect whose resource cannot
    /// be told counts anyway.
    #[schema(min_length = 1, max_length = 512)]
    pub resource_prefix: Option<String>,
}

/// `PATCH /impact-limits/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitUpdateBody {
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 100)]
    pub name: Option<crate::Text>,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1000000000000000_i64)]
    pub amount: Option<i64>,
}
