//! `POST /actions/import`: an OpenAPI 3.0 or 3.1 document becomes template actions.
//!
//! What each operation becomes is `operation.rs`; the schemas `schema.rs`; the whole plan (the
//! selection by `only`, names, proposed read-backs) `plan.rs`; reading the document
//! `document.rs`. What is created of the plan is the use case `app::import::import`: every
//! action planned goes through the same checks as `POST /actions` (`app::actions::definition`),
//! and one that fails them is skipped, never created half-right. An operation whose action name
//! is taken is skipped too, so a second import of the same spec creates only what the first one
//! did not. The answer's shape is in docs/DECISIONS.md
//! ("OpenAPI import (issue #14)").

mod document;
mod operation;
mod plan;
mod references;
mod schema;

use super::body;
use super::idempotent;
use super::openapi as doc;
use super::views::{self, ActionView};
use crate::app;
use crate::app::import::Outcome;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;
use steward_core::scopes;
use steward_wire::{ImportAuth, ImportBody, ImportResult, ImportedAction, SkippedOperation, Text};

/// The largest `spec` read, in bytes (of its text, or of the object as JSON; and of what a YAML
/// text reads as, so aliases cannot grow past it).
pub(crate) const SPEC_BYTES_MAX: usize = 512 * 1024;
/// The most operations a document may hold, counting those `only` leaves out.
pub(crate) const OPERATIONS_MAX: usize = 250;
/// The deepest an input schema may nest once its `$ref`s are inlined, in levels.
pub(crate) const SCHEMA_DEPTH_MAX: usize = 32;
/// The most entries `only` may hold.
pub(crate) const ONLY_MAX: usize = OPERATIONS_MAX;
/// The longest `auth.valueTemplate`, in bytes.
pub(crate) const AUTH_TEMPLATE_BYTES_MAX: usize = 256;

const SPEC_FIELD: &str = "spec";
const ONLY_FIELD: &str = "only";
/// What `auth.valueTemplate` says where the secret goes.
const SECRET_SLOT: &str = "{{secret}}";

/// The credential header every imported action sends: `value_template` holds
/// `{{secret:NAME}}` where the caller wrote `{{secret}}`.
pub(crate) struct Auth {
    header_name: String,
    value_template: String,
}

fn auth(given: Option<ImportAuth>) -> ApiResult<Option<Auth>> {
    let Some(given) = given else {
        return Ok(None);
    };
    let header_name = given
        .header_name
        .map(Text::into_string)
        .filter(|h| axum::http::HeaderName::from_bytes(h.as_bytes()).is_ok())
        .ok_or_else(|| ApiError::validation("auth.headerName", "must be an HTTP header name"))?;
    let secret_name = given
        .secret_name
        .map(Text::into_string)
        .filter(|s| steward_core::is_valid_secret_name(s))
        .ok_or_else(|| ApiError::validation("auth.secretName", "must match ^[A-Z0-9_]+$"))?;
    let template = given
        .value_template
        .map_or_else(|| SECRET_SLOT.to_string(), Text::into_string);
    let rest = template.replace(SECRET_SLOT, "");
    if template.len() > AUTH_TEMPLATE_BYTES_MAX
        || !template.contains(SECRET_SLOT)
        || rest.contains("{{")
        || rest.contains("}}")
        || rest.chars().any(char::is_control)
    {
        return Err(ApiError::validation(
            "auth.valueTemplate",
            format!(
                "must hold {SECRET_SLOT} and no other placeholder, in at most {AUTH_TEMPLATE_BYTES_MAX} bytes"
            ),
        ));
    }
    Ok(Some(Auth {
        header_name,
        value_template: template.replace(SECRET_SLOT, &format!("{{{{secret:{secret_name}}}}}")),
    }))
}

