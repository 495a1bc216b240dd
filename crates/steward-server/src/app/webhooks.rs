//! Topics, webhook subscriptions and the dead-letter list, for Steward's own events. Topics are
//! built in (`webhooks/topics.rs`); `publish` and topic creation are not served. Reading needs
//! `actions:read`; creating, changing, deleting, rotating and asking for redelivery need
//! `actions:write`. `api/webhooks.rs` is the HTTP door; the console's webhooks page calls
//! that door's handlers.
//!
//! A subscription's secret is made by [`new_secret`] before the use case runs (the HTTP door
//! shows it in a fresh answer only, never in a replay) and sealed by the vault here: it is never
//! recorded with an idempotency record, logged or audited.

use super::{Error, Principal, Result};
use crate::error::codes;
use crate::state::AppState;
use crate::webhooks::deliver::secret_name;
use crate::webhooks::topics::{Topic, TOPICS};
use crate::webhooks::WEBHOOK_SECRET_GRACE_MS;
use rand::RngCore;
use serde_json::{Map, Value};
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

/// A subscription as listed: with how many events it is behind.
#[derive(Debug)]
pub struct Listed {
    pub subscription: WebhookSubscription,
    /// Events sealed after its cursor that it has yet to deliver.
    pub backlog: u64,
}

/// A new subscription, checked: its topic, where it posts, and what.
#[derive(Debug)]
pub struct NewSubscription {
    pub topic: Topic,
    pub url: String,
    /// Each once; empty means every event type of the topic.
    pub event_types: Vec<String>,
    pub enabled: bool,
    /// The extra headers as stored: an object of names to values.
    pub headers: Value,
}

/// A change to a subscription, checked: `None` leaves a field as it is.
#[derive(Debug)]
pub struct SubscriptionChange {
    pub url: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub enabled: Option<bool>,
    pub headers: Option<Value>,
}

/// Which page of the dead-letter list, newest first.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeadLetterPage {
    /// From 1; 1 when not given.
    pub page: Option<u32>,
    /// 1 to [`DEAD_LETTERS_LIST_MAX`]; the most when not given.
    pub limit: Option<u32>,
}

/// A fresh `whsec_` secret of [`SECRET_BYTES`] random bytes.
pub fn new_secret() -> String {
    let mut bytes = [0u8; SECRET_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("whsec_{}", hex::encode(bytes))
}

/// The topic named by its id (`top_effects`) or name (`effects`); 404 if none.
pub fn find_topic(reference: &str) -> Result<Topic> {
    Topic::find(reference).ok_or_else(|| Error::not_found("topic"))
}

/// The built-in topics.
pub fn topics(principal: &Principal) -> Result<&'static [Topic]> {
    principal.require(scopes::ACTIONS_READ)?;
    Ok(TOPICS)
}

/// One built-in topic, by id or name.
pub fn topic(principal: &Principal, reference: &str) -> Result<Topic> {
    principal.require(scopes::ACTIONS_READ)?;
    find_topic(reference)
}

/// The subscriptions to the topic `reference` in the principal's environment, each with its
/// backlog.
pub async fn list_subscriptions(
    state: &AppState,
    principal: &Principal,
    reference: &str,
) -> Result<Vec<Listed>> {
    principal.require(scopes::ACTIONS_READ)?;
    let topic = find_topic(reference)?;
    let list = state
        .store
        .subscriptions(&principal.env.id, Some(topic.name))
        .await?;
    let backlog = state.store.webhook_backlog(Some(&principal.env.id)).await?;
    // Approval channels ride the same machinery; they are listed at `/approval-channels`.
    Ok(list
        .into_iter()
        .filter(|s| s.channel.is_none())
        .map(|subscription| {
            let behind = backlog
                .iter()
                .find(|b| b.subscription_id == subscription.id);
            Listed {
                backlog: behind.map_or(0, |b| b.events),
                subscription,
            }
        })
        .collect())
}

impl NewSubscription {
    /// The body's fields for a subscription to `topic`, each checked (the URL with the outbound
    /// policy), naming the field refused.
    pub async fn check(
        state: &AppState,
        topic: Topic,
        body: wire::SubscriptionBody,
    ) -> Result<NewSubscription> {
        let wire::SubscriptionBody {
            url,
            event_types,
            enabled,
            generate_secret: _,
            headers,
        } = body;
        let url = url_field(state, url)
            .await?
            .ok_or_else(|| Error::validation("url", "is required"))?;
        let event_types = event_types_field(event_types, &topic)?.unwrap_or_default();
        let headers = headers_field(headers)?.unwrap_or_else(|| Value::Object(Map::new()));
        Ok(NewSubscription {
            topic,
            url,
            event_types,
            enabled: enabled.unwrap_or(true),
            headers,
        })
    }
}

