//! What `data` holds in each success answer, as schemas. They mirror the `json!` views in
//! `api/views.rs`, `policies.rs`, `limits.rs`, `environment.rs` and `identity.rs`; every field
//! those views write is present (`null` when empty), and no other field may appear
//! (`deny_unknown_fields`), so `drift.rs` and the fuzzer notice a view that changes alone.
//!
//! Timestamps are RFC 3339 strings. `Value` fields hold any JSON the client or provider sent.

#![allow(dead_code)]

use serde_json::Value;
use utoipa::ToSchema;

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

/// What an MCP call without an operation key does (`mcpMissingOperationKey`).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum MissingOperationKeyChoice {
    Refuse,
    Derive,
}
