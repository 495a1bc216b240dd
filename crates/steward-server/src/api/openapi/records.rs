//! What `data` holds in each success answer, as schemas. They mirror the `json!` views in
//! `api/views.rs`, `policies.rs`, `limits.rs`, `environment.rs` and `identity.rs`; every field
//! those views write is present (`null` when empty), and no other field may appear
//! (`deny_unknown_fields`), so `openapi_tests/drift.rs` and the fuzzer notice a view that changes alone.
//!
//! Timestamps are RFC 3339 strings. `Value` fields hold any JSON the client or provider sent.

#![allow(dead_code)]

use serde_json::Value;
use utoipa::ToSchema;

/// One span of a run (`GET /runs/{id}/spans`, `GET /runs/{id}/spans/{spanId}`): the span as
/// ingested (`id`, `parentSpanId`, `name`, `type`, `status`, times, `input`, `output`,
/// `attributes`, ...) with `runId`, `ingestedAt` and `updatedAt`. In a page, a field longer
/// than 16 KiB is an [`Elided`] marker and `elidedFields` names it; the single-span read
/// returns the span whole.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct Span {
    id: String,
    parent_span_id: Option<String>,
    name: Option<String>,
    #[schema(required = false)]
    r#type: Option<String>,
    #[schema(required = false)]
    status: Option<String>,
    #[schema(required = false, value_type = Option<Object>)]
    input: Option<Value>,
    #[schema(required = false, value_type = Option<Object>)]
    output: Option<Value>,
    run_id: String,
    ingested_at: String,
    updated_at: String,
    #[schema(required = false)]
    elided_fields: Option<Vec<String>>,
}

/// A node of a run's `spanTree`: the span's outline, never its content; `href` reads the span
/// whole.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct SpanNode {
    id: String,
    parent_span_id: Option<String>,
    name: Option<String>,
    r#type: Option<String>,
    status: Option<String>,
    /// The stored span's size, in bytes of its JSON text.
    bytes: u64,
    href: String,
    #[schema(no_recursion)]
    children: Vec<SpanNode>,
}

/// An execution-bound preview: what an invoke would send, read from the provider before it.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Preview {
    #[schema(pattern = "^prv_")]
    id: String,
    action_id: String,
    action: String,
    action_version: u32,
    #[schema(value_type = Object)]
    input: Value,
    run_id: Option<String>,
    /// `active`, `expired`, `superseded` (refreshed) or `used` (bound to an invocation).
    status: String,
    created_at: String,
    expires_at: String,
    ttl_seconds: u64,
    /// The preview this one refreshed.
    refreshes: Option<String>,
    /// The preview that refreshed this one.
    superseded_by: Option<String>,
    /// The effect bound to it.
    effect_id: Option<String>,
    /// The exact request: method, URL, headers and body, secrets redacted, per-invoke ids as
    /// placeholders.
    #[schema(value_type = Object)]
    request: Value,
    /// What was read from the provider, read-only.
    #[schema(value_type = Vec<Object>)]
    reads: Vec<Value>,
    /// Each precondition and whether it held (`null`: could not be told).
    #[schema(value_type = Vec<Object>)]
    preconditions: Vec<Value>,
    /// Each applicable impact limit: the amount, the limit, what is used and whether it fits.
    #[schema(value_type = Vec<Object>)]
    impact: Vec<Value>,
    #[schema(value_type = Object)]
    guarantees: Value,
}

/// What a policy matches, repeated under `match`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyMatch {
    kind: String,
    action_name: Option<String>,
    agent_id: Option<String>,
    user_id: Option<String>,
    tags: Option<Vec<String>>,
    min_amount: Option<f64>,
    condition: Option<String>,
}

/// An approval policy (or, inside a version, its definition at that version).
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Policy {
    name: String,
    enabled: bool,
    /// `require_approval`, `auto_approve` or `auto_deny`.
    effect: String,
    required_approvals: u32,
    priority: i64,
    match_kind: String,
    match_action_name: Option<String>,
    match_agent_id: Option<String>,
    match_user_id: Option<String>,
    match_tags: Option<Vec<String>>,
    min_amount: Option<f64>,
    condition: Option<String>,
    /// The structured condition, as saved (`null`: none).
    #[schema(value_type = Option<Object>)]
    conditions: Option<Value>,
    acknowledge_broad_scope: bool,
    scope: String,
    needs_scope_review: bool,
    #[schema(inline)]
    r#match: PolicyMatch,
    /// The policy's own fields; absent inside a version's `policy`.
    #[schema(required = false)]
    id: Option<String>,
    #[schema(required = false)]
    version: Option<u32>,
    #[schema(required = false)]
    created_at: Option<String>,
    #[schema(required = false)]
    updated_at: Option<String>,
}

/// One retained version of a policy; `policy` is `null` on the deletion's tombstone.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyVersion {
    policy_id: String,
    version: u32,
    deleted: bool,
    change_note: Option<String>,
    created_at: String,
    created_by: Option<String>,
    policy: Option<Policy>,
}

/// One policy `evaluate` considered.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Considered {
    id: String,
    name: String,
    version: u32,
    /// `"matched"`, or `{"undecidable": reason}`.
    result: Value,
}

/// `POST /approval-policies/evaluate`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Evaluation {
    /// Always `policy_only`.
    evaluation: String,
    effect: Option<String>,
    required_approvals: Option<u32>,
    decision: Option<Value>,
    explanation: String,
    matched: Vec<Considered>,
}

/// One change of a policy file's plan.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyFileChange {
    /// `create`, `update` or `delete`.
    op: String,
    name: String,
    /// The live policy changed (absent for a creation).
    policy_id: Option<String>,
    /// Its version when planned.
    from_version: Option<u32>,
    #[schema(value_type = Option<Object>)]
    before: Option<Value>,
    #[schema(value_type = Option<Object>)]
    after: Option<Value>,
}

