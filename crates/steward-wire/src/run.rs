//! Runs: an agent's trace as its runtime reports it, with its spans, feedback and timeline.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use steward_core::{FeedbackId, InvocationId, RunId};
use utoipa::ToSchema;

/// A run (`POST /runs`, `GET /runs`, `PATCH /runs/{id}`, `POST /runs/import`). In `GET /runs`,
/// an `input`, `output`, `error` or `metadata` longer than 16 KiB is an [`Elided`] marker (its
/// size and `href`, the run read whole) and `elidedFields` names it.
///
/// [`Elided`]: crate::Elided
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Run {
    #[schema(value_type = String)]
    pub id: RunId,
    pub name: Option<String>,
    /// `running`, `succeeded`, `failed` or `cancelled`.
    pub status: String,
    pub agent_id: Option<String>,
    pub agent_version: Option<String>,
    pub user_id: Option<String>,
    pub application: Option<String>,
    pub tags: Vec<String>,
    pub input: Option<Value>,
    pub output: Option<Value>,
    pub error: Option<Value>,
    pub tokens: Option<u64>,
    pub cost: Option<f64>,
    pub metadata: Option<Value>,
    /// The W3C trace id (32 hex digits) the run's spans are exported under.
    pub trace_id: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub updated_at: String,
    /// In a list only: the fields left out because their JSON text is longer than 16 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub elided_fields: Option<Vec<String>>,
}

/// `GET /runs/{id}`: the run, its first spans (large fields elided), every span's outline as a
/// tree of `children`, and the invocations and approvals that name it. The answer stays under
/// 4 MiB (`ANSWER_BYTES_MAX`) whatever the run holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunDetail {
    #[schema(value_type = String)]
    pub id: RunId,
    pub name: Option<String>,
    /// `running`, `succeeded`, `failed` or `cancelled`.
    pub status: String,
    pub agent_id: Option<String>,
    pub agent_version: Option<String>,
    pub user_id: Option<String>,
    pub application: Option<String>,
    pub tags: Vec<String>,
    pub input: Option<Value>,
    pub output: Option<Value>,
    pub error: Option<Value>,
    pub tokens: Option<u64>,
    pub cost: Option<f64>,
    pub metadata: Option<Value>,
    pub trace_id: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub updated_at: String,
    /// The first spans in ingest order (up to 100, and fewer if they would take the answer
    /// past 4 MiB), each as a page of `GET /runs/{id}/spans` shows it: a field longer than
    /// 16 KiB is an `Elided` marker.
    pub spans: Vec<Span>,
    /// How many spans the run holds.
    pub span_count: u64,
    /// The cursor of `GET /runs/{id}/spans` for the spans after `spans`; `null` when `spans`
    /// holds them all.
    pub spans_next_cursor: Option<String>,
    /// Every span's outline (no content), nested: each with its `children`; the roots that fit
    /// in half of what the run's own fields leave of the 4 MiB bound.
    pub span_tree: Vec<SpanNode>,
    /// `false` when `spanTree` was cut short to stay under the bound (read the spans by page).
    pub span_tree_complete: bool,
    /// Each invocation naming the run, as `GET /actions/invocations` lists it (large fields
    /// elided), with the `parentSpanId` it was made under; those that fit in a quarter of what
    /// the run's own fields leave of the bound.
    pub invocations: Vec<Value>,
    /// `false` when `invocations` was cut short to stay under the bound.
    pub invocations_complete: bool,
    pub approvals: Vec<RunApproval>,
}

impl RunDetail {
    /// The run's own fields with its parts, none of them cut short yet.
    pub fn of(run: Run) -> RunDetail {
        RunDetail {
            id: run.id,
            name: run.name,
            status: run.status,
            agent_id: run.agent_id,
            agent_version: run.agent_version,
            user_id: run.user_id,
            application: run.application,
            tags: run.tags,
            input: run.input,
            output: run.output,
            error: run.error,
            tokens: run.tokens,
            cost: run.cost,
            metadata: run.metadata,
            trace_id: run.trace_id,
            started_at: run.started_at,
            ended_at: run.ended_at,
            updated_at: run.updated_at,
            spans: Vec::new(),
            span_count: 0,
            spans_next_cursor: None,
            span_tree: Vec::new(),
            span_tree_complete: true,
            invocations: Vec::new(),
            invocations_complete: true,
            approvals: Vec::new(),
        }
    }
}

/// An approval that names the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunApproval {
    pub id: String,
    pub status: String,
    pub title: String,
    #[schema(value_type = Option<String>)]
    pub invocation_id: Option<InvocationId>,
    pub created_at: String,
    pub decided_at: Option<String>,
}

/// One span of a run (`GET /runs/{id}/spans`, `GET /runs/{id}/spans/{spanId}`): the span as
/// ingested, with `runId`, `ingestedAt` and `updatedAt`. In a page, a field longer than 16 KiB
/// is an `Elided` marker and `elidedFields` names it; the single-span read returns the span
/// whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Span {
    pub id: String,
    pub parent_span_id: Option<String>,
    pub name: Option<String>,
    /// `model_call`, `tool_call`, `workflow_step` or `custom`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// `running`, `succeeded`, `failed` or `cancelled`.
    pub status: Option<String>,
    /// As the client wrote it (RFC 3339).
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub input: Option<Value>,
    pub output: Option<Value>,
    pub error: Option<Value>,
    pub attributes: Option<Value>,
    pub metadata: Option<Value>,
    /// A count, or an object of counts.
    pub tokens: Option<Value>,
    pub cost: Option<f64>,
    pub model: Option<String>,
    #[schema(value_type = String)]
    pub run_id: RunId,
    pub ingested_at: String,
    pub updated_at: String,
    /// In a page only: the fields left out because their JSON text is longer than 16 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub elided_fields: Option<Vec<String>>,
}

/// A node of a run's `spanTree`: the span's outline, never its content; `href` reads the span
/// whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpanNode {
    pub id: String,
    pub parent_span_id: Option<String>,
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub status: Option<String>,
    /// The stored span's size, in bytes of its JSON text.
    pub bytes: u64,
    pub href: String,
    #[schema(no_recursion)]
    pub children: Vec<SpanNode>,
}

/// `POST /runs/{id}/spans`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpansIngested {
    #[schema(value_type = String)]
    pub run_id: RunId,
    /// Spans whose id the run did not hold.
    pub created: u64,
    /// Spans that replaced one of the same id.
    pub replaced: u64,
}

/// Feedback on a run or one of its spans.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Feedback {
    #[schema(value_type = String)]
    pub id: FeedbackId,
    #[schema(value_type = String)]
    pub run_id: RunId,
    pub span_id: Option<String>,
    pub source: Option<String>,
    pub label: Option<String>,
    pub rating: Option<f64>,
    pub comment: Option<String>,
    pub metadata: Option<Value>,
    pub created_at: String,
}

/// `GET /runs/{id}/export`: the run as one OTLP/JSON trace. The run is the root span
/// (`steward.run.*` attributes); each span carries its own id in `steward.span.id`. The OTLP
/// spans are any JSON here: OTLP's own schema describes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Trace {
    pub resource_spans: Vec<Value>,
}