impl SubscriptionChange {
    /// The patch's fields for the subscription `id` (404 if the principal's environment has
    /// none), each checked against its topic.
    pub async fn check(
        state: &AppState,
        principal: &Principal,
        id: &str,
        patch: wire::SubscriptionPatch,
    ) -> Result<SubscriptionChange> {
        let current = find(state, principal, id).await?;
        let topic = find_topic(&current.topic)?;
        Ok(SubscriptionChange {
            url: url_field(state, patch.url).await?,
            event_types: event_types_field(patch.event_types, &topic)?,
            enabled: patch.enabled,
            headers: headers_field(patch.headers)?,
        })
    }
}

/// Creates a subscription signing with `secret`; it delivers what is sealed from now on.
pub async fn create_subscription(
    state: &AppState,
    principal: &Principal,
    new: &NewSubscription,
    secret: &str,
) -> Result<WebhookSubscription> {
    principal.require(scopes::ACTIONS_WRITE)?;
    let now = state.clock.now();
    // Deliveries start with what is sealed from now on.
    let head = state.store.audit_head().await?.seq;
    let mut s = WebhookSubscription {
        id: format!("whs_{}", crate::clock::unique().to_ascii_lowercase()),
        env_id: principal.env.id.clone(),
        topic: new.topic.name.to_string(),
        url: new.url.clone(),
        event_types: new.event_types.clone(),
        enabled: new.enabled,
        headers: new.headers.clone(),
        secret: SealedSecret {
            nonce: vec![],
            sealed: vec![],
        },
        previous_secret: None,
        previous_until: None,
        cursor: head,
        lease_epoch: 0,
        attempts: 0,
        next_attempt_at: now,
        last_error: None,
        created_at: now,
        updated_at: now,
        channel: None,
    };
    s.secret = seal(state, &s, secret)?;
    let actor = Actor::key(&principal.key.id, now);
    state.store.create_subscription(&s, &actor).await?;
    Ok(s)
}

/// Applies `change` to the subscription `id`.
pub async fn update_subscription(
    state: &AppState,
    principal: &Principal,
    id: &str,
    change: SubscriptionChange,
) -> Result<WebhookSubscription> {
    principal.require(scopes::ACTIONS_WRITE)?;
    let mut s = find(state, principal, id).await?;
    s.url = change.url.unwrap_or(s.url);
    s.event_types = change.event_types.unwrap_or(s.event_types);
    s.enabled = change.enabled.unwrap_or(s.enabled);
    s.headers = change.headers.unwrap_or(s.headers);
    s.updated_at = state.clock.now();
    let actor = Actor::key(&principal.key.id, s.updated_at);
    if !state.store.update_subscription(&s, &actor).await? {
        return Err(Error::not_found("subscription"));
    }
    Ok(s)
}

/// Deletes the subscription `id`.
pub async fn delete_subscription(state: &AppState, principal: &Principal, id: &str) -> Result<()> {
    principal.require(scopes::ACTIONS_WRITE)?;
    find(state, principal, id).await?;
    let actor = Actor::key(&principal.key.id, state.clock.now());
    if !state
        .store
        .delete_subscription(&principal.env.id, id, &actor)
        .await?
    {
        return Err(Error::not_found("subscription"));
    }
    Ok(())
}

/// Makes `secret` the subscription's signing secret; the previous one signs too for
/// [`WEBHOOK_SECRET_GRACE_MS`].
pub async fn rotate_secret(
    state: &AppState,
    principal: &Principal,
    id: &str,
    secret: &str,
) -> Result<WebhookSubscription> {
    principal.require(scopes::ACTIONS_WRITE)?;
    let mut s = find(state, principal, id).await?;
    let now = state.clock.now();
    s.previous_secret = Some(s.secret.clone());
    s.previous_until = Some(now.plus_ms(WEBHOOK_SECRET_GRACE_MS));
    s.secret = seal(state, &s, secret)?;
    s.updated_at = now;
    let actor = Actor::key(&principal.key.id, now);
    if !state.store.update_subscription(&s, &actor).await? {
        return Err(Error::not_found("subscription"));
    }
    Ok(s)
}

