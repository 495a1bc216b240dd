//! Webhook subscriptions, their delivery cursors, and the dead-letter list (issue #15 item 4).
//!
//! A subscription delivers its environment's events (the sealed audit log, read by the server)
//! in `seq` order. Its `cursor` is the last `seq` it is done with: delivered with a 2xx, or put
//! in the dead-letter list after the retry budget. The cursor moves only through
//! [`Webhooks::record_delivery`], after the attempt, so a process that dies at any point before
//! it leaves the cursor where it was and the event is delivered again (at least once; receivers
//! dedupe by event id).

use crate::error::StoreResult;
use crate::records::{Actor, Sweep};
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
    /// The epoch of the subscription's delivery lease: it grows at each claim, and a delivery
    /// result is recorded only under the claim's epoch (`Webhooks::record_delivery`).
    pub lease_epoch: i64,
    /// Failed attempts at the event after the cursor.
    pub attempts: u32,
    pub next_attempt_at: Millis,
    pub last_error: Option<String>,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// How it delivers: `None` for a signed webhook POSTed to `url`; for an approval channel
    /// (issue #29 item 2) its kind and settings as a JSON object (`{"kind": "slack", ...}`).
    /// Never a credential: a channel's Slack URL or SMTP password is sealed as `secret`.
    pub channel: Option<Value>,
}

impl WebhookSubscription {
    /// What the audit log keeps of a subscription: never its secrets or header values.
    pub(crate) fn audit_view(&self) -> serde_json::Value {
        let mut view = serde_json::json!({"topic": self.topic, "url": self.url,
            "eventTypes": self.event_types, "enabled": self.enabled,
            "secretRotated": self.previous_secret.is_some()});
        if let Some(channel) = &self.channel {
            view["channel"] = channel.clone();
        }
        view
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
    /// Where an operator's redelivery of it stands.
    pub redelivery: Redelivery,
    /// When a redelivery was last answered 2xx.
    pub redelivered_at: Option<Millis>,
}

/// Where a dead letter's redelivery stands. A letter starts `Dead`; an operator's request makes
/// it `Requested` (durably, audited); the lease holder of its subscription then POSTs its body
/// once: a 2xx makes it `Redelivered`, a failure `Dead` again with the error and one more
/// attempt, for the operator to ask again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redelivery {
    Dead,
    Requested,
    Redelivered,
}

impl Redelivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Redelivery::Dead => "dead",
            Redelivery::Requested => "requested",
            Redelivery::Redelivered => "redelivered",
        }
    }

    /// The state stored as `text`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "dead" => Some(Redelivery::Dead),
            "requested" => Some(Redelivery::Requested),
            "redelivered" => Some(Redelivery::Redelivered),
            _ => None,
        }
    }
}

/// Which dead letters an operator asks to redeliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedeliveryTarget<'a> {
    /// One letter, by id.
    Letter(&'a str),
    /// Every letter of one subscription that is not already requested.
    Subscription(&'a str),
}

/// How far one subscription is behind: the sealed events of its environment after its cursor,
/// counted over at most [`WEBHOOK_BACKLOG_SCAN_EVENTS_MAX`] sealed events of the whole log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookBacklog {
    pub subscription_id: String,
    pub env_id: EnvironmentId,
    /// Events after the cursor, an upper bound on those still to deliver (some may be of types
    /// the subscription does not take).
    pub events: u64,
}

/// The most sealed events one backlog count scans per subscription, in events: bounds a
/// scrape's work whatever the backlog; a backlog this long reads as at least this.
pub const WEBHOOK_BACKLOG_SCAN_EVENTS_MAX: i64 = 100_000;

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

    /// Leases at most `limit` enabled subscriptions that are due (`next_attempt_at <= now`, or
    /// a dead letter of theirs is `Requested`) and not leased until after `now` (by anyone,
    /// `owner` included: a replica's worker keeps its lease while it delivers, and must not be
    /// doubled), to `owner` until `lease_until`, and returns them. Two replicas never hold one
    /// subscription's lease at once, so one event is not POSTed by both (a lease that runs out
    /// mid-attempt can still cause a repeat: at least once). Each claim moves the
    /// subscription's `lease_epoch` on: the returned value is the claim's fencing token.
    async fn claim_subscriptions(
        &self,
        owner: &str,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<WebhookSubscription>>;

    /// Records an attempt's outcome for a subscription `owner` leased at cursor `from` under
    /// the claim `epoch` (its `lease_epoch` as claimed). With `keep_until` the lease stays
    /// `owner`'s until then, under the same epoch (it delivers the next event at once);
    /// without, the lease is released. A stale claim (the lease is no longer `owner`'s under
    /// `epoch`: it ran out and another claim took it) is refused with `StoreError::Fenced`,
    /// nothing written; `false` (and nothing written) when the claim holds but the cursor is no
    /// longer what the caller saw. Once this returns `true` the cursor (and a dead letter) is
    /// durable: after a crash delivery resumes after it.
    #[allow(clippy::too_many_arguments)]
    async fn record_delivery(
        &self,
        id: &str,
        owner: &str,
        epoch: i64,
        from: i64,
        outcome: &DeliveryOutcome,
        now: Millis,
        keep_until: Option<Millis>,
    ) -> StoreResult<bool>;

    /// Releases every subscription lease whose owner is dead for `sweep`: not the sweeping
    /// replica and not alive (for the embedded store's start-up sweep, every other owner). A
    /// restarted process calls it at start, so deliveries a killed process held resume at once
    /// instead of after the lease. Answers how many leases it released.
    async fn release_dead_webhook_leases(&self, sweep: &Sweep) -> StoreResult<u64>;

    /// The environment's dead letters, newest first, at most `limit`.
    async fn dead_letters(&self, env: &EnvironmentId, limit: u32) -> StoreResult<Vec<DeadLetter>>;

    /// One dead letter of the environment.
    async fn dead_letter(&self, env: &EnvironmentId, id: &str) -> StoreResult<Option<DeadLetter>>;

    /// Marks the target's letters `Requested` (a letter already requested stays as it is), with
    /// one audit event per letter marked, and makes their subscription claimable at once. Only
    /// letters of the environment whose subscription still exists are marked. Answers the
    /// letters marked. Once this returns the request is durable: a crash before the POST
    /// redelivers after the restart.
    async fn request_redelivery(
        &self,
        env: &EnvironmentId,
        target: RedeliveryTarget<'_>,
        actor: &Actor,
        now: Millis,
    ) -> StoreResult<Vec<DeadLetter>>;

    /// The subscription's letters in state `Requested`, oldest first, at most `limit`.
    async fn requested_redeliveries(
        &self,
        subscription: &str,
        limit: u32,
    ) -> StoreResult<Vec<DeadLetter>>;

    /// Records a redelivery's answer (`Ok` for a 2xx, else the error), with its audit event,
    /// if `owner` still holds the letter's subscription's lease and the letter is still
    /// `Requested`; `false` and nothing written otherwise.
    async fn record_redelivery(
        &self,
        letter: &str,
        owner: &str,
        result: Result<(), String>,
        now: Millis,
    ) -> StoreResult<bool>;

    /// How far each subscription is behind (of `env` if given), oldest subscription first.
    async fn webhook_backlog(
        &self,
        env: Option<&EnvironmentId>,
    ) -> StoreResult<Vec<WebhookBacklog>>;
}
