//! Webhook subscriptions, delivery cursors and dead letters on PostgreSQL
//! (`store/webhooks.rs`). Claims take the due rows `FOR UPDATE SKIP LOCKED`, so replicas
//! claiming at once split the work instead of waiting on each other; the lease keeps a claimed
//! row away from other replicas while its attempt runs.

use super::audit_log::{append, AuditKind};
use super::conn::{in_transaction, Mode, Tx};
use super::rows::col;
use super::PostgresStore;
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
use serde_json::json;
use steward_core::{EnvironmentId, Millis};

/// The subscriptions and the dead-letter list (issue #15 item 4). `IF NOT EXISTS`: the
/// migration tests roll a database back by forgetting migrations, not by dropping every table
/// a later one made, so this one must apply again over its own tables.
pub(crate) const WEBHOOKS: &str = r#"
CREATE TABLE IF NOT EXISTS webhook_subscriptions (
    id TEXT COLLATE "C" PRIMARY KEY,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    topic TEXT COLLATE "C" NOT NULL,
    url TEXT NOT NULL,
    event_types TEXT NOT NULL,
    enabled BOOLEAN NOT NULL,
    headers TEXT NOT NULL,
    secret_nonce BYTEA NOT NULL,
    secret BYTEA NOT NULL,
    previous_nonce BYTEA,
    previous_secret BYTEA,
    previous_until BIGINT,
    cursor BIGINT NOT NULL,
    attempts BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    last_error TEXT,
    lease_owner TEXT COLLATE "C",
    lease_until BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_subscriptions_env ON webhook_subscriptions(env_id, created_at);
CREATE INDEX IF NOT EXISTS webhook_subscriptions_due ON webhook_subscriptions(next_attempt_at) WHERE enabled;
CREATE TABLE IF NOT EXISTS webhook_dead_letters (
    id TEXT COLLATE "C" PRIMARY KEY,
    subscription_id TEXT COLLATE "C" NOT NULL,
    env_id TEXT COLLATE "C" NOT NULL REFERENCES environments(id),
    event_seq BIGINT NOT NULL,
    event_type TEXT NOT NULL,
    body TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    last_error TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_dead_letters_env ON webhook_dead_letters(env_id, created_at);
"#;

/// Redelivery of dead letters (issue #30 item 4): where each letter's redelivery stands; letters
/// from before are `dead`.
pub(crate) const REDELIVERY: &str = r#"
ALTER TABLE webhook_dead_letters ADD COLUMN IF NOT EXISTS redelivery TEXT NOT NULL DEFAULT 'dead';
ALTER TABLE webhook_dead_letters ADD COLUMN IF NOT EXISTS redelivered_at BIGINT;
CREATE INDEX IF NOT EXISTS webhook_dead_letters_requested
    ON webhook_dead_letters(subscription_id, created_at) WHERE redelivery = 'requested';
CREATE INDEX IF NOT EXISTS webhook_dead_letters_subscription
    ON webhook_dead_letters(subscription_id, created_at);
"#;

async fn one(tx: &Tx<'_>, env: &str, id: &str) -> StoreResult<Option<WebhookSubscription>> {
    tx.one(
        &format!("SELECT {COLUMNS} FROM webhook_subscriptions WHERE env_id = $1 AND id = $2"),
        &[&env, &id],
        subscription,
    )
    .await
}

#[async_trait]
impl Webhooks for PostgresStore {
    async fn create_subscription(&self, s: &WebhookSubscription, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            let types = json!(s.event_types).to_string();
            let headers = s.headers.to_string();
            let (pn, ps) = (
                s.previous_secret.as_ref().map(|p| p.nonce.clone()),
                s.previous_secret.as_ref().map(|p| p.sealed.clone()),
            );
            let pu = s.previous_until.map(|m| m.0);
            let attempts = s.attempts as i64;
            let channel = s.channel.as_ref().map(|c| c.to_string());
            tx.execute_unique(
                "webhook subscription",
                "INSERT INTO webhook_subscriptions (id, env_id, topic, url, event_types, enabled,
                    headers, secret_nonce, secret, previous_nonce, previous_secret, previous_until,
                    cursor, attempts, next_attempt_at, last_error, created_at, updated_at, channel)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)",
                &[
                    &s.id,
                    &s.env_id.as_str(),
                    &s.topic,
                    &s.url,
                    &types,
                    &s.enabled,
                    &headers,
                    &s.secret.nonce,
                    &s.secret.sealed,
                    &pn,
                    &ps,
                    &pu,
                    &s.cursor,
                    &attempts,
                    &s.next_attempt_at.0,
                    &s.last_error,
                    &s.created_at.0,
                    &s.updated_at.0,
                    &channel,
                ],
            )
            .await?;
            append(
                &tx,
                actor,
                subscription_changed(AuditKind::WebhookSubscriptionCreated, s),
            )
            .await
        })
    }

    async fn subscriptions(
        &self,
        env: &EnvironmentId,
        topic: Option<&str>,
    ) -> StoreResult<Vec<WebhookSubscription>> {
        in_transaction!(self, Mode::Read, |tx| async {
            tx.all(
                &format!(
                    "SELECT {COLUMNS} FROM webhook_subscriptions
                     WHERE env_id = $1 AND ($2::text IS NULL OR topic = $2) ORDER BY created_at, id"
                ),
                &[&env.as_str(), &topic],
                subscription,
            )
            .await
        })
    }

    async fn subscription(
        &self,
        env: &EnvironmentId,
        id: &str,
    ) -> StoreResult<Option<WebhookSubscription>> {
        in_transaction!(self, Mode::Read, |tx| one(&tx, env.as_str(), id))
    }

    async fn update_subscription(
        &self,
        s: &WebhookSubscription,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| async {
            let types = json!(s.event_types).to_string();
            let headers = s.headers.to_string();
            let (pn, ps) = (
                s.previous_secret.as_ref().map(|p| p.nonce.clone()),
                s.previous_secret.as_ref().map(|p| p.sealed.clone()),
            );
            let pu = s.previous_until.map(|m| m.0);
            let changed = tx
                .execute(
                    "UPDATE webhook_subscriptions SET url = $3, event_types = $4, enabled = $5,
                        headers = $6, secret_nonce = $7, secret = $8, previous_nonce = $9,
                        previous_secret = $10, previous_until = $11, updated_at = $12
                     WHERE env_id = $1 AND id = $2",
                    &[
                        &s.env_id.as_str(),
                        &s.id,
                        &s.url,
                        &types,
                        &s.enabled,
                        &headers,
                        &s.secret.nonce,
                        &s.secret.sealed,
                        &pn,
                        &ps,
                        &pu,
                        &s.updated_at.0,
                    ],
                )
                .await?;
            if changed == 0 {
                return Ok(false);
            }
            append(
                &tx,
                actor,
                subscription_changed(AuditKind::WebhookSubscriptionUpdated, s),
            )
            .await?;
            Ok(true)
        })
    }

    async fn delete_subscription(
        &self,
        env: &EnvironmentId,
        id: &str,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| async {
            let Some(s) = one(&tx, env.as_str(), id).await? else {
                return Ok(false);
            };
            tx.execute(
                "DELETE FROM webhook_subscriptions WHERE env_id = $1 AND id = $2",
                &[&env.as_str(), &id],
            )
            .await?;
            append(
                &tx,
                actor,
                subscription_changed(AuditKind::WebhookSubscriptionDeleted, &s),
            )
            .await?;
            Ok(true)
        })
    }

    async fn claim_subscriptions(
        &self,
        owner: &str,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<WebhookSubscription>> {
        let limit = limit as i64;
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            tx.all(
                &format!(
                    "UPDATE webhook_subscriptions SET lease_owner = $2, lease_until = $3,
                         lease_epoch = lease_epoch + 1
                     WHERE id IN (
                         SELECT s.id FROM webhook_subscriptions s
                         WHERE s.enabled AND (s.lease_owner IS NULL OR s.lease_until < $1)
                           AND (s.next_attempt_at <= $1 OR {REDELIVERY_WAITING})
                         ORDER BY s.next_attempt_at, s.id LIMIT $4
                         FOR UPDATE SKIP LOCKED)
                     RETURNING {COLUMNS}"
                ),
                &[&now.0, &owner, &lease_until.0, &limit],
                subscription,
            )
            .await
        })
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
        let (lease_owner, lease_until) = match keep_until {
            Some(until) => (Some(owner), until.0),
            None => (None, 0),
        };
        let (cursor, attempts, next, error) = match outcome {
            DeliveryOutcome::Advance { cursor } => (*cursor, 0i64, now, None),
            DeliveryOutcome::Retry {
                attempts,
                next_attempt_at,
                error,
            } => (
                from,
                *attempts as i64,
                *next_attempt_at,
                Some(error.clone()),
            ),
            DeliveryOutcome::DeadLetter { letter } => {
                (letter.event_seq, 0, now, Some(letter.last_error.clone()))
            }
        };
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            let changed = tx
                .execute(
                    "UPDATE webhook_subscriptions SET cursor = $1, attempts = $2,
                        next_attempt_at = $3, last_error = $4, lease_owner = $8, lease_until = $9
                     WHERE id = $5 AND lease_owner = $6 AND lease_epoch = $10 AND cursor = $7",
                    &[
                        &cursor,
                        &attempts,
                        &next.0,
                        &error,
                        &id,
                        &owner,
                        &from,
                        &lease_owner,
                        &lease_until,
                        &epoch,
                    ],
                )
                .await?;
            if changed == 0 {
                let Some(lease) = tx
                    .query_first(
                        "SELECT lease_owner, lease_epoch FROM webhook_subscriptions WHERE id = $1",
                        &[&id],
                    )
                    .await?
                else {
                    return Ok(false);
                };
                let lease_owner: Option<&str> = col(&lease, 0)?;
                return stale_claim(id, owner, epoch, lease_owner, col(&lease, 1)?);
            }
            if let DeliveryOutcome::DeadLetter { letter } = outcome {
                let letter_attempts = letter.attempts as i64;
                tx.execute_unique(
                    "dead letter",
                    "INSERT INTO webhook_dead_letters (id, subscription_id, env_id, event_seq,
                        event_type, body, attempts, last_error, created_at, redelivery)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'dead')",
                    &[
                        &letter.id,
                        &letter.subscription_id,
                        &letter.env_id.as_str(),
                        &letter.event_seq,
                        &letter.event_type,
                        &letter.body,
                        &letter_attempts,
                        &letter.last_error,
                        &letter.created_at.0,
                    ],
                )
                .await?;
                append(&tx, &Actor::system(now), dead_lettered(letter)).await?;
            }
            Ok(true)
        })
    }

    async fn release_dead_webhook_leases(&self, sweep: &Sweep) -> StoreResult<u64> {
        let (replica, dead_before) = (sweep.replica.as_str(), sweep.dead_before.0);
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            tx.execute(
                &format!(
                    "UPDATE webhook_subscriptions SET lease_owner = NULL, lease_until = 0
                     WHERE lease_owner IS NOT NULL AND lease_owner <> $1
                       AND lease_owner <> ALL (ARRAY(SELECT r.id FROM replicas r WHERE {}))",
                    super::replicas::ALIVE
                ),
                &[&replica, &dead_before],
            )
            .await
        })
    }

    async fn dead_letters(&self, env: &EnvironmentId, limit: u32) -> StoreResult<Vec<DeadLetter>> {
        let limit = limit as i64;
        in_transaction!(self, Mode::Read, |tx| async {
            tx.all(
                &format!(
                    "SELECT {LETTER_COLUMNS} FROM webhook_dead_letters
                     WHERE env_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2"
                ),
                &[&env.as_str(), &limit],
                dead_letter,
            )
            .await
        })
    }

    async fn dead_letter(&self, env: &EnvironmentId, id: &str) -> StoreResult<Option<DeadLetter>> {
        in_transaction!(self, Mode::Read, |tx| async {
            tx.one(
                &format!(
                    "SELECT {LETTER_COLUMNS} FROM webhook_dead_letters WHERE env_id = $1 AND id = $2"
                ),
                &[&env.as_str(), &id],
                dead_letter,
            )
            .await
        })
    }

    async fn request_redelivery(
        &self,
        env: &EnvironmentId,
        target: RedeliveryTarget<'_>,
        actor: &Actor,
        now: Millis,
    ) -> StoreResult<Vec<DeadLetter>> {
        let (letter, subscription) = match target {
            RedeliveryTarget::Letter(id) => (Some(id), None),
            RedeliveryTarget::Subscription(id) => (None, Some(id)),
        };
        in_transaction!(self, Mode::Write, |tx| async {
            let marked = tx
                .all(
                    &format!(
                        "UPDATE webhook_dead_letters SET redelivery = 'requested'
                         WHERE env_id = $1 AND redelivery <> 'requested'
                           AND ($2::TEXT IS NULL OR id = $2) AND ($3::TEXT IS NULL OR subscription_id = $3)
                           AND subscription_id IN (SELECT id FROM webhook_subscriptions WHERE env_id = $1)
                         RETURNING {LETTER_COLUMNS}"
                    ),
                    &[&env.as_str(), &letter, &subscription],
                    dead_letter,
                )
                .await?;
            for d in &marked {
                append(&tx, actor, redelivery_requested(env, d, now)).await?;
            }
            Ok(marked)
        })
    }

    async fn requested_redeliveries(
        &self,
        subscription: &str,
        limit: u32,
    ) -> StoreResult<Vec<DeadLetter>> {
        let limit = limit as i64;
        in_transaction!(self, Mode::Read, |tx| async {
            tx.all(
                &format!(
                    "SELECT {LETTER_COLUMNS} FROM webhook_dead_letters
                     WHERE subscription_id = $1 AND redelivery = 'requested'
                     ORDER BY created_at, id LIMIT $2"
                ),
                &[&subscription, &limit],
                dead_letter,
            )
            .await
        })
    }

    async fn record_redelivery(
        &self,
        letter: &str,
        owner: &str,
        result: Result<(), String>,
        now: Millis,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            let held = format!(
                "d.id = $1 AND d.redelivery = 'requested'
                 AND EXISTS (SELECT 1 FROM webhook_subscriptions s
                             WHERE s.id = d.subscription_id AND s.lease_owner = $2)
                 RETURNING {LETTER_COLUMNS}"
            );
            let changed = match &result {
                Ok(()) => {
                    tx.one(
                        &format!(
                            "UPDATE webhook_dead_letters d
                             SET redelivery = 'redelivered', redelivered_at = $3 WHERE {held}"
                        ),
                        &[&letter, &owner, &now.0],
                        dead_letter,
                    )
                    .await?
                }
                Err(error) => {
                    tx.one(
                        &format!(
                            "UPDATE webhook_dead_letters d SET redelivery = 'dead',
                                 attempts = attempts + 1, last_error = $3 WHERE {held}"
                        ),
                        &[&letter, &owner, error],
                        dead_letter,
                    )
                    .await?
                }
            };
            let Some(d) = changed else {
                return Ok(false);
            };
            append(&tx, &Actor::system(now), redelivered(&d, &result)).await?;
            Ok(true)
        })
    }

    async fn webhook_backlog(
        &self,
        env: Option<&EnvironmentId>,
    ) -> StoreResult<Vec<WebhookBacklog>> {
        let env = env.map(|e| e.as_str());
        in_transaction!(self, Mode::Read, |tx| async {
            tx.all(
                "SELECT s.id, s.env_id,
                        (SELECT COUNT(*) FROM (SELECT a.env_id FROM audit a
                                               WHERE a.seq > s.cursor ORDER BY a.seq LIMIT $2) n
                         WHERE n.env_id = s.env_id)
                 FROM webhook_subscriptions s
                 WHERE $1::TEXT IS NULL OR s.env_id = $1 ORDER BY s.created_at, s.id",
                &[&env, &WEBHOOK_BACKLOG_SCAN_EVENTS_MAX],
                backlog,
            )
            .await
        })
    }
}
