//! What `data` holds in each success answer, as schemas. They mirror the `json!` views in
//! `api/views.rs`, `policies.rs`, `limits.rs`, `environment.rs` and `identity.rs`; every field
//! those views write is present (`null` when empty), and no other field may appear
//! (`deny_unknown_fields`), so `drift.rs` and the fuzzer notice a view that changes alone.
//!
//! Timestamps are RFC 3339 strings. `Value` fields hold any JSON the client or provider sent.

#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `GET /auth/identity`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Identity {
    /// Always `api_key`.
    credential_type: String,
    api_key_id: String,
    name: String,
    environment_id: String,
    environment: String,
    scopes: Vec<String>,
    /// Keys do not expire: always `null`.
    #[schema(value_type = Option<String>)]
    expires_at: Option<String>,
}

/// An environment and its kill switch.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Environment {
    id: String,
    name: String,
    halted: bool,
    halt_reason: Option<String>,
    /// Only on resume: how many parked effects were dispatched.
    #[schema(required = false)]
    released: Option<u64>,
}

/// What an action definition says, on the action and on each of its versions.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Action {
    id: String,
    name: String,
    description: Option<String>,
    method: Option<String>,
    url_template: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    body_template: Option<Value>,
    input_schema: Option<Value>,
    requires_approval: bool,
    #[schema(required = false)]
    approval_expires_in_seconds: Option<u64>,
    #[schema(required = false, value_type = Option<MissingOperationKeyChoice>)]
    mcp_missing_operation_key: Option<String>,
    enabled: bool,
    adapter: Option<Value>,
    impact: Option<Value>,
    verify: Option<Value>,
    governed: bool,
    version: u32,
    /// `<actionId>:v<version>` on the action.
    #[schema(required = false)]
    version_id: Option<String>,
    /// On a version: the action it belongs to (the version's own `id` is `<actionId>:v<n>`).
    #[schema(required = false)]
    action_id: Option<String>,
    /// On a version: the key that made it.
    #[schema(required = false)]
    created_by: Option<String>,
    created_at: String,
    #[schema(required = false)]
    updated_at: Option<String>,
}

/// A secret's metadata; the value is never returned.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Secret {
    name: String,
    description: Option<String>,
    allowed_hosts: Option<Vec<String>>,
    allowed_placements: Option<Vec<String>>,
    version: u64,
    created_at: String,
    updated_at: String,
}

/// One call of an action.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Invocation {
    id: String,
    action_id: String,
    action: String,
    action_name: String,
    action_version: u32,
    action_version_id: String,
    /// `pending_approval`, `running`, `succeeded`, `failed`, `unknown`, `denied` or `expired`.
    status: String,
    pending_approval: bool,
    approval_id: Option<String>,
    input: Value,
    operation_key: Option<String>,
    run_id: Option<String>,
    retry_of: Option<String>,
    response_status: Option<u16>,
    body: Option<Value>,
    error: Option<Value>,
    decision: Option<Value>,
    created_at: String,
    completed_at: Option<String>,
    duration_ms: Option<i64>,
    /// Governed invocations only, like the four fields after it.
    #[schema(required = false)]
    effect_id: Option<String>,
    #[schema(required = false)]
    grade: Option<String>,
    #[schema(required = false)]
    outcome: Option<String>,
    #[schema(required = false)]
    stage: Option<String>,
    #[schema(required = false)]
    unresolved: Option<bool>,
    /// In a list only: the fields (`input`, `body`) left out because their JSON text is longer
    /// than 16 KiB; each holds an [`Elided`] marker instead.
    #[schema(required = false)]
    elided_fields: Option<Vec<String>>,
}

/// What a list or tree shows in place of a field longer than 16 KiB (`LISTED_FIELD_BYTES_MAX`)
/// of JSON text: the field's size and the path that reads the record alone, whole. The record
/// names such fields in `elidedFields`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Elided {
    /// Always `true`.
    elided: bool,
    /// The size of the field left out, in bytes of its JSON text.
    bytes: u64,
    /// The path (under the server's origin) that reads the record whole.
    href: String,
}

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

/// One attempt to send an effect.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Attempt {
    number: u32,
    status: String,
    started_at: String,
    deadline_at: String,
    finished_at: Option<String>,
    response_status: Option<u16>,
    error: Option<String>,
}

/// One entry of an effect's evidence log.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Evidence {
    seq: u32,
    at: String,
    kind: String,
    source: String,
    message: String,
    data: Option<Value>,
    actor_key_id: Option<String>,
}