/// `POST /approval-policies/files/plan`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyFilePlan {
    /// Names exactly this change against exactly the live set it was planned on.
    digest: String,
    /// Always true in a 200 (a file with problems is a 400 listing them in `details.errors`).
    valid: bool,
    errors: Vec<Value>,
    changes: Vec<PolicyFileChange>,
    /// Names of the live policies the file leaves as they are.
    unchanged: Vec<String>,
    #[schema(value_type = Object)]
    summary: Value,
}

/// `POST /approval-policies/files/apply`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyFileApplied {
    digest: String,
    valid: bool,
    errors: Vec<Value>,
    changes: Vec<PolicyFileChange>,
    unchanged: Vec<String>,
    #[schema(value_type = Object)]
    summary: Value,
    /// False when the file already matched the live set (nothing written).
    applied: bool,
    /// The live policies after the change.
    policies: Vec<Policy>,
}

/// One case decided by `POST /approval-policies/files/test`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyFileCase {
    index: u32,
    name: Option<String>,
    /// `auto_approve`, `auto_deny`, `require_approval`, or null when no policy applies.
    effect: Option<String>,
    required_approvals: Option<u32>,
    /// The deciding policy's name.
    policy: Option<String>,
    decision: Option<Value>,
    explanation: String,
    #[schema(value_type = Option<Object>)]
    expected: Option<Value>,
    /// Whether the decision met `expected` (null without an expectation).
    passed: Option<bool>,
}

/// `POST /approval-policies/files/test`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct PolicyFileTest {
    /// Always `policy_only`: limits, halts and scopes still apply at invoke.
    evaluation: String,
    /// Every case with an expectation met it.
    passed: bool,
    results: Vec<PolicyFileCase>,
}

/// A run (`POST /runs`, `GET /runs`, `PATCH /runs/{id}`, `POST /runs/import`). In `GET /runs`,
/// an `input`, `output`, `error` or `metadata` longer than 16 KiB is an `Elided` marker (its
/// size and `href`, the run read whole) and `elidedFields` names it.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Run {
    id: String,
    name: Option<String>,
    /// `running`, `succeeded`, `failed` or `cancelled`.
    status: String,
    agent_id: Option<String>,
    agent_version: Option<String>,
    user_id: Option<String>,
    application: Option<String>,
    tags: Vec<String>,
    input: Option<Value>,
    output: Option<Value>,
    error: Option<Value>,
    tokens: Option<u64>,
    cost: Option<f64>,
    metadata: Option<Value>,
    /// The W3C trace id (32 hex digits) the run's spans are exported under.
    trace_id: String,
    started_at: String,
    ended_at: Option<String>,
    updated_at: String,
    #[schema(required = false)]
    elided_fields: Option<Vec<String>>,
}

/// `GET /runs/{id}`: the run, its first spans (large fields elided), every span's outline as a
/// tree of `children`, and the invocations and approvals that name it. The answer stays under
/// 4 MiB (`ANSWER_BYTES_MAX`) whatever the run holds.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct RunDetail {
    id: String,
    name: Option<String>,
    status: String,
    agent_id: Option<String>,
    agent_version: Option<String>,
    user_id: Option<String>,
    application: Option<String>,
    tags: Vec<String>,
    input: Option<Value>,
    output: Option<Value>,
    error: Option<Value>,
    tokens: Option<u64>,
    cost: Option<f64>,
    metadata: Option<Value>,
    trace_id: String,
    started_at: String,
    ended_at: Option<String>,
    updated_at: String,
    /// The first spans in ingest order (up to 100, and fewer if they would take the answer
    /// past 4 MiB), each as a page of `GET /runs/{id}/spans` shows it: a field longer than
    /// 16 KiB is an `Elided` marker.
    spans: Vec<Span>,
    /// How many spans the run holds.
    span_count: u64,
    /// The cursor of `GET /runs/{id}/spans` for the spans after `spans`; `null` when `spans`
    /// holds them all.
    spans_next_cursor: Option<String>,
    /// Every span's outline (no content), nested: each with its `children`; the roots that fit
    /// in half of what the run's own fields leave of the 4 MiB bound.
    span_tree: Vec<SpanNode>,
    /// `false` when `spanTree` was cut short to stay under the bound (read the spans by page).
    span_tree_complete: bool,
    /// Each invocation naming the run, as `GET /actions/invocations` lists it (large fields
    /// elided), with the `parentSpanId` it was made under; those that fit in a quarter of what
    /// the run's own fields leave of the bound.
    invocations: Vec<Value>,
    /// `false` when `invocations` was cut short to stay under the bound.
    invocations_complete: bool,
    approvals: Vec<RunApproval>,
}

/// An approval that names the run.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct RunApproval {
    id: String,
    status: String,
    title: String,
    invocation_id: Option<String>,
    created_at: String,
    decided_at: Option<String>,
}

/// `POST /runs/{id}/spans`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct SpansIngested {
    run_id: String,
    /// Spans whose id the run did not hold.
    created: u64,
    /// Spans that replaced one of the same id.
    replaced: u64,
}

/// Feedback on a run or one of its spans.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Feedback {
    id: String,
    run_id: String,
    span_id: Option<String>,
    source: Option<String>,
    label: Option<String>,
    rating: Option<f64>,
    comment: Option<String>,
    metadata: Option<Value>,
    created_at: String,
}

/// `GET /runs/{id}/export`: the run as one OTLP/JSON trace. The run is the root span
/// (`steward.run.*` attributes); each span carries its own id in `steward.span.id`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Trace {
    resource_spans: Vec<Value>,
}
