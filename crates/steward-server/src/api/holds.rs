//! Holds (`/holds`, scope `environments:halt`, as the kill switch): the HTTP door over
//! `app/holds.rs`. `POST /holds` holds an action, an operation key, or that key under that
//! action; `GET /holds` lists them; `POST /holds/{id}/release` releases one and dispatches,
//! once each, the invocations it parked.

use super::body;
use super::idempotent;
use super::openapi as doc;
use crate::app;
use crate::app::holds::NewHold;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;
use steward_core::scopes;
use steward_store::HoldRecord;
use steward_wire as wire;

pub(crate) fn view(h: &HoldRecord) -> wire::Hold {
    wire::Hold {
        id: h.id.to_string(),
        action_name: h.action_name.clone(),
        operation_key: h.operation_key.clone(),
        reason: h.reason.clone(),
        created_by: h.created_by.clone(),
        created_at: h.created_at.to_rfc3339(),
        released: None,
    }
}

#[utoipa::path(
    get,
    path = "/holds",
    operation_id = "holds_list",
    tag = "environment",
    responses(
        (status = 200, description = "the environment's holds, oldest first", body = doc::List<doc::Hold>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    let found = app::holds::list(&state, &caller).await?;
    Ok(ok(found.iter().map(view).collect::<Vec<_>>()))
}

#[utoipa::path(
    post,
    path = "/holds",
    operation_id = "holds_create",
    tag = "environment",
    params(doc::IdempotencyHeader),
    request_body = doc::HoldBody,
    responses(
        (status = 201, description = "the hold: new invocations it covers are parked until it is released", body = doc::Single<doc::Hold>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ENVIRONMENTS_HALT)?;
    let given: wire::HoldBody = body::parse(&bytes)?;
    let new = NewHold {
        action_name: given.action_name.map(wire::Text::into_string),
        operation_key: given.operation_key.map(wire::Text::into_string),
        reason: given.reason.map(wire::Text::into_string),
    };
    app::holds::check(&new)?;
    let request = json!({
        "op": "holds.create", "actionName": new.action_name,
        "operationKey": new.operation_key, "reason": new.reason,
    });
    idempotent::run(&state, &caller, &headers, request, || async {
        let hold = app::holds::create(&state, &caller, new.clone()).await?;
        Ok((StatusCode::CREATED, view(&hold)))
    })
    .await
}

#[utoipa::path(
    post,
    path = "/holds/{id}/release",
    operation_id = "holds_release",
    tag = "environment",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::HoldReleaseBody,
    responses(
        (status = 200, description = "the hold as it was, with `released`: how many parked invocations were dispatched", body = doc::Single<doc::Hold>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn release(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ENVIRONMENTS_HALT)?;
    let wire::HoldReleaseBody {} = body::parse(&bytes)?;
    let request = json!({"op": "holds.release", "id": id});
    idempotent::run(&state, &caller, &headers, request, || async {
        let id = app::holds::parse_id(&id)?;
        let done = app::holds::release(&state, &caller, &id).await?;
        let answer = wire::Hold {
            released: Some(done.released as u64),
            ..view(&done.hold)
        };
        Ok((StatusCode::OK, answer))
    })
    .await
}
