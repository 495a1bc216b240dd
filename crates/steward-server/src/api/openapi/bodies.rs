//! Request bodies as schemas. Handlers parse bodies by hand (`body::object` then
//! `body::only_known(map, FIELDS)`); each body here carries the field list its handler passes to
//! `only_known`, and a test (`openapi_tests/drift.rs`) checks that list equals the schema's properties.
//!
//! Every body is a JSON object; an empty body reads as `{}`. A field sent as `null` reads as left
//! out, so optional fields are nullable.
//!
//! `utoipa` takes only literals for bounds; `openapi_tests/drift.rs` checks each against its named constant.

#![allow(dead_code)]

use serde_json::Value;
use utoipa::ToSchema;

/// What a policy matches on.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum MatchKind {
    Any,
    Action,
    Custom,
}

/// What a matching policy decides.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum PolicyEffect {
    RequireApproval,
    AutoApprove,
    AutoDeny,
}

/// `POST /approval-policies` and `PATCH /approval-policies/{id}`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyBody {
    /// Required on create.
    #[schema(min_length = 1, max_length = 100)]
    name: Option<String>,
    match_kind: Option<MatchKind>,
    match_action_name: Option<String>,
    match_agent_id: Option<String>,
    match_user_id: Option<String>,
    #[schema(max_items = 20)]
    match_tags: Option<Vec<String>>,
    #[schema(minimum = 0)]
    min_amount: Option<f64>,
    /// A CEL expression over `input`, `action`, `agentId` and `amount`.
    #[schema(max_length = 4096)]
    condition: Option<String>,
    effect: Option<PolicyEffect>,
    #[schema(minimum = 1, maximum = 10)]
    required_approvals: Option<u32>,
    #[schema(minimum = -1000000, maximum = 1000000)]
    priority: Option<i64>,
    enabled: Option<bool>,
    acknowledge_broad_scope: Option<bool>,
    /// A structured condition, compiled to CEL (both must hold when `condition` is set too):
    /// `{all: [...]}`, `{any: [...]}`, `{not: ...}` or `{field, op, value}` with `field`
    /// `input.<name>...`, `amount`, `action` or `agentId` and `op` eq, ne, gt, gte, lt, lte, in,
    /// contains or exists; at most 8 levels and 64 nodes.
    #[schema(value_type = Option<Object>)]
    conditions: Option<Value>,
    /// Recorded on the version this change creates.
    change_note: Option<String>,
}

/// `DELETE /approval-policies/{id}`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyDeleteBody {
    change_note: Option<String>,
}

impl PolicyDeleteBody {
    pub const FIELDS: &[&str] = &["changeNote"];
}

/// What kind of request `evaluate` describes.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum RequestKind {
    Action,
    Custom,
}

/// `POST /approval-policies/evaluate`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct EvaluateBody {
    kind: RequestKind,
    action_name: Option<String>,
    agent_id: Option<String>,
    user_id: Option<String>,
    #[schema(value_type = Object)]
    payload: Option<Value>,
}

/// `POST /actions/{reference}/previews`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PreviewBody {
    /// The input the invoke will carry.
    #[schema(value_type = Option<Object>)]
    input: Option<Value>,
    /// How long the preview may be bound to, in seconds (default 600, at most 3600).
    #[schema(minimum = 1, maximum = 3600)]
    ttl_seconds: Option<u64>,
    run_id: Option<String>,
}

/// `POST /actions/previews/{id}/refresh`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PreviewRefreshBody {
    /// The new preview's life, in seconds (default 600, at most 3600).
    #[schema(minimum = 1, maximum = 3600)]
    ttl_seconds: Option<u64>,
}

/// `POST /actions/effects/{id}/notes`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoteBody {
    #[schema(min_length = 1)]
    note: String,
}

impl NoteBody {
    pub const FIELDS: &[&str] = &["note"];
}

/// `POST /approval-policies/files/plan`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyFilePlanBody {
    /// The policy file: YAML or JSON text, `{policies: [...]}` (at most 256 KiB, 200 policies).
    source: String,
}

/// `POST /approval-policies/files/apply`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyFileApplyBody {
    /// The same file that was planned.
    source: String,
    /// The plan's `digest`: the change is applied only if it still describes it exactly.
    digest: String,
    #[schema(max_length = 1000)]
    change_note: Option<String>,
}

/// `POST /approval-policies/files/test`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyFileTestBody {
    source: String,
    /// The cases: a list of `{name, kind, actionName, agentId, userId, tags, payload, expect}`
    /// (at most 500), or YAML or JSON text of one.
    #[schema(value_type = Object)]
    cases: Value,
}

/// `POST /runs`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct RunStartBody {
    #[schema(min_length = 1, max_length = 200)]
    name: Option<String>,
    #[schema(min_length = 1, max_length = 200)]
    agent_id: Option<String>,
    #[schema(min_length = 1, max_length = 200)]
    agent_version: Option<String>,
    /// The user the run acts for: what approval policies' `matchUserId` sees for invocations
    /// that name this run.
    #[schema(min_length = 1, max_length = 200)]
    user_id: Option<String>,
    #[schema(min_length = 1, max_length = 200)]
    application: Option<String>,
    input: Option<Value>,
    /// At most 32 tags of 1 to 64 characters: what policies' `matchTags` see.
    #[schema(max_items = 32)]
    tags: Option<Vec<String>>,
    metadata: Option<Value>,
}

/// `PATCH /runs/{id}`: end the run (a terminal status) or update a running one.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunEndBody {
    /// `running`, `succeeded`, `failed` or `cancelled`.
    status: Option<String>,
    output: Option<Value>,
    error: Option<Value>,
    #[schema(minimum = 0)]
    tokens: Option<u64>,
    #[schema(minimum = 0)]
    cost: Option<f64>,
    metadata: Option<Value>,
}

/// `POST /runs/{id}/spans`: 1 to 100 spans. Each span: `id` (chosen by the client so a retry or
/// the span's end replaces it), `parentSpanId` (or `parentId`), `name`, `type` (`model_call`,
/// `tool_call`, `workflow_step`, `custom`), `status`, `startedAt`, `endedAt`, `input`,
/// `output`, `error`, `attributes` (at most 16 KiB of JSON), `metadata`, `tokens`, `cost`,
/// `model`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpansBody {
    #[schema(min_items = 1, max_items = 100)]
    spans: Vec<Value>,
}

/// `POST /runs/{id}/feedback`: a rating, a label or a comment at least.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct FeedbackBody {
    span_id: Option<String>,
    source: Option<String>,
    label: Option<String>,
    rating: Option<f64>,
    #[schema(max_length = 4000)]
    comment: Option<String>,
    metadata: Option<Value>,
}

/// `POST /runs/import`: one OTLP/JSON trace, as `GET /runs/{id}/export` answers it. Exactly
/// one span has no `parentSpanId`: it becomes the run; the others become its spans.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct TraceBody {
    #[schema(min_items = 1)]
    resource_spans: Vec<Value>,
}
