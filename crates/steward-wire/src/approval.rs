//! Approval requests and the answer to a decision.

use crate::Invocation;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use steward_core::{ActionId, ApprovalId, Decision, EffectId, InvocationId, KeyId};
use utoipa::ToSchema;

/// An approval request: gated invocations and custom requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Approval {
    #[schema(value_type = String)]
    pub id: ApprovalId,
    /// `pending`, `approved`, `denied` or `expired`.
    pub status: String,
    pub title: String,
    pub description: Option<String>,
    pub payload: Value,
    #[schema(value_type = Option<String>)]
    pub invocation_id: Option<InvocationId>,
    #[schema(value_type = Option<String>)]
    pub effect_id: Option<EffectId>,
    #[schema(value_type = Option<String>)]
    pub action_id: Option<ActionId>,
    pub action_version: Option<u32>,
    pub input_fingerprint: Option<String>,
    #[schema(value_type = String)]
    pub requested_by: KeyId,
    /// The name of the key in `requestedBy` (a revoked key keeps its name); `null` when the
    /// key is not one of the environment's.
    pub requested_by_name: Option<String>,
    pub required_approvals: u32,
    pub decisions: Vec<ApprovalDecision>,
    pub decision_origin: Option<String>,
    /// The note of the decision that settled it (`null` while pending or for an expiry).
    pub decision_note: Option<String>,
    pub decided_at: Option<String>,
    pub expires_at: Option<String>,
    pub run_id: Option<String>,
    pub created_at: String,
    /// When an approver edited the gated invocation's input: who, when, and the fingerprint it
    /// was requested with. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub edit: Option<crate::ApprovalEdit>,
}

/// One key's decision on an approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalDecision {
    #[schema(value_type = String)]
    pub key_id: KeyId,
    /// The name of the key in `keyId`; `null` when the key is not one of the environment's.
    pub key_name: Option<String>,
    /// `approve` or `deny`.
    #[schema(value_type = String)]
    pub decision: Decision,
    pub note: Option<String>,
    pub at: String,
}

/// What approving or denying answers: the approval, and the invocation it gated as it stands
/// after the decision (`null` for a custom request).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Decided {
    pub approval: Approval,
    pub invocation: Option<Invocation>,
    /// Why the decision changed nothing (the approval had expired or was settled, or this key
    /// had already decided it); `null` when it counted. The console shows the same reason.
    pub unchanged: Option<Unchanged>,
}

/// Why a decision changed nothing: a stable code and a sentence for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Unchanged {
    /// `approval_expired`, `approval_already_decided` or `already_decided_by_this_key`.
    pub code: String,
    pub message: String,
}

/// `POST /approvals`: a custom approval request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalRequestBody {
    /// Required (the server names it when it is missing or blank).
    #[serde(default)]
    #[schema(required = true, value_type = String, min_length = 1)]
    pub title: Option<crate::Text>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub description: Option<crate::Text>,
    /// A JSON object (default `{}`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub payload: Option<Value>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2592000)]
    pub expires_in_seconds: Option<i64>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub run_id: Option<crate::Text>,
    /// Accepted for the SDK, which sends it; not recorded.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub parent_span_id: Option<crate::Text>,
}
