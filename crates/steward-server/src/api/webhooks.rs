//! Topics, webhook subscriptions and the dead-letter list (`/events/...`, `/dlq`): the SDK's
//! `client.events` subscription methods and `client.dlq` reads, for Steward's own events.
//!
//! The HTTP door over `app/webhooks.rs`. Topics are built in (`webhooks/topics.rs`); `publish`
//! and topic creation are not served. Reading needs `actions:read`; creating, changing,
//! deleting and rotating need `actions:write`. A subscription's secret is generated here
//! (`app::webhooks::new_secret`), sealed by the vault, and shown in the answer to create and to
//! rotate-secret only: never recorded with the idempotency record (a replay answers without
//! it), never logged, never audited.

use super::body;
use super::idempotent;
use super::openapi as doc;
use super::query::Query;
use crate::app;
use crate::app::webhooks::{DeadLetterPage, NewSubscription, SubscriptionChange};
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{ApiError, ApiResult};
use crate::events::event_id;
use crate::state::AppState;
use crate::webhooks::topics::Topic;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use steward_core::scopes;
use steward_store::{DeadLetter, WebhookSubscription};
use steward_wire as wire;

fn topic_view(t: &Topic) -> wire::Topic {
    wire::Topic {
        id: t.id.to_string(),
        name: t.name.to_string(),
        description: t.description.to_string(),
        event_types: t.event_types().iter().map(|e| e.to_string()).collect(),
    }
}

fn view(s: &WebhookSubscription) -> wire::Subscription {
    let names: Vec<String> = s
        .headers
        .as_object()
        .map(|h| h.keys().cloned().collect())
        .unwrap_or_default();
    wire::Subscription {
        id: s.id.clone(),
        topic_id: Topic::by_name(&s.topic).map(|t| t.id.to_string()),
        topic: s.topic.clone(),
        url: s.url.clone(),
        event_types: s.event_types.clone(),
        enabled: s.enabled,
        header_names: names,
        last_event_id: event_id(s.cursor),
        attempts: s.attempts,
        backlog: None,
        next_attempt_at: s.next_attempt_at.to_rfc3339(),
        last_error: s.last_error.clone(),
        previous_secret_valid_until: s.previous_until.map(|m| m.to_rfc3339()),
        created_at: s.created_at.to_rfc3339(),
        updated_at: s.updated_at.to_rfc3339(),
        secret: None,
    }
}

fn letter_view(d: &DeadLetter) -> wire::DeadLetter {
    wire::DeadLetter {
        id: d.id.clone(),
        subscription_id: d.subscription_id.clone(),
        event_id: event_id(d.event_seq),
        event_type: d.event_type.clone(),
        event: serde_json::from_str::<Value>(&d.body).unwrap_or(Value::Null),
        attempts: d.attempts,
        last_error: d.last_error.clone(),
        created_at: d.created_at.to_rfc3339(),
        redelivery: d.redelivery.as_str().to_string(),
        redelivered_at: d.redelivered_at.map(|m| m.to_rfc3339()),
    }
}

/// A topic by id (`top_effects`) or name (`effects`).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TopicPath {
    /// The topic's id or name.
    #[param(rename = "ref")]
    #[serde(rename = "ref")]
    reference: String,
}

/// Puts `secret` into a fresh (not replayed) success answer; a replay goes without it.
async fn with_secret(response: Response, secret: &str) -> ApiResult<Response> {
    if !response.status().is_success() || response.headers().contains_key("idempotent-replayed") {
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, super::JSON_BODY_BYTES_MAX)
        .await
        .map_err(|e| ApiError::internal("reading an answer", &e))?;
    let mut value: Value =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::internal("reading an answer", &e))?;
    value["data"]["secret"] = Value::String(secret.to_string());
    let mut response = (parts.status, axum::Json(value)).into_response();
    *response.headers_mut() = parts.headers;
    response
        .headers_mut()
        .remove(axum::http::header::CONTENT_LENGTH);
    Ok(response)
}