fn only(given: Option<Vec<String>>) -> ApiResult<Option<Vec<String>>> {
    let Some(list) = given else {
        return Ok(None);
    };
    if list.len() > ONLY_MAX {
        return Err(ApiError::validation(
            ONLY_FIELD,
            format!("holds at most {ONLY_MAX} entries"),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, entry)| match entry.trim() {
            "" => Err(ApiError::validation(
                format!("{ONLY_FIELD}.{i}"),
                "must be an operationId or METHOD /path",
            )),
            s => Ok(s.to_string()),
        })
        .collect::<ApiResult<_>>()
        .map(Some)
}

/// The URL every path is appended to: `baseUrl`, else the spec's first server.
fn base_url(
    given: Option<String>,
    spec: &oas3::Spec,
    governed: bool,
    allow_http: bool,
) -> ApiResult<String> {
    let invalid = |message: String| ApiError::validation("baseUrl", message);
    let from_spec = given.is_none();
    let url = given
        .or_else(|| document::first_server(spec))
        .ok_or_else(|| invalid("is required: the spec names no server".into()))?;
    let base = url.trim_end_matches('/').to_string();
    let parsed = url::Url::parse(&base).map_err(|_| {
        invalid(if from_spec {
            format!("is required: the spec's first server ({url}) is not an absolute URL")
        } else {
            "must be an absolute http(s) URL".into()
        })
    })?;
    if !matches!(parsed.scheme(), "http" | "https")
        || parsed.host_str().is_none_or(str::is_empty)
        || base.contains(['{', '}', '?', '#'])
    {
        return Err(invalid(format!(
            "{url} is not an http(s) URL with a fixed host and no query"
        )));
    }
    if governed && parsed.scheme() == "http" && !allow_http {
        return Err(invalid(format!(
            "{url}: governed actions call https; give an https baseUrl or governed: false"
        )));
    }
    Ok(base)
}

#[utoipa::path(
    post,
    path = "/actions/import",
    operation_id = "actions_import",
    tag = "actions",
    params(doc::IdempotencyHeader),
    request_body = doc::ImportBody,
    responses(
        (status = 201, description = "the actions created and the operations skipped", body = doc::Single<doc::ImportResult>),
        (status = 200, description = "`dryRun`: what would be created and skipped; nothing is written", body = doc::Single<doc::ImportResult>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn import(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let map = body::object(&bytes)?;
    let given: ImportBody = body::typed(&map)?;
    let spec = given
        .spec
        .ok_or_else(|| ApiError::validation(SPEC_FIELD, "is required"))?;
    let given_base = given.base_url.map(Text::into_string);
    let auth = auth(given.auth)?;
    let requires_approval = given.requires_approval.unwrap_or(false);
    let dry_run = given.dry_run.unwrap_or(false);
    let governed = given.governed.unwrap_or(true);
    let only = only(given.only)?;
    let request = json!({"op": "action.import", "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let allow_http = state.outbound.allow_insecure;
        let document = document::load(&spec)?;
        let base = base_url(given_base, &document.spec, governed, allow_http)?;
        let settings = operation::Settings {
            base: &base,
            auth: auth.as_ref(),
            requires_approval,
            governed,
        };
        let plan = plan::plan(&document, &settings, only.as_deref())?;
        let mut skipped = plan.skipped;
        let planned = plan
            .entries
            .iter()
            .map(|entry| app::import::Planned {
                name: entry.name.clone(),
                definition: entry.definition.clone(),
            })
            .collect();
        let outcomes = app::import::import(&state, &caller, planned, dry_run).await?;
        let mut created = Vec::new();
        for (entry, outcome) in plan.entries.into_iter().zip(outcomes) {
            match outcome {
                Outcome::Skipped(reason) => skipped.push(plan::Skip::of(&entry, reason)),
                Outcome::Created { id, definition } => created.push(ImportedAction {
                    id: id.map(|id| id.to_string()),
                    governed: definition.is_governed(),
                    impact: definition.impact.clone(),
                    action: views::definition(&definition, ActionView::Full),
                    name: entry.name,
                    operation_id: entry.operation_id,
                    method: entry.method,
                    path: entry.path,
                    proposed_verify: entry.proposed_verify,
                    verify_note: entry.verify_note,
                    warnings: entry.warnings,
                }),
            }
        }
        let skipped = skipped
            .into_iter()
            .map(|s| SkippedOperation {
                path: s.path,
                method: s.method,
                operation_id: s.operation_id,
                reason: s.reason,
            })
            .collect();
        let status = if dry_run {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        Ok((
            status,
            ImportResult {
                dry_run,
                created,
                skipped,
            },
        ))
    })
    .await
}

#[cfg(test)]
mod tests;
