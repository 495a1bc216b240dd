//! Appends audit events inside the caller's transaction, extending the hash chain.
//!
//! The chain stays one line under any number of concurrent writers because every write
//! transaction holds the write lock (see `conn`) from its first statement to its commit: the
//! head read here is the head, and nobody appends between this read and the commit. The primary
//! key on `seq` is the second check: a forked append would fail with a duplicate `seq` and
//! commit nothing, rather than start a second chain.

use super::conn::Tx;
use super::rows::col;
use crate::audit::{event_hash, GENESIS_HASH};
use crate::error::StoreResult;
use crate::records::{Actor, AuditEvent};
use serde_json::Value;

pub(crate) struct Entry<'a> {
    pub env: Option<&'a str>,
    pub kind: &'a str,
    pub subject: &'a str,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

pub(crate) async fn append(tx: &Tx<'_>, actor: &Actor, entry: Entry<'_>) -> StoreResult<()> {
    let last = tx
        .query_first("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1", &[])
        .await?;
    let (prev_seq, prev_hash) = match last {
        Some(row) => (col::<i64>(&row, 0)?, col::<String>(&row, 1)?),
        None => (0, GENESIS_HASH.to_string()),
    };
    let mut event = AuditEvent {
        seq: prev_seq + 1,
        at: actor.now.0,
        env_id: entry.env.map(str::to_string),
        actor: actor.key.as_ref().map(|k| k.to_string()),
        kind: entry.kind.to_string(),
        subject: entry.subject.to_string(),
        before: entry.before,
        after: entry.after,
        prev_hash,
        hash: String::new(),
    };
    event.hash = event_hash(&event);
    tx.execute(
        "INSERT INTO audit (seq, at, env_id, actor, kind, subject, before, after, prev_hash, hash)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        &[
            &event.seq,
            &event.at,
            &event.env_id,
            &event.actor,
            &event.kind,
            &event.subject,
            &event.before.as_ref().map(Value::to_string),
            &event.after.as_ref().map(Value::to_string),
            &event.prev_hash,
            &event.hash,
        ],
    )
    .await?;
    Ok(())
}

/// Audit events with `seq > after`, oldest first.
pub(crate) async fn events(tx: &Tx<'_>, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
    let sql = format!(
        "SELECT {} FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2",
        super::rows::AUDIT_COLUMNS
    );
    tx.all(&sql, &[&after, &i64::from(limit)], super::rows::audit_event)
        .await
}
