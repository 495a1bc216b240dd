//! Appends audit events inside the caller's transaction, extending the hash chain.

use super::conn::{unavailable, CachedQuery};
use super::rows::{self, query_all};
use super::SqliteStore;
use crate::audit::{event_hash, GENESIS_HASH};
use crate::error::StoreResult;
use crate::records::{Actor, AuditEvent};
use crate::store::AuditLog;
use async_trait::async_trait;
use rusqlite::{params, OptionalExtension, Transaction};
use serde_json::Value;

pub(crate) struct Entry<'a> {
    pub env: Option<&'a str>,
    pub kind: &'a str,
    pub subject: &'a str,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

pub(crate) fn append(tx: &Transaction<'_>, actor: &Actor, entry: Entry<'_>) -> StoreResult<()> {
    let last: Option<(i64, String)> = tx
        .query_row_cached(
            "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(unavailable)?;
    let (prev_seq, prev_hash) = last.unwrap_or((0, GENESIS_HASH.to_string()));
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
    super::conn::execute_cached(
        tx,
        "INSERT INTO audit (seq, at, env_id, actor, kind, subject, before, after, prev_hash, hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            event.seq,
            event.at,
            event.env_id,
            event.actor,
            event.kind,
            event.subject,
            event.before.as_ref().map(Value::to_string),
            event.after.as_ref().map(Value::to_string),
            event.prev_hash,
            event.hash
        ],
    )
    .map_err(unavailable)?;
    Ok(())
}

#[async_trait]
impl AuditLog for SqliteStore {
    async fn audit_events(&self, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
        self.read(move |conn| {
            query_all(
                conn,
                "SELECT seq, at, env_id, actor, kind, subject, before, after, prev_hash, hash FROM audit WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                &[&after, &limit],
                rows::audit_event,
            )
        })
        .await
    }
}