/// The external write an invocation makes; the detail adds attempts and evidence.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Effect {
    id: String,
    invocation_id: String,
    action_id: String,
    action: String,
    operation_key: Option<String>,
    outcome: String,
    stage: String,
    grade: String,
    unresolved: bool,
    attempt_count: u32,
    external_reference: Option<String>,
    provider_idempotency_key: Option<String>,
    created_at: String,
    updated_at: String,
    /// On a single effect, not in listings.
    #[schema(required = false)]
    attempts: Option<Vec<Attempt>>,
    /// On a single effect, not in listings.
    #[schema(required = false)]
    evidence: Option<Vec<Evidence>>,
    /// On a single effect, not in listings: each impact limit's hold on it.
    #[schema(required = false)]
    reservations: Option<Vec<Reservation>>,
    /// On a single effect, not in listings: the preview it was bound to (`null`: none).
    #[schema(required = false)]
    preview: Option<Preview>,
    /// On a single effect, not in listings: the id of that preview.
    #[schema(required = false)]
    preview_id: Option<String>,
    /// On a single effect, not in listings: the effects that held these outcomes when it was
    /// recorded (its invoke's `dependsOn`).
    #[schema(required = false)]
    depends_on: Option<Vec<Dependency>>,
    /// On a single effect, not in listings: the settled effect it compensates (`null`: none).
    #[schema(required = false)]
    compensates: Option<String>,
    /// On a single effect, not in listings: the effects recorded as its compensations, oldest id
    /// first.
    #[schema(required = false)]
    compensated_by: Option<Vec<String>>,
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

/// One entry of an invoke's `dependsOn`: the effect had to hold this outcome.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Dependency {
    effect: String,
    /// `succeeded`, `failed` or `not_dispatched`.
    outcome: String,
}

/// One impact limit's hold on an effect.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Reservation {
    limit_id: String,
    limit_name: String,
    amount: i64,
    /// `reserved`, `consumed`, `released` or `exposure` (an unknown outcome: it may have happened).
    state: String,
    window_start: String,
}

/// One key's decision on an approval.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ApprovalDecision {
    key_id: String,
    decision: String,
    note: Option<String>,
    at: String,
}

/// An approval request: gated invocations and custom requests.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Approval {
    id: String,
    /// `pending`, `approved`, `denied` or `expired`.
    status: String,
    title: String,
    description: Option<String>,
    payload: Value,
    invocation_id: Option<String>,
    effect_id: Option<String>,
    action_id: Option<String>,
    action_version: Option<u32>,
    input_fingerprint: Option<String>,
    requested_by: String,
    required_approvals: u32,
    decisions: Vec<ApprovalDecision>,
    decision_origin: Option<String>,
    /// The note of the decision that settled it (`null` while pending or for an expiry).
    decision_note: Option<String>,
    decided_at: Option<String>,
    expires_at: Option<String>,
    run_id: Option<String>,
    created_at: String,
}

/// What approving or denying answers: the approval, and the invocation it gated as it stands
/// after the decision (`null` for a custom request).
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Decided {
    approval: Approval,
    invocation: Option<Invocation>,
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

/// An impact limit with its usage in the current window.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Limit {
    id: String,
    name: String,
    dimension: String,
    unit: String,
    currency: Option<String>,
    period: String,
    amount: i64,
    action_name: Option<String>,
    /// Only effects whose resource starts with this count (`null`: every effect).
    resource_prefix: Option<String>,
    archived: bool,
    archived_at: Option<String>,
    created_at: String,
    updated_at: String,
    window_start: String,
    consumed: i64,
    reserved: i64,
    unknown_exposure: i64,
    #[schema(minimum = 0)]
    available: i64,
}

/// A deleted action or policy.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Deleted {
    id: String,
    /// Always `true`.
    deleted: bool,
}

/// A deleted secret.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretDeleted {
    name: String,
    /// Always `true`.
    deleted: bool,
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

/// `POST /actions/import`: what was created (or, on a dry run, would be) and what was skipped.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ImportResult {
    /// True when nothing was written.
    dry_run: bool,
    /// In the document's order (paths sorted, then GET, PUT, POST, DELETE, PATCH).
    created: Vec<ImportedAction>,
    skipped: Vec<SkippedOperation>,
}

/// One operation imported as an action.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ImportedAction {
    /// The action's `act_` id; `null` on a dry run.
    id: Option<String>,
    name: String,
    operation_id: Option<String>,
    method: String,
    path: String,
    governed: bool,
    /// The declared impact (one resource mutation for a governed write).
    impact: Option<Value>,
    /// A read-back rule from a GET of the spec, for a person to check and declare as the
    /// action's `verify`; never applied by the import.
    proposed_verify: Option<Value>,
    /// Where `proposedVerify` came from, or why there is none (`null` for reads).
    verify_note: Option<String>,
    /// What the action does not carry from the spec (dropped constraints, optional parameters
    /// left out, renamings).
    warnings: Vec<String>,
    /// The action's definition as `GET /actions/{reference}` shows it, without id or version.
    #[schema(value_type = Object)]
    action: Value,
}

/// One operation not imported.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct SkippedOperation {
    path: String,
    /// The HTTP method, or `*` for a whole path item.
    method: String,
    operation_id: Option<String>,
    /// Why Steward cannot express it faithfully (or its name is taken).
    reason: String,
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

/// What an MCP call without an operation key does (`mcpMissingOperationKey`).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum MissingOperationKeyChoice {
    Refuse,
    Derive,
}
