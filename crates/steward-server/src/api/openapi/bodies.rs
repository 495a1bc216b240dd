//! Request bodies as schemas. Handlers parse bodies by hand (`body::object` then
//! `body::only_known(map, FIELDS)`); each body here carries the field list its handler passes to
//! `only_known`, and a test (`drift.rs`) checks that list equals the schema's properties.
//!
//! Every body is a JSON object; an empty body reads as `{}`. A field sent as `null` reads as left
//! out, so optional fields are nullable.
//!
//! `utoipa` takes only literals for bounds; `drift.rs` checks each against its named constant.

#![allow(dead_code)]

use serde_json::Value;
use utoipa::ToSchema;

/// `POST /actions` and `PATCH /actions/{reference}` (a field left out is unchanged, `null`
/// clears it).
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ActionBody {
    /// Unique in the environment, not starting with `act_`; required on create.
    #[schema(pattern = "^[A-Za-z0-9._-]+$", min_length = 1, max_length = 64)]
    name: Option<String>,
    description: Option<String>,
    /// The HTTP method of `urlTemplate` (default POST).
    method: Option<String>,
    /// The URL called, with `{{input.path}}` placeholders.
    url_template: Option<String>,
    headers: Option<std::collections::BTreeMap<String, String>>,
    #[schema(value_type = Object)]
    body_template: Option<Value>,
    /// A JSON Schema the input must satisfy.
    #[schema(value_type = Object)]
    input_schema: Option<Value>,
    requires_approval: Option<bool>,
    /// How long an approval of this action's calls stays open, in seconds (1 to 2592000);
    /// past it the call is `expired` and never runs. Left out: open until decided.
    #[schema(minimum = 1, maximum = 2592000)]
    approval_expires_in_seconds: Option<u64>,
    /// What an MCP call of this governed action without an operation key does: `refuse` it, or
    /// `derive` a key from (agent key, action version, input) within the server's window. Left
    /// out: the server's default (`steward serve --mcp-missing-operation-key`).
    mcp_missing_operation_key: Option<super::records::MissingOperationKeyChoice>,
    enabled: Option<bool>,
    /// A built-in adapter (`stripe.refund`, `http.idempotent`) instead of a URL.
    #[schema(value_type = Object)]
    adapter: Option<Value>,
    /// What the action changes, for limits and verification.
    #[schema(value_type = Object)]
    impact: Option<Value>,
    /// How an unknown outcome is checked with the provider.
    #[schema(value_type = Object)]
    verify: Option<Value>,
    governed: Option<bool>,
}

/// `POST /actions/import`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ImportBody {
    /// The OpenAPI 3.0 or 3.1 document: a JSON object (its JSON or YAML text is accepted too,
    /// as a string); at most 524288 bytes, 250 operations, input schemas 32 levels deep.
    #[schema(value_type = Object)]
    spec: Value,
    /// The URL the spec's paths are appended to (default: its first server).
    base_url: Option<String>,
    /// The credential header every imported action sends.
    auth: Option<ImportAuth>,
    /// Every imported action waits for an approval (default false).
    requires_approval: Option<bool>,
    /// Check and report; create nothing (default false).
    dry_run: Option<bool>,
    /// The operations to import, each an operationId or `METHOD /path` (default: all).
    #[schema(max_items = 250)]
    only: Option<Vec<String>>,
    /// Import writes as governed actions, one declared resource mutation each (default true).
    governed: Option<bool>,
}

impl ImportBody {
    pub const FIELDS: &[&str] = &[
        "spec",
        "baseUrl",
        "auth",
        "requiresApproval",
        "dryRun",
        "only",
        "governed",
    ];
}

/// `auth` of `POST /actions/import`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ImportAuth {
    header_name: String,
    /// A vaulted secret's name.
    #[schema(pattern = "^[A-Z0-9_]+$")]
    secret_name: String,
    /// The header's value, holding `{{secret}}` where the secret goes (default `{{secret}}`).
    #[schema(max_length = 256)]
    value_template: Option<String>,
}

