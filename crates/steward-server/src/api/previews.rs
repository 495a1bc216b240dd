//! Execution-bound previews over HTTP (`actions/{ref}/previews`, `actions/previews/{id}`,
//! `actions/previews/{id}/refresh`): the body is read here, the use cases are
//! `app/previews.rs`, and the view is [`view`].

use super::body::{self, only_known, optional_string};
use super::idempotent;
use super::openapi as doc;
use crate::app::{self, previews::PREVIEW_TTL_DEFAULT_S, previews::PREVIEW_TTL_MAX_S};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Map, Value};
use steward_core::{scopes, Millis, PreviewId};
use steward_store::PreviewRecord;

fn ttl(map: &Map<String, Value>) -> ApiResult<u64> {
    match map.get("ttlSeconds") {
        None | Some(Value::Null) => Ok(PREVIEW_TTL_DEFAULT_S),
        Some(v) => v
            .as_u64()
            .filter(|s| (1..=PREVIEW_TTL_MAX_S).contains(s))
            .ok_or_else(|| {
                ApiError::validation(
                    "ttlSeconds",
                    format!("must be a whole number of seconds from 1 to {PREVIEW_TTL_MAX_S}"),
                )
            }),
    }
}

fn preview_id(id: &str) -> ApiResult<PreviewId> {
    PreviewId::parse(id).map_err(|_| ApiError::not_found("preview"))
}

/// The preview as the API shows it; `status` is read at `now`.
pub(super) fn view(p: &PreviewRecord, now: Millis) -> Value {
    let status = if p.bound_effect.is_some() {
        "used"
    } else if p.superseded_by.is_some() {
        "superseded"
    } else if now >= p.expires_at {
        "expired"
    } else {
        "active"
    };
    let mut v = json!({
        "id": p.id,
        "actionId": p.action_id,
        "action": p.action_name,
        "actionVersion": p.action_version,
        "input": p.input,
        "runId": p.run_id,
        "status": status,
        "createdAt": p.created_at.to_rfc3339(),
        "expiresAt": p.expires_at.to_rfc3339(),
        "refreshes": p.refreshes,
        "supersededBy": p.superseded_by,
        "effectId": p.bound_effect,
    });
    if let (Value::Object(out), Value::Object(body)) = (&mut v, &p.body) {
        for (k, val) in body {
            out.insert(k.clone(), val.clone());
        }
    }
    v
}

#[utoipa::path(
    post,
    path = "/actions/{reference}/previews",
    operation_id = "previews_create",
    tag = "previews",
    params(doc::ActionPath, doc::IdempotencyHeader),
    request_body = doc::PreviewBody,
    responses(
        (status = 201, description = "the preview: the exact request, the provider reads, the impact, preconditions, guarantees and expiry", body = doc::Single<doc::Preview>),
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
    let map = body::object(&bytes)?;
    only_known(&map, &["input", "ttlSeconds", "runId"])?;
    let input = match map.get("input") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(ApiError::validation("input", "must be a JSON object")),
    };
    let ttl_s = ttl(&map)?;
    let run_id = optional_string(&map, "runId")?;
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
        (status = 200, description = "the preview and its status now (active, expired, superseded or used)", body = doc::Single<doc::Preview>),
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
    request_body = doc::PreviewRefreshBody,
    responses(
        (status = 201, description = "a new preview, read again from the provider under the action's current version; the old one is superseded", body = doc::Single<doc::Preview>),
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
    let map = body::object(&bytes)?;
    only_known(&map, &["ttlSeconds"])?;
    let ttl_s = ttl(&map)?;
    let request = json!({"op": "preview.refresh", "id": id, "ttlSeconds": ttl_s});
    idempotent::run(&state, &caller, &headers, request, || async {
        let new = app::previews::refresh(&state, &caller, &id, ttl_s).await?;
        Ok((StatusCode::CREATED, view(&new, state.clock.now())))
    })
    .await
}
