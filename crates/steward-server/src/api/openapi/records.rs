//! What `data` holds in each success answer, as schemas. They mirror the `json!` views in
//! `api/views.rs`, `policies.rs`, `limits.rs`, `environment.rs` and `identity.rs`; every field
//! those views write is present (`null` when empty), and no other field may appear
//! (`deny_unknown_fields`), so `drift.rs` and the fuzzer notice a view that changes alone.
//!
//! Timestamps are RFC 3339 strings. `Value` fields hold any JSON the client or provider sent.

#![allow(dead_code)]

use serde_json::Value;
use utoipa::ToSchema;

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
