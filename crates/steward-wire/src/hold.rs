//! Holds (`/holds`): an operator's hold on an action, an operation key, or that key under that
//! action. New invocations it covers are parked; releasing it runs each once.

use crate::Text;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hold {
    /// `hold_...`
    pub id: String,
    /// The action held, if the hold names one.
    pub action_name: Option<String>,
    /// The operation key held, if the hold names one.
    pub operation_key: Option<String>,
    pub reason: Option<String>,
    /// The key that made it.
    pub created_by: String,
    pub created_at: String,
    /// In the answer to a release only: how many parked invocations it dispatched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub released: Option<u64>,
}

/// `POST /holds`: an action, an operation key, or both (that key under that action).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HoldBody {
    /// The name of an action of the environment (at most `ACTION_NAME_LEN_MAX` bytes).
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 64)]
    pub action_name: Option<Text>,
    /// An operation key (at most `CLIENT_KEY_LEN_MAX` bytes).
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255)]
    pub operation_key: Option<Text>,
    /// Why, shown to whoever releases it (at most `HOLD_REASON_LEN_MAX` bytes).
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 1000)]
    pub reason: Option<Text>,
}

/// `POST /holds/{id}/release`: no fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HoldReleaseBody {}

/// On an invocation parked by a hold: which hold, and why. The invocation's `status` stays
/// `running` and its `stage` `ready` (values the SDK knows); it runs once when the hold is
/// released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvocationHeld {
    /// `hold_...`
    pub hold_id: String,
    pub reason: Option<String>,
}
