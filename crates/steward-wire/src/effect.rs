//! The external write an invocation makes, and what its detail adds.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use steward_core::{
    ActionId, EffectId, EvidenceKind, EvidenceSource, InvocationId, KeyId, LimitId, OperationKey,
    Outcome, PreviewId, Stage,
};
use utoipa::ToSchema;

/// The external write an invocation makes. A listing shows the effect alone; a single effect
/// (its read and every recovery answer) adds the fields from `attempts` on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Effect {
    #[schema(value_type = String)]
    pub id: EffectId,
    #[schema(value_type = String)]
    pub invocation_id: InvocationId,
    #[schema(value_type = String)]
    pub action_id: ActionId,
    /// The action's name.
    pub action: String,
    #[schema(value_type = Option<String>)]
    pub operation_key: Option<OperationKey>,
    #[schema(value_type = String)]
    pub outcome: Outcome,
    #[schema(value_type = String)]
    pub stage: Stage,
    pub grade: String,
    pub unresolved: bool,
    pub attempt_count: u32,
    pub external_reference: Option<String>,
    pub provider_idempotency_key: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// On a single effect, not in listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub attempts: Option<Vec<Attempt>>,
    /// On a single effect, not in listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub evidence: Option<Vec<Evidence>>,
    /// On a single effect, not in listings: each impact limit's hold on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub reservations: Option<Vec<Reservation>>,
    /// On a single effect, not in listings: the preview it was bound to (`null`: none), as
    /// `GET /previews/{id}` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub preview: Option<Option<crate::Preview>>,
    /// On a single effect, not in listings: the effects that held these outcomes when it was
    /// recorded (its invoke's `dependsOn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub depends_on: Option<Vec<Dependency>>,
    /// On a single effect, not in listings: the id of its preview (`null`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub preview_id: Option<Option<PreviewId>>,
    /// On a single effect, not in listings: the settled effect it compensates (`null`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub compensates: Option<Option<EffectId>>,
    /// On a single effect, not in listings: the effects recorded as its compensations, oldest id
    /// first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<Vec<String>>)]
    pub compensated_by: Option<Vec<EffectId>>,
}

/// One attempt to send an effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attempt {
    pub number: u32,
    pub status: String,
    pub started_at: String,
    pub deadline_at: String,
    pub finished_at: Option<String>,
    pub response_status: Option<u16>,
    pub error: Option<String>,
}

/// One entry of an effect's evidence log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Evidence {
    pub seq: u32,
    pub at: String,
    #[schema(value_type = String)]
    pub kind: EvidenceKind,
    #[schema(value_type = String)]
    pub source: EvidenceSource,
    pub message: String,
    pub data: Option<Value>,
    #[schema(value_type = Option<String>)]
    pub actor_key_id: Option<KeyId>,
    /// The name of the key in `actorKeyId`; `null` for the system or a key that is not one of
    /// the environment's.
    pub actor_key_name: Option<String>,
}

/// One impact limit's hold on an effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reservation {
    #[schema(value_type = String)]
    pub limit_id: LimitId,
    pub limit_name: String,
    pub amount: i64,
    /// `reserved`, `consumed`, `released` or `exposure` (an unknown outcome: it may have happened).
    pub state: String,
    pub window_start: String,
}

/// One entry of an invoke's `dependsOn`: the effect had to hold this outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dependency {
    #[schema(value_type = String)]
    pub effect: EffectId,
    /// `succeeded`, `failed` or `not_dispatched`.
    pub outcome: String,
}