/// A page of the environment's dead letters, newest first.
pub async fn dead_letters(
    state: &AppState,
    principal: &Principal,
    which: DeadLetterPage,
) -> Result<Vec<DeadLetter>> {
    principal.require(scopes::ACTIONS_READ)?;
    let limit = which.limit.unwrap_or(DEAD_LETTERS_LIST_MAX);
    if !(1..=DEAD_LETTERS_LIST_MAX).contains(&limit) {
        return Err(Error::validation(
            "limit",
            format!("must be 1 to {DEAD_LETTERS_LIST_MAX}"),
        ));
    }
    let page = which.page.unwrap_or(1);
    if page == 0 || page.saturating_mul(limit) > 10 * DEAD_LETTERS_LIST_MAX {
        return Err(Error::validation("page", "is out of range"));
    }
    let letters = state
        .store
        .dead_letters(&principal.env.id, page * limit)
        .await?;
    let skip = ((page - 1) * limit) as usize;
    Ok(letters.into_iter().skip(skip).collect())
}

/// One dead letter.
pub async fn dead_letter(state: &AppState, principal: &Principal, id: &str) -> Result<DeadLetter> {
    principal.require(scopes::ACTIONS_READ)?;
    letter(state, principal, id).await
}

/// Asks the letter's subscription worker to POST the dead letter `id` once more; a letter
/// already requested is answered as it stands.
pub async fn redeliver_dead_letter(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<DeadLetter> {
    principal.require(scopes::ACTIONS_WRITE)?;
    let letter_found = letter(state, principal, id).await?;
    if state
        .store
        .subscription(&principal.env.id, &letter_found.subscription_id)
        .await?
        .is_none()
    {
        return Err(Error::of(
            codes::DEAD_LETTER_SUBSCRIPTION_GONE,
            "the dead letter's subscription was deleted; nothing can redeliver it",
        ));
    }
    let now = state.clock.now();
    let actor = Actor::key(&principal.key.id, now);
    let marked = state
        .store
        .request_redelivery(&principal.env.id, RedeliveryTarget::Letter(id), &actor, now)
        .await?;
    // Already requested (or deleted meanwhile): the letter as it stands now.
    match marked.into_iter().next() {
        Some(marked) => Ok(marked),
        None => letter(state, principal, id).await,
    }
}

/// Asks for redelivery of every dead letter of the subscription `id` not already requested;
/// returns their ids.
pub async fn redeliver_subscription_dead_letters(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<Vec<String>> {
    principal.require(scopes::ACTIONS_WRITE)?;
    find(state, principal, id).await?;
    let now = state.clock.now();
    let actor = Actor::key(&principal.key.id, now);
    let marked = state
        .store
        .request_redelivery(
            &principal.env.id,
            RedeliveryTarget::Subscription(id),
            &actor,
            now,
        )
        .await?;
    Ok(marked.into_iter().map(|d| d.id).collect())
}

async fn find(state: &AppState, principal: &Principal, id: &str) -> Result<WebhookSubscription> {
    state
        .store
        .subscription(&principal.env.id, id)
        .await?
        .filter(|s| s.channel.is_none())
        .ok_or_else(|| Error::not_found("subscription"))
}

async fn letter(state: &AppState, principal: &Principal, id: &str) -> Result<DeadLetter> {
    state
        .store
        .dead_letter(&principal.env.id, id)
        .await?
        .ok_or_else(|| Error::not_found("dead letter"))
}

fn seal(state: &AppState, s: &WebhookSubscription, secret: &str) -> Result<SealedSecret> {
    let (nonce, sealed) = state
        .vault
        .seal(&s.env_id, &secret_name(&s.id), secret)
        .map_err(|e| Error::internal("sealing a webhook secret", &e))?;
    Ok(SealedSecret { nonce, sealed })
}

async fn url_field(state: &AppState, url: Option<Text>) -> Result<Option<String>> {
    let Some(url) = url.map(Text::into_string) else {
        return Ok(None);
    };
    if url.len() > WEBHOOK_URL_BYTES_MAX {
        return Err(Error::validation(
            "url",
            format!("must be at most {WEBHOOK_URL_BYTES_MAX} bytes"),
        ));
    }
    state
        .outbound
        .check(&url)
        .await
        .map_err(|e| Error::validation("url", e.to_string()))?;
    Ok(Some(url))
}

/// The event types named, each once, if every one is the topic's.
fn event_types_field(given: Option<Vec<String>>, topic: &Topic) -> Result<Option<Vec<String>>> {
    let Some(given) = given else {
        return Ok(None);
    };
    let mut types: Vec<String> = Vec::new();
    for t in given {
        if !topic.carries(&t) {
            return Err(Error::validation(
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
fn headers_field(given: Option<BTreeMap<String, wire::Credential>>) -> Result<Option<Value>> {
    let Some(given) = given else {
        return Ok(None);
    };
    let invalid = |why: &str| Error::validation("headers", why.to_string());
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
