//! Topics, webhook subscriptions and the dead-letter list (`/events/...`, `/dlq`): the SDK's
//! `client.events` subscription methods and `client.dlq` reads, for Steward's own events.
//!
//! Topics are built in (`webhooks/topics.rs`); `publish` and topic creation are not served.
//! Reading needs `actions:read`; creating, changing, deleting and rotating need
//! `actions:write`. A subscription's secret is generated here, sealed by the vault, and shown in
//! the answer to create and to rotate-secret only: never recorded with the idempotency record
//! (a replay answers without it), never logged, never audited.

use super::body;
use super::idempotent;
use super::openapi as doc;
use super::query::Query;
use crate::auth::Caller;
use crate::envelope::ok;
use crate::error::{codes, ApiError, ApiResult};
use crate::events::event_id;
use crate::state::AppState;
use crate::webhooks::deliver::secret_name;
use crate::webhooks::topics::{Topic, TOPICS};
use crate::webhooks::WEBHOOK_SECRET_GRACE_MS;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use rand::RngCore;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use steward_core::scopes;
use steward_store::{Actor, DeadLetter, RedeliveryTarget, SealedSecret, WebhookSubscription};
use steward_wire::{self as wire, Text};

/// The longest subscription URL, in bytes.
pub const WEBHOOK_URL_BYTES_MAX: usize = 2_048;
/// The most extra headers a subscription sends, in headers.
pub const WEBHOOK_HEADERS_MAX: usize = 20;
/// The longest extra header value, in bytes.
pub const WEBHOOK_HEADER_VALUE_BYTES_MAX: usize = 1_000;
/// The most dead letters one listing returns, in letters (the newest).
pub const DEAD_LETTERS_LIST_MAX: u32 = 100;
/// Random bytes in a `whsec_` secret: 256 bits.
const SECRET_BYTES: usize = 32;

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

fn topic(reference: &str) -> ApiResult<Topic> {
    Topic::find(reference).ok_or_else(|| ApiError::not_found("topic"))
}

