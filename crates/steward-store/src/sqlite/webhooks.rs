//! Webhook subscriptions, delivery cursors and dead letters on SQLite (`store/webhooks.rs`).

use super::audit_log::{append, AuditKind};
use super::conn::{constraint, execute_cached, unavailable};
use super::rows::query_all;
use super::SqliteStore;
use crate::error::StoreResult;
use crate::records::Actor;
use crate::records::Sweep;
use crate::store::{
    DeadLetter, DeliveryOutcome, RedeliveryTarget, WebhookBacklog, WebhookSubscription, Webhooks,
    WEBHOOK_BACKLOG_SCAN_EVENTS_MAX,
};
use crate::webhooks::{
    backlog, dead_letter, dead_lettered, redelivered, redelivery_requested, stale_claim,
    subscription, subscription_changed, COLUMNS, LETTER_COLUMNS, REDELIVERY_WAITING,
};
use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};
use serde_json::json;
use steward_core::{EnvironmentId, Millis};

/// The subscriptions and the dead-letter list (issue #15 item 4).
pub const WEBHOOK_SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS webhook_subscriptions (
    id TEXT PRIMARY KEY,
    env_id TEXT NOT NULL REFERENCES environments(id),
    topic TEXT NOT NULL,
    url TEXT NOT NULL,
    event_types TEXT NOT NULL,
    enabled INTEGER NOT NULL,
    headers TEXT NOT NULL,
    secret_nonce BLOB NOT NULL,
    secret BLOB NOT NULL,
    previous_nonce BLOB,
    previous_secret BLOB,
    previous_until INTEGER,
    cursor INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    last_error TEXT,
    lease_owner TEXT,
    lease_until INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_subscriptions_env ON webhook_subscriptions(env_id, created_at);
CREATE INDEX IF NOT EXISTS webhook_subscriptions_due ON webhook_subscriptions(next_attempt_at) WHERE enabled = 1;
CREATE TABLE IF NOT EXISTS webhook_dead_letters (
    id TEXT PRIMARY KEY,
    subscription_id TEXT NOT NULL,
    env_id TEXT NOT NULL REFERENCES environments(id),
    event_seq INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    body TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    last_error TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    redelivery TEXT NOT NULL DEFAULT 'dead',
    redelivered_at INTEGER
);
CREATE INDEX IF NOT EXISTS webhook_dead_letters_env ON webhook_dead_letters(env_id, created_at);
"#;

/// `(table, column, type)`: redelivery of dead letters (issue #30 item 4), added when missing so
/// a store made by an earlier Steward opens; its letters are `dead`.
pub const WEBHOOK_COLUMNS: &[(&str, &str, &str)] = &[
    (
        "webhook_dead_letters",
        "redelivery",
        "TEXT NOT NULL DEFAULT 'dead'",
    ),
    ("webhook_dead_letters", "redelivered_at", "INTEGER"),
    // Approval channels (issue #29 item 2): `NULL` is a signed webhook.
    ("webhook_subscriptions", "channel", "TEXT"),
];

/// Indexes over [`WEBHOOK_COLUMNS`], made once the columns exist.
pub const WEBHOOK_INDEXES: &str = r#"
CREATE INDEX IF NOT EXISTS webhook_dead_letters_requested
    ON webhook_dead_letters(subscription_id, created_at) WHERE redelivery = 'requested';
CREATE INDEX IF NOT EXISTS webhook_dead_letters_subscription
    ON webhook_dead_letters(subscription_id, created_at);
"#;

fn one(tx: &rusqlite::Connection, env: &str, id: &str) -> StoreResult<Option<WebhookSubscription>> {
    Ok(query_all(
        tx,
        &format!("SELECT {COLUMNS} FROM webhook_subscriptions WHERE env_id = ?1 AND id = ?2"),
        &[&env, &id],
        |row| subscription(row),
    )?
    .pop())
}

#[async_trait]
impl Webhooks for SqliteStore {
    async fn create_subscription(&self, s: &WebhookSubscription, actor: &Actor) -> StoreResult<()> {
        let (s, actor) = (s.clone(), actor.clone());
        self.write(move |tx| {
            tx.execute(
                "INSERT INTO webhook_subscriptions (id, env_id, topic, url, event_types, enabled,
                    headers, secret_nonce, secret, previous_nonce, previous_secret, previous_until,
                    cursor, attempts, next_attempt_at, last_error, created_at, updated_at, channel)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
                params![
                    s.id,
                    s.env_id.as_str(),
                    s.topic,
                    s.url,
                    json!(s.event_types).to_string(),
                    s.enabled,
                    s.headers.to_string(),
                    s.secret.nonce,
                    s.secret.sealed,
                    s.previous_secret.as_ref().map(|p| p.nonce.clone()),
                    s.previous_secret.as_ref().map(|p| p.sealed.clone()),
                    s.previous_until.map(|m| m.0),
                    s.cursor,
                    s.attempts,
                    s.next_attempt_at.0,
                    s.last_error,
                    s.created_at.0,
                    s.updated_at.0,
                    s.channel.as_ref().map(|c| c.to_string()),
                ],
            )
            .map_err(|e| constraint(e, "webhook subscription"))?;
            append(tx, &actor, subscription_changed(AuditKind::WebhookSubscriptionCreated, &s))
        })
        .await
    }

    async fn subscriptions(
        &self,
        env: &EnvironmentId,
        topic: Option<&str>,
    ) -> StoreResult<Vec<WebhookSubscription>> {
        let (env, topic) = (env.to_string(), topic.map(str::to_string));
        self.read(move |c| {
            query_all(
                c,
                &format!(
                    "SELECT {COLUMNS} FROM webhook_subscriptions
                     WHERE env_id = ?1 AND (?2 IS NULL OR topic = ?2) ORDER BY created_at, id"
                ),
                &[&env, &topic],
                |row| subscription(row),
            )
        })
        .await
    }

    async fn subscription(
        &self,
        env: &EnvironmentId,
        id: &str,
    ) -> StoreResult<Option<WebhookSubscription>> {
        let (env, id) = (env.to_string(), id.to_string());
        self.read(move |c| one(c, &env, &id)).await
    }

    async fn update_subscription(
        &self,
        s: &WebhookSubscription,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (s, actor) = (s.clone(), actor.clone());
        self.write(move |tx| {
            let changed = tx
                .execute(
                    "UPDATE webhook_subscriptions SET url = ?3, event_types = ?4, enabled = ?5,
                        headers = ?6, secret_nonce = ?7, secret = ?8, previous_nonce = ?9,
                        previous_secret = ?10, previous_until = ?11, updated_at = ?12
                     WHERE env_id = ?1 AND id = ?2",
                    params![
                        s.env_id.as_str(),
                        s.id,
                        s.url,
                        json!(s.event_types).to_string(),
                        s.enabled,
                        s.headers.to_string(),
                        s.secret.nonce,
                        s.secret.sealed,
                        s.previous_secret.as_ref().map(|p| p.nonce.clone()),
                        s.previous_secret.as_ref().map(|p| p.sealed.clone()),
                        s.previous_until.map(|m| m.0),
                        s.updated_at.0,
                    ],
                )
                .map_err(unavailable)?;
            if changed == 0 {
                return Ok(false);
            }
            append(
                tx,
                &actor,
                subscription_changed(AuditKind::WebhookSubscriptionUpdated, &s),
            )?;
            Ok(true)
        })
        .await
    }

    async fn delete_subscription(
        &self,
        env: &EnvironmentId,
        id: &str,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, id, actor) = (env.to_string(), id.to_string(), actor.clone());
        self.write(move |tx| {
            let Some(s) = one(tx, &env, &id)? else {
                return Ok(false);
            };
            tx.execute(
                "DELETE FROM webhook_subscriptions WHERE env_id = ?1 AND id = ?2",
                params![env, id],
            )
            .map_err(unavailable)?;
            append(
                tx,
                &actor,
                subscription_changed(AuditKind::WebhookSubscriptionDeleted, &s),
            )?;
            Ok(true)
        })
        .await
    }

    async fn claim_subscriptions(
        &self,
        owner: &str,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<WebhookSubscription>> {
        let owner = owner.to_string();
        // Every replica asks every 250 ms; most of the time nothing is due. Asking a reader
        // first keeps those rounds off the one writer thread.
        let any_due = self
            .read(move |c| {
                c.query_row(
                    &format!(
                        "SELECT EXISTS (SELECT 1 FROM webhook_subscriptions s
                                        WHERE s.enabled = 1 AND s.lease_until < ?1
                                          AND (s.next_attempt_at <= ?1 OR {REDELIVERY_WAITING}))"
                    ),
                    [now.0],
                    |r| r.get::<_, bool>(0),
                )
                .map_err(unavailable)
            })
            .await?;
        if !any_due {
            return Ok(Vec::new());
        }
        self.write(move |tx| {
            let due = query_all(
                tx,
                &format!(
                    "SELECT {COLUMNS} FROM webhook_subscriptions s
                     WHERE s.enabled = 1 AND (s.lease_owner IS NULL OR s.lease_until < ?1)
                       AND (s.next_attempt_at <= ?1 OR {REDELIVERY_WAITING})
                     ORDER BY s.next_attempt_at, s.id LIMIT ?2"
                ),
                &[&now.0, &limit],
                |row| subscription(row),
            )?;
            let mut due = due;
            for s in &mut due {
                execute_cached(
                    tx,
                    "UPDATE webhook_subscriptions SET lease_owner = ?1, lease_until = ?2,
                        lease_epoch = lease_epoch + 1
                     WHERE id = ?3",
                    params![owner, lease_until.0, s.id],
                )
                .map_err(unavailable)?;
                // The claim's token: the epoch this update moved to (under the writer's lock).
                s.lease_epoch += 1;
            }
            Ok(due)
        })
        .await
    }

    async fn record_delivery(
        &self,
        id: &str,
        owner: &str,
        epoch: i64,
        from: i64,
        outcome: &DeliveryOutcome,
        now: Millis,
        keep_until: Option<Millis>,
    ) -> StoreResult<bool> {
        let (id, owner, outcome) = (id.to_string(), owner.to_string(), outcome.clone());
        let (lease_owner, lease_until) = match keep_until {
            Some(until) => (Some(owner.clone()), until.0),
            None => (None, 0),
        };
        self.write(move |tx| {
            let (cursor, attempts, next, error) = match &outcome {
                DeliveryOutcome::Advance { cursor } => (*cursor, 0, now, None),
                DeliveryOutcome::Retry {
                    attempts,
                    next_attempt_at,
                    error,
                } => (from, *attempts, *next_attempt_at, Some(error.clone())),
                DeliveryOutcome::DeadLetter { letter } => {
                    (letter.event_seq, 0, now, Some(letter.last_error.clone()))
                }
            };
            let changed = tx
                .execute(
                    "UPDATE webhook_subscriptions SET cursor = ?1, attempts = ?2,
                        next_attempt_at = ?3, last_error = ?4, lease_owner = ?8, lease_until = ?9
                     WHERE id = ?5 AND lease_owner = ?6 AND lease_epoch = ?10 AND cursor = ?7",
                    params![
                        cursor,
                        attempts,
                        next.0,
                        error,
                        id,
                        owner,
                        from,
                        lease_owner,
                        lease_until,
                        epoch
                    ],
                )
                .map_err(unavailable)?;
            if changed == 0 {
                let lease: Option<(Option<String>, i64)> = tx
                    .query_row(
                        "SELECT lease_owner, lease_epoch FROM webhook_subscriptions WHERE id = ?1",
                        params![id],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()
                    .map_err(unavailable)?;
                let Some((lease_owner, lease_epoch)) = lease else {
                    return Ok(false);
                };
                return stale_claim(&id, &owner, epoch, lease_owner.as_deref(), lease_epoch);
            }
            if let DeliveryOutcome::DeadLetter { letter } = &outcome {
                tx.execute(
                    "INSERT INTO webhook_dead_letters (id, subscription_id, env_id, event_seq,
                        event_type, body, attempts, last_error, created_at, redelivery)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'dead')",
                    params![
                        letter.id,
                        letter.subscription_id,
                        letter.env_id.as_str(),
                        letter.event_seq,
                        letter.event_type,
                        letter.body,
                        letter.attempts,
                        letter.last_error,
                        letter.created_at.0,
                    ],
                )
                .map_err(|e| constraint(e, "dead letter"))?;
                append(tx, &Actor::system(now), dead_lettered(letter))?;
            }
            Ok(true)
        })
        .await
    }

    async fn release_dead_webhook_leases(&self, sweep: &Sweep) -> StoreResult<u64> {
        let (replica, dead_before) = (sweep.replica.to_string(), sweep.dead_before.0);
        self.write(move |tx| {
            let released = tx
                .execute(
                    "UPDATE webhook_subscriptions SET lease_owner = NULL, lease_until = 0
                     WHERE lease_owner IS NOT NULL AND lease_owner <> ?1
                       AND lease_owner NOT IN (SELECT id FROM replicas WHERE heartbeat_at >= ?2)",
                    params![replica, dead_before],
                )
                .map_err(unavailable)?;
            Ok(released as u64)
        })
        .await
    }

    async fn dead_letters(&self, env: &EnvironmentId, limit: u32) -> StoreResult<Vec<DeadLetter>> {
        let env = env.to_string();
        self.read(move |c| {
            query_all(
                c,
                &format!(
                    "SELECT {LETTER_COLUMNS} FROM webhook_dead_letters
                     WHERE env_id = ?1 ORDER BY created_at DESC, id DESC LIMIT ?2"
                ),
                &[&env, &limit],
                |row| dead_letter(row),
            )
        })
        .await
    }

    async fn dead_letter(&self, env: &EnvironmentId, id: &str) -> StoreResult<Option<DeadLetter>> {
        let (env, id) = (env.to_string(), id.to_string());
        self.read(move |c| {
            Ok(query_all(
                c,
                &format!(
                    "SELECT {LETTER_COLUMNS} FROM webhook_dead_letters WHERE env_id = ?1 AND id = ?2"
                ),
                &[&env, &id],
                |row| dead_letter(row),
            )?
            .pop())
        })
        .await
    }

    async fn request_redelivery(
        &self,
        env: &EnvironmentId,
        target: RedeliveryTarget<'_>,
        actor: &Actor,
        now: Millis,
    ) -> StoreResult<Vec<DeadLetter>> {
        let env = env.clone();
        let (letter, subscription) = match target {
            RedeliveryTarget::Letter(id) => (Some(id.to_string()), None),
            RedeliveryTarget::Subscription(id) => (None, Some(id.to_string())),
        };
        let actor = actor.clone();
        self.write(move |tx| {
            let marked = query_all(
                tx,
                &format!(
                    "UPDATE webhook_dead_letters SET redelivery = 'requested'
                     WHERE env_id = ?1 AND redelivery <> 'requested'
                       AND (?2 IS NULL OR id = ?2) AND (?3 IS NULL OR subscription_id = ?3)
                       AND subscription_id IN (SELECT id FROM webhook_subscriptions WHERE env_id = ?1)
                     RETURNING {LETTER_COLUMNS}"
                ),
                &[&env.as_str(), &letter, &subscription],
                |row| dead_letter(row),
            )?;
            for d in &marked {
                append(
                    tx,
                    &actor,
                    redelivery_requested(&env, d, now),
                )?;
            }
            Ok(marked)
        })
        .await
    }

    async fn requested_redeliveries(
        &self,
        subscription: &str,
        limit: u32,
    ) -> StoreResult<Vec<DeadLetter>> {
        let subscription = subscription.to_string();
        self.read(move |c| {
            query_all(
                c,
                &format!(
                    "SELECT {LETTER_COLUMNS} FROM webhook_dead_letters
                     WHERE subscription_id = ?1 AND redelivery = 'requested'
                     ORDER BY created_at, id LIMIT ?2"
                ),
                &[&subscription, &limit],
                |row| dead_letter(row),
            )
        })
        .await
    }

    async fn record_redelivery(
        &self,
        letter: &str,
        owner: &str,
        result: Result<(), String>,
        now: Millis,
    ) -> StoreResult<bool> {
        let (letter, owner) = (letter.to_string(), owner.to_string());
        self.write(move |tx| {
            let held = query_all(
                tx,
                &format!(
                    "SELECT {LETTER_COLUMNS} FROM webhook_dead_letters d
                     WHERE d.id = ?1 AND d.redelivery = 'requested'
                       AND EXISTS (SELECT 1 FROM webhook_subscriptions s
                                   WHERE s.id = d.subscription_id AND s.lease_owner = ?2)"
                ),
                &[&letter, &owner],
                |row| dead_letter(row),
            )?
            .pop();
            let Some(d) = held else {
                return Ok(false);
            };
            match &result {
                Ok(()) => tx.execute(
                    "UPDATE webhook_dead_letters SET redelivery = 'redelivered',
                        redelivered_at = ?2 WHERE id = ?1",
                    params![d.id, now.0],
                ),
                Err(error) => tx.execute(
                    "UPDATE webhook_dead_letters SET redelivery = 'dead',
                        attempts = attempts + 1, last_error = ?2 WHERE id = ?1",
                    params![d.id, error],
                ),
            }
            .map_err(unavailable)?;
            append(tx, &Actor::system(now), redelivered(&d, &result))?;
            Ok(true)
        })
        .await
    }

    async fn webhook_backlog(
        &self,
        env: Option<&EnvironmentId>,
    ) -> StoreResult<Vec<WebhookBacklog>> {
        let env = env.map(|e| e.to_string());
        self.read(move |c| {
            query_all(
                c,
                "SELECT s.id, s.env_id,
                        (SELECT COUNT(*) FROM (SELECT a.env_id FROM audit a
                                               WHERE a.seq > s.cursor ORDER BY a.seq LIMIT ?2)
                         WHERE env_id = s.env_id)
                 FROM webhook_subscriptions s
                 WHERE ?1 IS NULL OR s.env_id = ?1 ORDER BY s.created_at, s.id",
                &[&env, &WEBHOOK_BACKLOG_SCAN_EVENTS_MAX],
                |row| backlog(row),
            )
        })
        .await
    }
}