#[utoipa::path(
    get,
    path = "/events/topics",
    operation_id = "events_topics_list",
    tag = "events",
    responses(
        (status = 200, description = "the built-in topics", body = doc::List<doc::Topic>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list_topics(caller: Caller) -> ApiResult<Response> {
    let topics = app::webhooks::topics(&caller)?;
    Ok(ok(topics.iter().map(topic_view).collect::<Vec<_>>()))
}

#[utoipa::path(
    get,
    path = "/events/topics/{ref}",
    operation_id = "events_topics_get",
    tag = "events",
    params(TopicPath),
    responses(
        (status = 200, description = "the topic", body = doc::Single<doc::Topic>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn get_topic(
    caller: Caller,
    Path(TopicPath { reference }): Path<TopicPath>,
) -> ApiResult<Response> {
    Ok(ok(topic_view(&app::webhooks::topic(&caller, &reference)?)))
}

#[utoipa::path(
    get,
    path = "/events/topics/{ref}/subscriptions",
    operation_id = "events_subscriptions_list",
    tag = "events",
    params(TopicPath),
    responses(
        (status = 200, description = "the topic's subscriptions in the key's environment", body = doc::List<doc::Subscription>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn list_subscriptions(
    State(state): State<AppState>,
    caller: Caller,
    Path(TopicPath { reference }): Path<TopicPath>,
) -> ApiResult<Response> {
    let listed = app::webhooks::list_subscriptions(&state, &caller, &reference).await?;
    let listed = listed.iter().map(|l| wire::Subscription {
        backlog: Some(l.backlog),
        ..view(&l.subscription)
    });
    Ok(ok(listed.collect::<Vec<_>>()))
}

#[utoipa::path(
    post,
    path = "/events/topics/{ref}/subscriptions",
    operation_id = "events_subscriptions_create",
    tag = "events",
    params(TopicPath, doc::IdempotencyHeader),
    request_body = doc::SubscriptionBody,
    responses(
        (status = 201, description = "the subscription, with its `whsec_` secret (shown this once)", body = doc::Single<doc::Subscription>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn create_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(TopicPath { reference }): Path<TopicPath>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let topic = app::webhooks::find_topic(&reference)?;
    let given: wire::SubscriptionBody = body::parse(&bytes)?;
    let new = NewSubscription::check(&state, topic, given).await?;
    let request = json!({"op": "webhooks.subscribe", "topic": new.topic.name, "url": new.url,
        "eventTypes": new.event_types, "enabled": new.enabled, "headers": new.headers});
    let secret = app::webhooks::new_secret();
    let response = idempotent::run(&state, &caller, &headers, request, || async {
        let s = app::webhooks::create_subscription(&state, &caller, &new, &secret).await?;
        Ok((StatusCode::CREATED, view(&s)))
    })
    .await?;
    with_secret(response, &secret).await
}

#[utoipa::path(
    patch,
    path = "/events/subscriptions/{id}",
    operation_id = "events_subscriptions_update",
    tag = "events",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::SubscriptionPatch,
    responses(
        (status = 200, description = "the subscription as changed", body = doc::Single<doc::Subscription>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn update_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let patch: wire::SubscriptionPatch = body::parse(&bytes)?;
    let change = SubscriptionChange::check(&state, &caller, &id, patch).await?;
    let request = json!({"op": "webhooks.update", "id": id, "url": change.url,
        "eventTypes": change.event_types, "enabled": change.enabled, "headers": change.headers});
    idempotent::run(&state, &caller, &headers, request, || async {
        let s = app::webhooks::update_subscription(&state, &caller, &id, change).await?;
        Ok((StatusCode::OK, view(&s)))
    })
    .await
}

#[utoipa::path(
    delete,
    path = "/events/subscriptions/{id}",
    operation_id = "events_subscriptions_delete",
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
pub async fn delete_subscription(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    idempotent::delete(&state, &caller, &headers, "webhooks.delete", &id, || {
        app::webhooks::delete_subscription(&state, &caller, &id)
    })
    .await
}

#[utoipa::path(
    post,
    path = "/events/subscriptions/{id}/rotate-secret",
    operation_id = "events_subscriptions_rotate_secret",
    tag = "events",
    params(doc::IdPath, doc::IdempotencyHeader),
    responses(
        (status = 200, description = "the subscription with its new `whsec_` secret (shown this once); the previous one signs too until `previousSecretValidUntil`", body = doc::Single<doc::Subscription>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
    )
)]
pub async fn rotate_secret(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let request = json!({"op": "webhooks.rotate", "id": id});
    let secret = app::webhooks::new_secret();
    let response = idempotent::run(&state, &caller, &headers, request, || async {
        let s = app::webhooks::rotate_secret(&state, &caller, &id, &secret).await?;
        Ok((StatusCode::OK, view(&s)))
    })
    .await?;
    with_secret(response, &secret).await
}

/// `GET /dlq`: the SDK's `page` and `limit`.
#[derive(Debug, Deserialize)]
pub struct DeadLetterQuery {
    page: Option<u32>,
    limit: Option<u32>,
}

#[utoipa::path(
    get,
    path = "/dlq",
    operation_id = "dlq_list",
    tag = "events",
    responses(
        (status = 200, description = "the environment's dead letters, newest first (at most 100)", body = doc::List<doc::DeadLetter>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn dead_letters(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<DeadLetterQuery>,
) -> ApiResult<Response> {
    let which = DeadLetterPage {
        page: q.page,
        limit: q.limit,
    };
    let letters = app::webhooks::dead_letters(&state, &caller, which).await?;
    Ok(ok(letters.iter().map(letter_view).collect::<Vec<_>>()))
}

#[utoipa::path(
    get,
    path = "/dlq/{id}",
    operation_id = "dlq_get",
    tag = "events",
    params(doc::IdPath),
    responses(
        (status = 200, description = "one dead letter", body = doc::Single<doc::DeadLetter>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn dead_letter(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let letter = app::webhooks::dead_letter(&state, &caller, &id).await?;
    Ok(ok(letter_view(&letter)))
}

#[utoipa::path(
    post,
    path = "/dlq/{id}/redeliver",
    operation_id = "dlq_redeliver",
    tag = "events",
    params(doc::IdPath, doc::IdempotencyHeader),
    responses(
        (status = 202, description = "the dead letter, its redelivery `requested`: its subscription's worker POSTs it once, before the subscription's next event, and records the answer (`redelivered`, or `dead` again with the error)", body = doc::Single<doc::DeadLetter>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
    )
)]
pub async fn redeliver_dead_letter(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let request = json!({"op": "dlq.redeliver", "id": id});
    idempotent::run(&state, &caller, &headers, request, || async {
        let letter = app::webhooks::redeliver_dead_letter(&state, &caller, &id).await?;
        Ok((StatusCode::ACCEPTED, letter_view(&letter)))
    })
    .await
}

#[utoipa::path(
    post,
    path = "/events/subscriptions/{id}/dlq/redeliver",
    operation_id = "events_subscriptions_dlq_redeliver",
    tag = "events",
    params(doc::IdPath, doc::IdempotencyHeader),
    responses(
        (status = 202, description = "every dead letter of the subscription not already requested is `requested`, each to be POSTed once by the subscription's worker, oldest first", body = doc::Single<doc::RedeliveryRequested>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
    )
)]
pub async fn redeliver_subscription_dead_letters(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(scopes::ACTIONS_WRITE)?;
    let request = json!({"op": "dlq.redeliver_subscription", "id": id});
    idempotent::run(&state, &caller, &headers, request, || async {
        let ids = app::webhooks::redeliver_subscription_dead_letters(&state, &caller, &id).await?;
        Ok((
            StatusCode::ACCEPTED,
            wire::RedeliveryRequested {
                subscription_id: id.clone(),
                requested: ids.len() as u64,
                dead_letter_ids: ids,
            },
        ))
    })
    .await
}
