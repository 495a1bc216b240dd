//! `actions`: create, read, edit (each edit appends an immutable version), delete.

use super::body;
use super::openapi as doc;
use super::views::ActionView;
use super::{idempotent, views};
use crate::app;
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

/// The warnings of a save, as the wire carries them.
fn wire_warnings(saved: &app::actions::Saved) -> Vec<steward_wire::Warning> {
    super::warnings::wire(&saved.warnings)
}

/// Keys that may edit actions see their wiring; the others see the tool-facing view.
fn view_for(caller: &Caller) -> ActionView {
    if caller.has(scopes::ACTIONS_WRITE) {
        ActionView::Full
    } else {
        ActionView::Tool
    }
}

#[utoipa::path(
    post,
    path = "/actions",
    operation_id = "actions_create",
    tag = "actions",
    params(doc::IdempotencyHeader),
    request_body = doc::ActionBody,
    responses(
        (status = 201, description = "the action created (version 1)", body = doc::Single<doc::Action>),
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
    caller.require(scopes::ACTIONS_WRITE)?;
    let map = body::object(&bytes)?;
    body::only_known_to::<doc::ActionBody>(&map)?;
    let request = json!({"op": "action.create", "body": map});
    idempotent::run_warned(&state, &caller, &headers, request, || async {
        let def = app::actions::definition(map, state.outbound.allow_insecure)?;
        let saved = app::actions::create(&state, &caller, def).await?;
        Ok((
            StatusCode::CREATED,
            views::action(&saved.action, ActionView::Full),
            wire_warnings(&saved),
        ))
    })
    .await
}

#[utoipa::path(
    patch,
    path = "/actions/{reference}",
    operation_id = "actions_update",
    tag = "actions",
    params(doc::ActionPath, doc::IdempotencyHeader),
    request_body = doc::ActionBody,
    responses(
        (status = 200, description = "the action after the edit (a new version when anything changed)", body = doc::Single<doc::Action>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
        doc::TooLarge,
    )
)]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let patch = body::object(&bytes)?;
    body::only_known_to::<doc::ActionBody>(&patch)?;
    let request = json!({"op": "action.update", "ref": reference, "body": patch});
    idempotent::run_warned(&state, &caller, &headers, request, || async {
        let saved = app::actions::update(&state, &caller, &reference, &patch).await?;
        Ok((
            StatusCode::OK,
            views::action(&saved.action, ActionView::Full),
            wire_warnings(&saved),
        ))
    })
    .await
}

#[utoipa::path(
    get,
    path = "/actions/{reference}",
    operation_id = "actions_get",
    tag = "actions",
    params(doc::ActionPath),
    responses(
        (status = 200, description = "the action", body = doc::Single<doc::Action>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let action = app::actions::get(&state, &caller, &reference).await?;
    Ok(ok(views::action(&action, view_for(&caller))))
}

#[utoipa::path(
    get,
    path = "/actions",
    operation_id = "actions_list",
    tag = "actions",
    responses(
        (status = 200, description = "the actions", body = doc::List<doc::Action>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let actions = app::actions::list(&state, &caller).await?;
    Ok(ok(actions
        .iter()
        .map(|a| views::action(a, view_for(&caller)))
        .collect::<Vec<_>>()))
}

#[utoipa::path(
    get,
    path = "/actions/{reference}/versions",
    operation_id = "actions_versions",
    tag = "actions",
    params(doc::ActionPath),
    responses(
        (status = 200, description = "every version of the action", body = doc::List<doc::Action>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn versions(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_READ)?;
    let versions = app::actions::versions(&state, &caller, &reference).await?;
    let names = views::KeyNames::of(&state, &caller.env.id).await?;
    Ok(ok(versions
        .iter()
        .map(|v| views::action_version(v, view_for(&caller), &names))
        .collect::<Vec<_>>()))
}

#[utoipa::path(
    delete,
    path = "/actions/{reference}",
    operation_id = "actions_delete",
    tag = "actions",
    params(doc::ActionPath, doc::IdempotencyHeader),
    responses(
        (status = 200, description = "`{\"id\", \"deleted\": true}`", body = doc::Single<doc::Deleted>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::Conflict,
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(reference): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let request = json!({"op": "action.delete", "ref": reference});
    idempotent::run(&state, &caller, &headers, request, || async {
        let id = app::actions::delete(&state, &caller, &reference).await?;
        Ok((StatusCode::OK, steward_wire::Deleted::new(&id)))
    })
    .await
}
