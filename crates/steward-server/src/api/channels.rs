//! Approval channels (`/approval-channels`, issue #29 item 2): the HTTP door over
//! `app/channels.rs`. A channel's credential (a Slack URL) is taken here, sealed by the vault
//! and never written back: answers show only where it sends.

use super::body;
use super::idempotent;
use super::openapi as doc;
use crate::app;
use crate::app::channels::NewChannel;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::ApiResult;
use crate::events::event_id;
use crate::state::AppState;
use crate::webhooks::channels::kind;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;
use steward_core::scopes;
use steward_store::WebhookSubscription;
use steward_wire as wire;

fn view(s: &WebhookSubscription) -> wire::ApprovalChannel {
    wire::ApprovalChannel {
        id: s.id.clone(),
        kind: kind(s).unwrap_or_default().to_string(),
        destination: s.url.clone(),
        enabled: s.enabled,
        last_event_id: event_id(s.cursor),
        attempts: s.attempts,
        next_attempt_at: s.next_attempt_at.to_rfc3339(),
        last_error: s.last_error.clone(),
        created_at: s.created_at.to_rfc3339(),
    }
}

#[utoipa::path(
    get,
    path = "/approval-channels",
    operation_id = "approval_channels_list",
    tag = "events",
    responses(
        (status = 200, description = "the environment's approval channels", body = doc::List<doc::ApprovalChannel>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Response> {
    let found = app::channels::list(&state, &caller).await?;
    Ok(ok(found.iter().map(view).collect::<Vec<_>>()))
}

#[utoipa::path(
    post,
    path = "/approval-channels",
    operation_id = "approval_channels_create",
    tag = "events",
    params(doc::IdempotencyHeader),
    request_body = doc::ApprovalChannelBody,
    responses(
        (status = 201, description = "the channel (its credential is not shown)", body = doc::Single<doc::ApprovalChannel>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
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
    let given: wire::ApprovalChannelBody = body::parse(&bytes)?;
    let new = NewChannel::check(&state, given).await?;
    // The credential is not part of the recorded request (only where it sends).
    let request = json!({"op": "channels.add", "kind": new.kind, "destination": new.destination});
    idempotent::run(&state, &caller, &headers, request, || async {
        let s = app::channels::add(&state, &caller, &new).await?;
        Ok((StatusCode::CREATED, view(&s)))
    })
    .await
}

#[utoipa::path(
    delete,
    path = "/approval-channels/{id}",
    operation_id = "approval_channels_delete",
    tag = "events",
    params(doc::IdPath, doc::IdempotencyHeader),
    responses(
        (status = 200, description = "`{\"id\", \"deleted\": true}`", body = doc::Single<doc::Deleted>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    idempotent::delete(&state, &caller, &headers, "channels.remove", &id, || {
        app::channels::remove(&state, &caller, &id)
    })
    .await
}
