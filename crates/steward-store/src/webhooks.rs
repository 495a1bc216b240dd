//! Webhooks, the same in every backend: the columns read, how a row becomes a
//! [`WebhookSubscription`], a [`DeadLetter`] or a [`WebhookBacklog`], and what the audit log
//! records of each change. The backends keep only their SQL, their claims and their leases
//! (`sqlite/webhooks.rs`, `postgres/webhooks.rs`).

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::columns::Columns;
use crate::error::{StoreError, StoreResult};
use crate::store::{DeadLetter, Redelivery, SealedSecret, WebhookBacklog, WebhookSubscription};
use serde_json::json;
use steward_core::{EnvironmentId, Millis};

/// The columns [`subscription`] reads, in its order.
pub(crate) const COLUMNS: &str =
    "id, env_id, topic, url, event_types, enabled, headers, secret_nonce, secret,
    previous_nonce, previous_secret, previous_until, cursor, attempts, next_attempt_at, last_error,
    created_at, updated_at, lease_epoch, channel";

/// The columns [`dead_letter`] reads, in its order.
pub(crate) const LETTER_COLUMNS: &str =
    "id, subscription_id, env_id, event_seq, event_type, body, attempts,
    last_error, created_at, redelivery, redelivered_at";

/// True (as SQL) when the subscription `s` has a letter waiting for its redelivery.
pub(crate) const REDELIVERY_WAITING: &str = "EXISTS (SELECT 1 FROM webhook_dead_letters d
    WHERE d.subscription_id = s.id AND d.redelivery = 'requested')";

fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {detail}"))
}

/// One row of [`COLUMNS`]. `enabled` is an integer on SQLite and a boolean on PostgreSQL; both
/// drivers read either as `bool`.
pub(crate) fn subscription(row: &impl Columns) -> StoreResult<WebhookSubscription> {
    let env: String = row.get(1)?;
    let types: String = row.get(4)?;
    let headers: String = row.get(6)?;
    let previous = match (
        row.get::<Option<Vec<u8>>>(9)?,
        row.get::<Option<Vec<u8>>>(10)?,
    ) {
        (Some(nonce), Some(sealed)) => Some(SealedSecret { nonce, sealed }),
        _ => None,
    };
    Ok(WebhookSubscription {
        id: row.get(0)?,
        env_id: EnvironmentId::parse(&env).map_err(|e| corrupt("webhook env", e))?,
        topic: row.get(2)?,
        url: row.get(3)?,
        event_types: serde_json::from_str(&types).map_err(|e| corrupt("event types", e))?,
        enabled: row.get(5)?,
        headers: serde_json::from_str(&headers).map_err(|e| corrupt("webhook headers", e))?,
        secret: SealedSecret {
            nonce: row.get(7)?,
            sealed: row.get(8)?,
        },
        previous_secret: previous,
        previous_until: row.get::<Option<i64>>(11)?.map(Millis),
        cursor: row.get(12)?,
        attempts: row.get::<i64>(13)? as u32,
        next_attempt_at: row.millis(14)?,
        last_error: row.get(15)?,
        created_at: row.millis(16)?,
        updated_at: row.millis(17)?,
        lease_epoch: row.get(18)?,
        channel: row
            .get::<Option<String>>(19)?
            .map(|c| serde_json::from_str(&c).map_err(|e| corrupt("webhook channel", e)))
            .transpose()?,
    })
}

/// Why a delivery result under the claim (`owner`, `epoch`) wrote nothing, from the lease as it
/// stands (`lease_owner`, `lease_epoch`): `Fenced` when the claim is stale, `Ok(false)` when it
/// holds (the cursor moved).
pub(crate) fn stale_claim(
    id: &str,
    owner: &str,
    epoch: i64,
    lease_owner: Option<&str>,
    lease_epoch: i64,
) -> StoreResult<bool> {
    if lease_owner == Some(owner) && lease_epoch == epoch {
        return Ok(false);
    }
    Err(StoreError::Fenced {
        what: format!("the webhook claim on {id}"),
        held: epoch,
        current: lease_epoch,
    })
}

/// One row of [`LETTER_COLUMNS`].
pub(crate) fn dead_letter(row: &impl Columns) -> StoreResult<DeadLetter> {
    let env: String = row.get(2)?;
    Ok(DeadLetter {
        id: row.get(0)?,
        subscription_id: row.get(1)?,
        env_id: EnvironmentId::parse(&env).map_err(|e| corrupt("dead letter env", e))?,
        event_seq: row.get(3)?,
        event_type: row.get(4)?,
        body: row.get(5)?,
        attempts: row.get::<i64>(6)? as u32,
        last_error: row.get(7)?,
        created_at: row.millis(8)?,
        redelivery: Redelivery::parse(&row.get::<String>(9)?)
            .ok_or_else(|| corrupt("redelivery", "an unknown state"))?,
        redelivered_at: row.get::<Option<i64>>(10)?.map(Millis),
    })
}

/// One row of a backlog count: the subscription's id, its environment, and the events after
/// its cursor (never negative).
pub(crate) fn backlog(row: &impl Columns) -> StoreResult<WebhookBacklog> {
    let env: String = row.get(1)?;
    Ok(WebhookBacklog {
        subscription_id: row.get(0)?,
        env_id: EnvironmentId::parse(&env).map_err(|e| corrupt("webhook env", e))?,
        events: row.get::<i64>(2)?.max(0) as u64,
    })
}

/// A subscription created, updated or deleted (`kind`): its view after, never its secrets.
pub(crate) fn subscription_changed(kind: AuditKind, s: &WebhookSubscription) -> AuditEntry {
    AuditEntry::new(kind, s.env_id.as_str(), &s.id).after(s.audit_view())
}

/// A delivery that gave up on an event and wrote `letter`.
pub(crate) fn dead_lettered(letter: &DeadLetter) -> AuditEntry {
    AuditEntry::new(
        AuditKind::WebhookDeadLettered,
        letter.env_id.as_str(),
        &letter.subscription_id,
    )
    .after(
        json!({"deadLetterId": letter.id, "eventSeq": letter.event_seq,
                  "attempts": letter.attempts}),
    )
}

/// An operator asked for `letter` to be delivered again, at `now`.
pub(crate) fn redelivery_requested(
    env: &EnvironmentId,
    letter: &DeadLetter,
    now: Millis,
) -> AuditEntry {
    AuditEntry::new(
        AuditKind::WebhookRedeliveryRequested,
        env.as_str(),
        &letter.subscription_id,
    )
    .after(
        json!({"deadLetterId": letter.id, "eventSeq": letter.event_seq,
                  "requestedAt": now.0}),
    )
}

/// A redelivery of `letter` attempted: delivered, or failed with its error (the letter is dead
/// again).
pub(crate) fn redelivered(letter: &DeadLetter, result: &Result<(), String>) -> AuditEntry {
    let (kind, after) = match result {
        Ok(()) => (
            AuditKind::WebhookRedelivered,
            json!({"deadLetterId": letter.id, "eventSeq": letter.event_seq}),
        ),
        Err(error) => (
            AuditKind::WebhookRedeliveryFailed,
            json!({"deadLetterId": letter.id, "eventSeq": letter.event_seq, "error": error}),
        ),
    };
    AuditEntry::new(kind, letter.env_id.as_str(), &letter.subscription_id).after(after)
}
