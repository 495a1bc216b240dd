//! Execution-bound previews over HTTP (`actions/{ref}/previews`, `actions/previews/{id}`,
//! `actions/previews/{id}/refresh`): the body is read here, the use cases are
//! `app/previews.rs`, and the view is [`view`], a `steward_wire::Preview`.

use super::body;
use super::idempotent;
use super::openapi as doc;
use crate::app::{self, previews::PREVIEW_TTL_DEFAULT_S};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};
use steward_core::{scopes, Millis, PreviewId};
use steward_store::PreviewRecord;
use steward_wire::{self as wire, Text};

fn preview_id(id: &str) -> ApiResult<PreviewId> {
    PreviewId::parse(id).map_err(|_| ApiError::not_found("preview"))
}

/// A preview's status at `now`: `used` once bound, `superseded` once refreshed, `expired` past
/// its expiry, `active` otherwise.
fn status(p: &PreviewRecord, now: Millis) -> &'static str {
    if p.bound_effect.is_some() {
        "used"
    } else if p.superseded_by.is_some() {
        "superseded"
    } else if now >= p.expires_at {
        "expired"
    } else {
        "active"
    }
}

/// The preview as the API shows it; `status` is read at `now`. What it computed when it was
/// made (the request, reads, preconditions, impact, guarantees and life) is its stored body.
pub(super) fn view(p: &PreviewRecord, now: Millis) -> wire::Preview {
    let computed = |field: &str| p.body.get(field).cloned().unwrap_or(Value::Null);
    let list = |field: &str| match computed(field) {
        Value::Array(items) => items,
        _ => Vec::new(),
    };
    wire::Preview {
        id: p.id.clone(),
        action_id: p.action_id.clone(),
        action: p.action_name.clone(),
        action_version: p.action_version,
        input: p.input.clone(),
        run_id: p.run_id.clone(),
        status: status(p, now).to_string(),
        created_at: p.created_at.to_rfc3339(),
        expires_at: p.expires_at.to_rfc3339(),
        ttl_seconds: computed("ttlSeconds")
            .as_u64()
            .unwrap_or_else(|| (p.expires_at.0 - p.created_at.0).max(0) as u64 / 1000),
        refreshes: p.refreshes.clone(),
        superseded_by: p.superseded_by.clone(),
        effect_id: p.bound_effect.clone(),
        request: computed("request"),
        reads: list("reads"),
        preconditions: list("preconditions"),
        impact: list("impact"),
        guarantees: computed("guarantees"),
    }
}

#[utoipa::path(
    post,
    path = "/actions/{reference}/previews",
    operation_id = "previews_create",
    tag = "previews",
    params(doc::ActionPath, doc::IdempotencyHeader),
    request_body = wire::PreviewBody,
    responses(
        (status = 201, description = "the preview: the exact request, the provider reads, the impact, preconditions, guarantees and expiry", body = doc::Single<wire::Preview>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_INVOKE)?;
    let body: wire::PreviewBody = body::parse(&bytes)?;
    let input = Value::Object(body.input.unwrap_or_default());
    let ttl_s = body.ttl_seconds.unwrap_or(PREVIEW_TTL_DEFAULT_S);
    let run_id = body.run_id.map(Text::into_string);
    let action = app::previews::previewable(&state, &caller, &reference, &input).await?;
    let request = json!({"op": "preview.create", "action": action.id, "input": input, "ttlSeconds": ttl_s, "runId": run_id});
    idempotent::run(&state, &caller, &headers, request, || async {
        let preview = app::previews::create(&state, &caller, &action, input, ttl_s, run_id).await?;
        Ok((StatusCode::CREATED, view(&preview, state.clock.now())))
    })
    .await
}

#[utoipa::path(
    get,
    path = "/actions/previews/{id}",
    operation_id = "previews_get",
    tag = "previews",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the preview and its status now (active, expired, superseded or used)", body = doc::Single<wire::Preview>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let id = preview_id(&id)?;
    let preview = app::previews::get(&state, &caller, &id).await?;
    Ok(crate::envelope::ok(view(&preview, state.clock.now())))
}

#[utoipa::path(
    post,
    path = "/actions/previews/{id}/refresh",
    operation_id = "previews_refresh",
    tag = "previews",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = wire::PreviewRefreshBody,
    responses(
        (status = 201, description = "a new preview, read again from the provider under the action's current version; the old one is superseded", body = doc::Single<wire::Preview>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn refresh(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_INVOKE)?;
    let id = preview_id(&id)?;
    let wire::PreviewRefreshBody { ttl_seconds } = body::parse(&bytes)?;
    let ttl_s = ttl_seconds.unwrap_or(PREVIEW_TTL_DEFAULT_S);
    let request = json!({"op": "preview.refresh", "id": id, "ttlSeconds": ttl_s});
    idempotent::run(&state, &caller, &headers, request, || async {
        let new = app::previews::refresh(&state, &caller, &id, ttl_s).await?;
        Ok((StatusCode::CREATED, view(&new, state.clock.now())))
    })
    .await
}
