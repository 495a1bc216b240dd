//! Audit events: queued by the transaction that makes the change, chained at its commit.
//!
//! [`append`] only queues the event on the transaction. At commit (`conn::finish`), behind the
//! write lock, the head of the chain is read ([`head`]) and [`chain`] inserts every queued event
//! after it in one statement. The chain stays one line under any number of concurrent writers because the
//! lock is held from the head read to the commit: nobody appends between the two. The primary
//! key on `seq` is the second check: a forked append would fail with a duplicate `seq` and
//! commit nothing, rather than start a second chain.

use super::conn::{in_transaction, Mode};
use super::conn::{PendingAudit, Tx};
use super::rows::col;
use super::PostgresStore;
use crate::audit::{event_hash, GENESIS_HASH};
use crate::error::StoreResult;
use crate::records::{Actor, AuditEvent};
use crate::store::AuditLog;
use async_trait::async_trait;
use serde_json::Value;

pub(crate) struct Entry<'a> {
    pub env: Option<&'a str>,
    pub kind: &'a str,
    pub subject: &'a str,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// Queues `entry` for the chain: it is appended when the transaction commits, or not at all.
pub(crate) async fn append(tx: &Tx<'_>, actor: &Actor, entry: Entry<'_>) -> StoreResult<()> {
    tx.audit(PendingAudit {
        at: actor.now.0,
        env_id: entry.env.map(str::to_string),
        actor: actor.key.as_ref().map(|k| k.to_string()),
        kind: entry.kind.to_string(),
        subject: entry.subject.to_string(),
        before: entry.before,
        after: entry.after,
    });
    Ok(())
}

/// The chain's head: the last event's `seq` and hash (`0` and the genesis hash when empty).
pub(crate) async fn head(tx: &Tx<'_>) -> StoreResult<(i64, String)> {
    let last = tx
        .query_first("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1", &[])
        .await?;
    Ok(match last {
        Some(row) => (col::<i64>(&row, 0)?, col::<String>(&row, 1)?),
        None => (0, GENESIS_HASH.to_string()),
    })
}

/// Appends `pending` after `head`. The caller holds the write lock and read `head` behind it.
pub(crate) async fn chain(
    tx: &Tx<'_>,
    head: (i64, String),
    pending: Vec<PendingAudit>,
) -> StoreResult<()> {
    let (mut seq, mut prev_hash) = head;
    let n = pending.len();
    let (mut seqs, mut ats, mut envs, mut actors) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut kinds, mut subjects, mut befores, mut afters, mut prevs, mut hashes) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for p in pending {
        seq += 1;
        let mut event = AuditEvent {
            seq,
            at: p.at,
            env_id: p.env_id,
            actor: p.actor,
            kind: p.kind,
            subject: p.subject,
            before: p.before,
            after: p.after,
            prev_hash: prev_hash.clone(),
            hash: String::new(),
        };
        event.hash = event_hash(&event);
        prev_hash = event.hash.clone();
        seqs.push(event.seq);
        ats.push(event.at);
        envs.push(event.env_id);
        actors.push(event.actor);
        kinds.push(event.kind);
        subjects.push(event.subject);
        befores.push(event.before.as_ref().map(Value::to_string));
        afters.push(event.after.as_ref().map(Value::to_string));
        prevs.push(event.prev_hash);
        hashes.push(event.hash);
    }
    tx.execute(
        "INSERT INTO audit (seq, at, env_id, actor, kind, subject, before, after, prev_hash, hash)
         SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                              $6::text[], $7::text[], $8::text[], $9::text[], $10::text[])",
        &[
            &seqs, &ats, &envs, &actors, &kinds, &subjects, &befores, &afters, &prevs, &hashes,
        ],
    )
    .await?;
    Ok(())
}

#[async_trait]
impl AuditLog for PostgresStore {
    async fn audit_events(&self, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT {} FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2",
                super::rows::AUDIT_COLUMNS
            );
            tx.all(&sql, &[&after, &i64::from(limit)], super::rows::audit_event)
                .await
        })
    }
}
