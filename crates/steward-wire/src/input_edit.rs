//! Edit-and-approve on the wire: what an approval and an invocation show of an approver's edit
//! of the input (`POST /approvals/{id}/approve` with `input`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use steward_core::KeyId;
use utoipa::ToSchema;

/// An approval whose gated invocation's input an approver edited: who, when, and the input
/// fingerprint it was requested with (`inputFingerprint` is the edit's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalEdit {
    /// The key that edited the input: its approval of the edit is refused
    /// (`own_edit_decision_forbidden`).
    #[schema(value_type = String)]
    pub edited_by: KeyId,
    /// The name of that key; `null` when the key is not one of the environment's.
    pub edited_by_name: Option<String>,
    pub edited_at: String,
    /// The fingerprint of the input as the caller sent it.
    pub original_input_fingerprint: String,
}

/// One change from the input as sent to the input as edited: a JSON Patch (RFC 6902)
/// operation at a JSON Pointer (RFC 6901), with the value before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputChange {
    /// `add`, `remove` or `replace`.
    pub op: String,
    /// The JSON Pointer of the changed member (`/amount`; empty for the whole input).
    pub path: String,
    /// The value the caller sent (absent for `add`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub before: Option<Value>,
    /// The value the call runs with (absent for `remove`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub after: Option<Value>,
}

/// The fields an invocation carries when an approver edited its input, set together.
#[derive(Debug, Clone, PartialEq)]
pub struct InvocationEdit {
    pub edited_input: Value,
    pub input_edits: Vec<InputChange>,
    pub edited_by: KeyId,
    pub edited_at: String,
}