/// `POST /actions/{reference}/invoke`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct InvokeBody {
    /// The action's input (default `{}`): a JSON object, unless the action's `inputSchema`
    /// declares another `type` (an array, a string...), when it is any value that schema accepts.
    #[schema(value_type = Object)]
    input: Option<Value>,
    run_id: Option<String>,
    parent_span_id: Option<String>,
    /// A failed invocation (`inv_...`) this one retries.
    retry_of: Option<String>,
    /// Names the business operation: the same key and input is the same effect.
    #[schema(min_length = 1, max_length = 255)]
    operation_key: Option<String>,
    /// Binds the invoke to an execution-bound preview: same action version, same input, same
    /// rendered request, before it expires, and its first invoke; refused otherwise
    /// (`preview_expired`, `preview_superseded`, `preview_already_used`,
    /// `preview_action_changed`, `preview_mismatch`), with nothing recorded.
    #[schema(pattern = "^prv_")]
    preview_id: Option<String>,
    /// Effects that must already hold an outcome (`succeeded`, `failed` or `not_dispatched`);
    /// pending and unknown never hold one. Refused with `dependency_not_satisfied`, nothing
    /// recorded, when one does not.
    #[schema(max_items = 16)]
    depends_on: Option<Vec<steward_wire::Dependency>>,
    /// The settled effect this invoke compensates; both effects show the link.
    #[schema(pattern = "^eff_")]
    compensates: Option<String>,
}

/// `POST /impact-limits`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct LimitBody {
    #[schema(min_length = 1, max_length = 100)]
    name: String,
    /// `money`, `resource_mutations`, or a unit of your own.
    #[schema(pattern = "^[a-z][a-z0-9_]{0,31}$")]
    dimension: String,
    #[schema(inline)]
    period: Period,
    /// A non-negative integer in the limit's unit (minor units for money).
    #[schema(minimum = 0, maximum = 1000000000000000_i64)]
    amount: i64,
    /// A three-letter currency such as `usd`; required for money.
    #[schema(pattern = "^[A-Za-z]{3}$")]
    currency: Option<String>,
    unit: Option<String>,
    /// Only invocations of this action count.
    action_name: Option<String>,
    /// Only effects whose resource (the URL of what they change: a refund's payment intent, a
    /// template action's rendered URL) starts with this count; an effect whose resource cannot be
    /// told counts anyway.
    #[schema(min_length = 1, max_length = 512)]
    resource_prefix: Option<String>,
}

/// The window a limit counts over.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Period {
    Day,
    Month,
    Total,
}

/// `PATCH /impact-limits/{id}`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitUpdateBody {
    #[schema(min_length = 1, max_length = 100)]
    name: Option<String>,
    #[schema(minimum = 0, maximum = 1000000000000000_i64)]
    amount: Option<i64>,
}

impl LimitUpdateBody {
    pub const FIELDS: &[&str] = &["name", "amount"];
}

/// `POST /approvals`: a custom approval request.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ApprovalRequestBody {
    #[schema(min_length = 1)]
    title: String,
    description: Option<String>,
    #[schema(value_type = Object)]
    payload: Option<Value>,
    #[schema(minimum = 1, maximum = 2592000)]
    expires_in_seconds: Option<i64>,
    run_id: Option<String>,
    parent_span_id: Option<String>,
}

impl ApprovalRequestBody {
    pub const FIELDS: &[&str] = &[
        "title",
        "description",
        "payload",
        "expiresInSeconds",
        "runId",
        "parentSpanId",
    ];
}

/// `PUT /secrets/{name}`: create or rotate. A rotation may narrow where the secret may go, never
/// widen it.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct SecretBody {
    /// The secret; never returned by any endpoint.
    #[schema(min_length = 1)]
    value: String,
    description: Option<String>,
    /// Hosts (or `.suffix` domains) the secret may be sent to; `null` is anywhere.
    allowed_hosts: Option<Vec<String>>,
    /// Where in a request the secret may be placed; `null` is anywhere.
    allowed_placements: Option<Vec<String>>,
}

impl SecretBody {
    pub const FIELDS: &[&str] = &["value", "description", "allowedHosts", "allowedPlacements"];
}

/// A manual outcome.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ManualOutcome {
    Succeeded,
    Failed,
}

/// Whether part of the write may have happened.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum PartialEffect {
    None,
    Possible,
    Confirmed,
}

/// `POST /actions/effects/{id}/resolve`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ResolveEffectBody {
    outcome: ManualOutcome,
    #[schema(min_length = 1)]
    reason: String,
    partial_effect: Option<PartialEffect>,
    #[schema(value_type = Option<Vec<Object>>)]
    actual_impact: Option<Vec<Value>>,
    external_reference: Option<String>,
}

impl ResolveEffectBody {
    pub const FIELDS: &[&str] = &[
        "outcome",
        "reason",
        "partialEffect",
        "actualImpact",
        "externalReference",
    ];
}

/// `POST /actions/invocations/{id}/resolve`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ResolveInvocationBody {
    outcome: ManualOutcome,
    #[schema(min_length = 1)]
    evidence: String,
    external_reference: Option<String>,
}

impl ResolveInvocationBody {
    pub const FIELDS: &[&str] = &["outcome", "evidence", "externalReference"];
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
