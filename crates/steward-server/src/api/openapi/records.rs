//! What `data` holds in each success answer, as schemas. They mirror the `json!` views in
//! `api/views.rs`, `policies.rs`, `limits.rs`, `environment.rs` and `identity.rs`; every field
//! those views write is present (`null` when empty), and no other field may appear
//! (`deny_unknown_fields`), so `drift.rs` and the fuzzer notice a view that changes alone.
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
