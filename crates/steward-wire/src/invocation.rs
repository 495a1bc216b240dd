//! One call of an action.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use steward_core::{ActionId, EffectId, InvocationId, OperationKey, Outcome, Stage};
use utoipa::ToSchema;

/// One call of an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Invocation {
    #[schema(value_type = String)]
    pub id: InvocationId,
    #[schema(value_type = String)]
    pub action_id: ActionId,
    /// The action's name (also `actionName`).
    pub action: String,
    pub action_name: String,
    pub action_version: u32,
    /// `<actionId>:v<actionVersion>`.
    pub action_version_id: String,
    /// `pending_approval`, `running`, `succeeded`, `failed`, `unknown`, `denied` or `expired`.
    pub status: String,
    pub pending_approval: bool,
    pub approval_id: Option<String>,
    /// The input as sent; in a list, an [`Elided`] marker when longer than 16 KiB.
    pub input: Value,
    #[schema(value_type = Option<String>)]
    pub operation_key: Option<OperationKey>,
    pub run_id: Option<String>,
    #[schema(value_type = Option<String>)]
    pub retry_of: Option<InvocationId>,
    pub response_status: Option<u16>,
    /// The provider's answer; in a list, an [`Elided`] marker when longer than 16 KiB.
    pub body: Option<Value>,
    pub error: Option<Value>,
    pub decision: Option<Value>,
    pub created_at: String,
    pub completed_at: Option<String>,
    pub duration_ms: Option<i64>,
    /// Governed invocations only, like the four fields after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub effect_id: Option<EffectId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub grade: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub outcome: Option<Outcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub stage: Option<Stage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub unresolved: Option<bool>,
    /// In a list only: the fields (`input`, `body`) left out because their JSON text is longer
    /// than 16 KiB; each holds an [`Elided`] marker instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub elided_fields: Option<Vec<String>>,
    /// When an approver edited the input before approving (edit-and-approve): the input the
    /// call runs with (`input` stays as sent, and is what the operation key is compared with);
    /// in a list, an [`Elided`] marker when longer than 16 KiB. Absent otherwise, like the three
    /// fields after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub edited_input: Option<Value>,
    /// What the edit changed, from `input` to `editedInput`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub input_edits: Option<Vec<crate::InputChange>>,
    /// The key that edited the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, value_type = Option<String>)]
    pub edited_by: Option<steward_core::KeyId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub edited_at: Option<String>,
    /// What the environment's shadow (log-only) policies that matched this call would have
    /// decided, had they been enforced; absent when none matched. The call was not affected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub shadow_decisions: Option<Vec<crate::ShadowDecision>>,
    /// Present while an operator's hold parks this invocation (`status` `running`, `stage`
    /// `ready`): it runs once when the hold is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub held: Option<crate::InvocationHeld>,
}

/// The five fields only a governed invocation carries, set together.
#[derive(Debug, Clone, PartialEq)]
pub struct Governed {
    pub effect_id: EffectId,
    pub grade: String,
    pub outcome: Outcome,
    pub stage: Stage,
    pub unresolved: bool,
}

impl Invocation {
    /// Sets the governed-only fields.
    pub fn governed(mut self, g: Governed) -> Self {
        self.effect_id = Some(g.effect_id);
        self.grade = Some(g.grade);
        self.outcome = Some(g.outcome);
        self.stage = Some(g.stage);
        self.unresolved = Some(g.unresolved);
        self
    }

    /// Sets the fields of an approver's edit of the input.
    pub fn edited(mut self, e: crate::InvocationEdit) -> Self {
        self.edited_input = Some(e.edited_input);
        self.input_edits = Some(e.input_edits);
        self.edited_by = Some(e.edited_by);
        self.edited_at = Some(e.edited_at);
        self
    }
}

/// What a list or tree shows in place of a field longer than 16 KiB (`LISTED_FIELD_BYTES_MAX`)
/// of JSON text: the field's size and the path that reads the record alone, whole. The record
/// names such fields in `elidedFields`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Elided {
    /// Always `true`.
    pub elided: bool,
    /// The size of the field left out, in bytes of its JSON text.
    pub bytes: u64,
    /// The path (under the server's origin) that reads the record whole.
    pub href: String,
}

/// `POST /actions/{reference}/invoke`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvokeBody {
    /// The action's input (default `{}`): a JSON object, unless the action's `inputSchema`
    /// declares another `type` (an array, a string...), when it is any value that schema accepts.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub run_id: Option<crate::Text>,
    /// The span of the run the invocation is made under (needs `runId`).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub parent_span_id: Option<crate::Text>,
    /// A failed invocation (`inv_...`) this one retries.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub retry_of: Option<crate::Text>,
    /// Names the business operation: the same key and input is the same effect.
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255)]
    pub operation_key: Option<crate::Text>,
    /// Binds the invoke to an execution-bound preview: same action version, same input, same
    /// rendered request, before it expires, and its first invoke; refused otherwise
    /// (`preview_expired`, `preview_superseded`, `preview_already_used`,
    /// `preview_action_changed`, `preview_mismatch`), with nothing recorded.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^prv_")]
    pub preview_id: Option<crate::Text>,
    /// Effects that must already hold an outcome (`succeeded`, `failed` or `not_dispatched`);
    /// pending and unknown never hold one. Refused with `dependency_not_satisfied`, nothing
    /// recorded, when one does not. Read as JSON: the core's parser names each entry it refuses.
    #[serde(default)]
    #[schema(value_type = Option<Vec<crate::Dependency>>, max_items = 16)]
    pub depends_on: Option<Value>,
    /// The settled effect this invoke compensates; both effects show the link.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^eff_")]
    pub compensates: Option<crate::Text>,
}
