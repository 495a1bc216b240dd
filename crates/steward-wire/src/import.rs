//! `POST /actions/import`: the body naming an OpenAPI document, and the report of what it
//! created (or, on a dry run, would create) and what it skipped.

use crate::{Action, Text};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// `POST /actions/import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportBody {
    /// The OpenAPI 3.0 or 3.1 document: a JSON object (its JSON or YAML text is accepted too,
    /// as a string); at most 524288 bytes, 250 operations, input schemas 32 levels deep.
    /// Required (the server names it when it is missing or `null`).
    #[serde(default)]
    #[schema(required = true, value_type = Object)]
    pub spec: Option<Value>,
    /// The URL the spec's paths are appended to (default: its first server).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub base_url: Option<Text>,
    /// The credential header every imported action sends.
    #[serde(default)]
    pub auth: Option<ImportAuth>,
    /// Every imported action waits for an approval (default false).
    #[serde(default)]
    pub requires_approval: Option<bool>,
    /// Check and report; create nothing (default false).
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// The operations to import, each an operationId or `METHOD /path` (default: all).
    #[serde(default)]
    #[schema(max_items = 250)]
    pub only: Option<Vec<String>>,
    /// Import writes as governed actions, one declared resource mutation each (default true).
    #[serde(default)]
    pub governed: Option<bool>,
}

/// `auth` of `POST /actions/import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportAuth {
    /// An HTTP header name (required; the server names it when it is missing or malformed).
    #[serde(default)]
    #[schema(required = true, value_type = String)]
    pub header_name: Option<Text>,
    /// A vaulted secret's name.
    #[serde(default)]
    #[schema(required = true, value_type = String, pattern = "^[A-Z0-9_]+$")]
    pub secret_name: Option<Text>,
    /// The header's value, holding `{{secret}}` where the secret goes (default `{{secret}}`).
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 256)]
    pub value_template: Option<Text>,
}

/// What the import created (or, on a dry run, would create) and what it skipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportResult {
    /// True when nothing was written.
    pub dry_run: bool,
    /// In the document's order (paths sorted, then GET, PUT, POST, DELETE, PATCH).
    pub created: Vec<ImportedAction>,
    pub skipped: Vec<SkippedOperation>,
}

/// One operation imported as an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportedAction {
    /// The action's `act_` id; `null` on a dry run.
    pub id: Option<String>,
    pub name: String,
    pub operation_id: Option<String>,
    pub method: String,
    pub path: String,
    pub governed: bool,
    /// The declared impact (one resource mutation for a governed write).
    #[schema(value_type = Option<Value>)]
    pub impact: Option<Value>,
    /// A read-back rule from a GET of the spec, for a person to check and declare as the
    /// action's `verify`; never applied by the import.
    #[schema(value_type = Option<Value>)]
    pub proposed_verify: Option<Value>,
    /// Where `proposedVerify` came from, or why there is none (`null` for reads).
    pub verify_note: Option<String>,
    /// What the action does not carry from the spec (dropped constraints, optional parameters
    /// left out, renamings).
    pub warnings: Vec<String>,
    /// The action's definition as `GET /actions/{reference}` shows it, without id or version
    /// (so described as an object: the `Action` schema requires those).
    #[schema(value_type = Object)]
    pub action: Action,
}

/// One operation not imported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkippedOperation {
    pub path: String,
    /// The HTTP method, or `*` for a whole path item.
    pub method: String,
    pub operation_id: Option<String>,
    /// Why Steward cannot express it faithfully (or its name is taken).
    pub reason: String,
}
