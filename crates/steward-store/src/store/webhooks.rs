//! Webhook subscriptions, their delivery cursors, and the dead-letter list (issue #15 item 4).
//!
//! A subscription delivers its environment's events (the sealed audit log, read by the server)
//! in `seq` order. Its `cursor` is the last `seq` it is done with: delivered with a 2xx, or put
//! in the dead-letter list after the retry budget. The cursor moves only through
//! [`Webhooks::record_delivery`], after the attempt, so a process that dies at any point before
//! it leaves the cursor where it was and the event is delivered again (at least once; receivers
//! dedupe by event id).

use crate::error::StoreResult;
use crate::records::Actor;
use async_trait::async_trait;
use serde_json::Value;
use steward_core::{EnvironmentId, Millis};

/// One subscription. `secret` and `previous_secret` are sealed by the server's vault (nonce,
/// ciphertext); the store never sees a secret in clear.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookSubscription {
    pub id: String,
    pub env_id: EnvironmentId,
    pub topic: String,
    pub url: String,
    /// Event types delivered; empty for every type of the topic.
    pub event_types: Vec<String>,
    pub enabled: bool,
    /// Extra request headers (a JSON object of strings).
    pub headers: Value,
    pub secret: SealedSecret,
    /// The secret before the last rotation, still signed with until `previous_until`.
    pub previous_secret: Option<SealedSecret>,
    pub previous_until: Option<Millis>,
    /// The last event `seq` this subscription is done with.
    pub cursor: i64,
    /// Failed attempts at the event after the cursor.
    pub attempts: u32,
    pub next_attempt_at: Millis,
    pub last_error: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl WebhookSubscription {
    /// What the audit log keeps of a subscription: never its secrets or header values.
    pub(crate) fn audit_view(&self) -> serde_json::Value {
        serde_json::json!({"topic": self.topic, "url": self.url, "eventTypes": self.event_types,
            "enabled": self.enabled, "secretRotated": self.previous_secret.is_some()})
    }
}

/// A secret sealed by the vault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub nonce: Vec<u8>,
    pub sealed: Vec<u8>,
}

/// An event a subscription gave up on after its retry budget.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    pub id: String,
    pub subscription_id: String,
    pub env_id: EnvironmentId,
    pub event_seq: i64,
    pub event_type: String,
    /// The body that was POSTed, byte for byte.
    pub body: String,
    pub attempts: u32,
    pub last_error: String,
    pub created_at: Millis,
}

/// What one delivery attempt (or a scan that found nothing to deliver) leaves behind.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryOutcome {
    /// Done with everything up to `cursor` (a 2xx, or events the subscription does not take):
    /// the cursor moves there and the attempt count restarts.
    Advance { cursor: i64 },
    /// The attempt failed; try again at `next_attempt_at`, with `attempts` failures so far.
    Retry {
        attempts: u32,
        next_attempt_at: Millis,
        error: String,
    },
    /// The retry budget is spent: `letter` is stored and the cursor moves to its event.
    DeadLetter { letter: DeadLetter },
}

/// Subscriptions, deliveries and dead letters.
#[async_trait]
pub trait Webhooks: Send + Sync {
    /// Stores a new subscription, with its audit event (no secret in it).
    async fn create_subscription(
        &self,
        subscription: &WebhookSubscription,
        actor: &Actor,
    ) -> StoreResult<()>;

    /// The environment's subscriptions (of `topic` if given), oldest first.
    async fn subscriptions(
        &self,
        env: &EnvironmentId,
        topic: Option<&str>,
    ) -> StoreResult<Vec<WebhookSubscription>>;

    async fn subscription(
        &self,
        env: &EnvironmentId,
        id: &str,
    ) -> StoreResult<Option<WebhookSubscription>>;

    /// Writes what a caller may change (url, event types, enabled, headers, secrets), by
    /// environment and id, with its audit event. `false` when there is no such subscription.
    async fn update_subscription(
        &self,
        subscription: &WebhookSubscription,
        actor: &Actor,
    ) -> StoreResult<bool>;

    /// Deletes it (its dead letters stay), with its audit event. `false` when there is none.
    async fn delete_subscription(
        &self,
        env: &EnvironmentId,
        id: &str,
        actor: &Actor,
    ) -> StoreResult<bool>;

    /// Leases at most `limit` enabled subscriptions that are due (`next_attempt_at <= now`)
    /// and not leased by another replica until after `now`, to `owner` until `lease_until`,
    /// and returns them. Two replicas never hold one subscription's lease at once, so one
    /// event is not POSTed by both (a lease that runs out mid-attempt can still cause a repeat:
    /// at least once).
    async fn claim_subscriptions(
        &self,
        owner: &str,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<WebhookSubscription>>;

    /// Records an attempt's outcome for a subscription `owner` leased at cursor `from`, and
    /// releases the lease. `false` (and nothing written) when the lease or the cursor is no
    /// longer what the caller saw: another replica moved on.
    async fn record_delivery(
        &self,
        id: &str,
        owner: &str,
        from: i64,
        outcome: &DeliveryOutcome,
        now: Millis,
    ) -> StoreResult<bool>;

    /// The environment's dead letters, newest first, at most `limit`.
    async fn dead_letters(&self, env: &EnvironmentId, limit: u32) -> StoreResult<Vec<DeadLetter>>;
}