fn new_secret() -> String {
    let mut bytes = [0u8; SECRET_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("whsec_{}", hex::encode(bytes))
}

fn seal(state: &AppState, s: &WebhookSubscription, secret: &str) -> ApiResult<SealedSecret> {
    let (nonce, sealed) = state
        .vault
        .seal(&s.env_id, &secret_name(&s.id), secret)
        .map_err(|e| ApiError::internal("sealing a webhook secret", &e))?;
    Ok(SealedSecret { nonce, sealed })
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

async fn url_field(state: &AppState, url: Option<Text>) -> ApiResult<Option<String>> {
    let Some(url) = url.map(Text::into_string) else {
        return Ok(None);
    };
    if url.len() > WEBHOOK_URL_BYTES_MAX {
        return Err(ApiError::validation(
            "url",
            format!("must be at most {WEBHOOK_URL_BYTES_MAX} bytes"),
        ));
    }
    state
        .outbound
        .check(&url)
        .await
        .map_err(|e| ApiError::validation("url", e.to_string()))?;
    Ok(Some(url))
}

/// The event types named, each once, if every one is the topic's.
fn event_types_field(given: Option<Vec<String>>, topic: &Topic) -> ApiResult<Option<Vec<String>>> {
    let Some(given) = given else {
        return Ok(None);
    };
    let mut types: Vec<String> = Vec::new();
    for t in given {
        if !topic.carries(&t) {
            return Err(ApiError::validation(
                "eventTypes",
                format!(
                    "must be a list of the topic's event types: {}",
                    topic.event_types().join(", ")
                ),
            ));
        }
        if !types.contains(&t) {
            types.push(t);
        }
    }
    Ok(Some(types))
}

/// The extra headers as stored (an object of names to values), if each may be set.
fn headers_field(given: Option<BTreeMap<String, wire::Credential>>) -> ApiResult<Option<Value>> {
    let Some(given) = given else {
        return Ok(None);
    };
    let invalid = |why: &str| ApiError::validation("headers", why.to_string());
    if given.len() > WEBHOOK_HEADERS_MAX {
        return Err(invalid("has too many headers (at most 20)"));
    }
    for (name, value) in &given {
        let lower = name.to_ascii_lowercase();
        let token = !name.is_empty()
            && name.len() <= 100
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
        if !token
            || lower.starts_with("anlyon-")
            || [
                "content-type",
                "content-length",
                "host",
                "transfer-encoding",
            ]
            .contains(&lower.as_str())
        {
            return Err(invalid(&format!(
                "{name} is not a header a subscription may set"
            )));
        }
        let fits = value.0.len() <= WEBHOOK_HEADER_VALUE_BYTES_MAX
            && value
                .0
                .bytes()
                .all(|b| (0x20..0x7f).contains(&b) || b == b'\t');
        if !fits {
            return Err(invalid(&format!(
                "{name}: a value must be printable ASCII of at most {WEBHOOK_HEADER_VALUE_BYTES_MAX} bytes"
            )));
        }
    }
    Ok(Some(Value::Object(
        given
            .into_iter()
            .map(|(k, v)| (k, Value::String(v.into_string())))
            .collect(),
    )))
}

async fn find(state: &AppState, caller: &Caller, id: &str) -> ApiResult<WebhookSubscription> {
    state
        .store
        .subscription(&caller.env.id, id)
        .await?
        .ok_or_else(|| ApiError::not_found("subscription"))
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
    caller.require(scopes::ACTIONS_READ)?;
    Ok(ok(TOPICS.iter().map(topic_view).collect::<Vec<_>>()))
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
    caller.require(scopes::ACTIONS_READ)?;
    Ok(ok(topic_view(&topic(&reference)?)))
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
    caller.require(scopes::ACTIONS_READ)?;
    let topic = topic(&reference)?;
    let list = state
        .store
        .subscriptions(&caller.env.id, Some(topic.name))
        .await?;
    let backlog = state.store.webhook_backlog(Some(&caller.env.id)).await?;
    let listed = list.iter().map(|s| {
        let behind = backlog.iter().find(|b| b.subscription_id == s.id);
        wire::Subscription {
            backlog: Some(behind.map_or(0, |b| b.events)),
            ..view(s)
        }
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
    let topic = topic(&reference)?;
    let wire::SubscriptionBody {
        url,
        event_types,
        enabled,
        generate_secret: _,
        headers: extra,
    } = body::parse(&bytes)?;
    let url = url_field(&state, url)
        .await?
        .ok_or_else(|| ApiError::validation("url", "is required"))?;
    let event_types = event_types_field(event_types, &topic)?.unwrap_or_default();
    let enabled = enabled.unwrap_or(true);
    let extra = headers_field(extra)?.unwrap_or_else(|| Value::Object(Map::new()));
    let request = json!({"op": "webhooks.subscribe", "topic": topic.name, "url": url,
        "eventTypes": event_types, "enabled": enabled, "headers": extra});
    let secret = new_secret();
    let response = idempotent::run(&state, &caller, &headers, request, || async {
        let now = state.clock.now();
        // Deliveries start with what is sealed from now on.
        let head = state.store.audit_head().await?.seq;
        let mut s = WebhookSubscription {
            id: format!("whs_{}", crate::clock::unique().to_ascii_lowercase()),
            env_id: caller.env.id.clone(),
            topic: topic.name.to_string(),
            url: url.clone(),
            event_types: event_types.clone(),
            enabled,
            headers: extra.clone(),
            secret: SealedSecret {
                nonce: vec![],
                sealed: vec![],
            },
            previous_secret: None,
            previous_until: None,
            cursor: head,
            attempts: 0,
            next_attempt_at: now,
            last_error: None,
            created_at: now,
            updated_at: now,
        };
        s.secret = seal(&state, &s, &secret)?;
        let actor = Actor::key(&caller.key.id, now);
        state.store.create_subscription(&s, &actor).await?;
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
    let current = find(&state, &caller, &id).await?;
    let topic = topic(&current.topic)?;
    let url = url_field(&state, patch.url).await?;
    let event_types = event_types_field(patch.event_types, &topic)?;
    let enabled = patch.enabled;
    let extra = headers_field(patch.headers)?;
    let request = json!({"op": "webhooks.update", "id": id, "url": url,
        "eventTypes": event_types, "enabled": enabled, "headers": extra});
    idempotent::run(&state, &caller, &headers, request, || async {
        let mut s = find(&state, &caller, &id).await?;
        s.url = url.unwrap_or(s.url);
        s.event_types = event_types.unwrap_or(s.event_types);
        s.enabled = enabled.unwrap_or(s.enabled);
        s.headers = extra.unwrap_or(s.headers);
        s.updated_at = state.clock.now();
        let actor = Actor::key(&caller.key.id, s.updated_at);
        if !state.store.update_subscription(&s, &actor).await? {
            return Err(ApiError::not_found("subscription"));
        }
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
    let request = json!({"op": "webhooks.delete", "id": id});
    idempotent::run(&state, &caller, &headers, request, || async {
        let actor = Actor::key(&caller.key.id, state.clock.now());
        if !state
            .store
            .delete_subscription(&caller.env.id, &id, &actor)
            .await?
        {
            return Err(ApiError::not_found("subscription"));
        }
        Ok((StatusCode::OK, steward_wire::Deleted::new(&id)))
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
    let secret = new_secret();
    let response = idempotent::run(&state, &caller, &headers, request, || async {
        let mut s = find(&state, &caller, &id).await?;
        let now = state.clock.now();
        s.previous_secret = Some(s.secret.clone());
        s.previous_until = Some(now.plus_ms(WEBHOOK_SECRET_GRACE_MS));
        s.secret = seal(&state, &s, &secret)?;
        s.updated_at = now;
        let actor = Actor::key(&caller.key.id, now);
        if !state.store.update_subscription(&s, &actor).await? {
            return Err(ApiError::not_found("subscription"));
        }
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
    caller.require(scopes::ACTIONS_READ)?;
    let limit = q.limit.unwrap_or(DEAD_LETTERS_LIST_MAX);
    if !(1..=DEAD_LETTERS_LIST_MAX).contains(&limit) {
        return Err(ApiError::validation(
            "limit",
            format!("must be 1 to {DEAD_LETTERS_LIST_MAX}"),
        ));
    }
    let page = q.page.unwrap_or(1);
    if page == 0 || page.saturating_mul(limit) > 10 * DEAD_LETTERS_LIST_MAX {
        return Err(ApiError::validation("page", "is out of range"));
    }
    let letters = state
        .store
        .dead_letters(&caller.env.id, page * limit)
        .await?;
    let skip = ((page - 1) * limit) as usize;
    Ok(ok(letters
        .iter()
        .skip(skip)
        .map(letter_view)
        .collect::<Vec<_>>()))
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
    caller.require(scopes::ACTIONS_READ)?;
    let letter = state
        .store
        .dead_letter(&caller.env.id, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("dead letter"))?;
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
        let letter = state
            .store
            .dead_letter(&caller.env.id, &id)
            .await?
            .ok_or_else(|| ApiError::not_found("dead letter"))?;
        if state
            .store
            .subscription(&caller.env.id, &letter.subscription_id)
            .await?
            .is_none()
        {
            return Err(ApiError::of(
                codes::DEAD_LETTER_SUBSCRIPTION_GONE,
                "the dead letter's subscription was deleted; nothing can redeliver it",
            ));
        }
        let now = state.clock.now();
        let actor = Actor::key(&caller.key.id, now);
        let marked = state
            .store
            .request_redelivery(&caller.env.id, RedeliveryTarget::Letter(&id), &actor, now)
            .await?;
        // Already requested (or deleted meanwhile): the letter as it stands now.
        let letter = match marked.into_iter().next() {
            Some(marked) => marked,
            None => state
                .store
                .dead_letter(&caller.env.id, &id)
                .await?
                .ok_or_else(|| ApiError::not_found("dead letter"))?,
        };
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
        find(&state, &caller, &id).await?;
        let now = state.clock.now();
        let actor = Actor::key(&caller.key.id, now);
        let marked = state
            .store
            .request_redelivery(
                &caller.env.id,
                RedeliveryTarget::Subscription(&id),
                &actor,
                now,
            )
            .await?;
        let ids: Vec<String> = marked.into_iter().map(|d| d.id).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_whsec_and_fresh() {
        let (a, b) = (new_secret(), new_secret());
        assert!(a.starts_with("whsec_") && a.len() == 6 + 2 * SECRET_BYTES);
        assert_ne!(a, b);
    }

    #[test]
    fn headers_steward_sets_are_refused() {
        let one = |name: &str| {
            Some(BTreeMap::from([(
                name.to_string(),
                wire::Credential("x".to_string()),
            )]))
        };
        for name in ["Anlyon-Signature", "content-type", "Host", "bad name", ""] {
            assert!(headers_field(one(name)).is_err(), "{name}");
        }
        assert_eq!(
            headers_field(one("X-Team")).unwrap(),
            Some(json!({"X-Team": "x"}))
        );
    }
}
