//! The audit log on SQLite: events inserted unsealed inside the caller's transaction, and sealed
//! into the chain afterwards by the writer (see `crate::audit` for the scheme).
//!
//! [`append`] inserts the event with its content hash and reads nothing. [`seal`] runs as one
//! job of the writer thread, so seals serialize with every other write (and, through `BEGIN
//! IMMEDIATE`, with other processes' writes to the file): it reads the head, gives the oldest
//! unsealed events their places, and stores the new head, in one transaction.

use super::conn::{execute_cached, unavailable, CachedQuery};
use super::rows::{col, corrupt, json_opt, query_all};
use super::SqliteStore;
use crate::audit::{content_hash, link_hash, AuditHead, AuditSeal, SealOutcome, GENESIS_HASH};
use crate::error::StoreResult;
use crate::records::{Actor, AuditEvent, ChainLink};
use rusqlite::{params, Connection, Row, Transaction};
use serde_json::Value;
use steward_core::{Millis, ReplicaId};

pub(crate) struct Entry<'a> {
    pub env: Option<&'a str>,
    pub kind: &'a str,
    pub subject: &'a str,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// Inserts the event, unsealed, with its own content hash. Reads no other audit row.
pub(crate) fn append(tx: &Transaction<'_>, actor: &Actor, entry: Entry<'_>) -> StoreResult<()> {
    let event = AuditEvent {
        id: 0,
        at: actor.now.0,
        env_id: entry.env.map(str::to_string),
        actor: actor.key.as_ref().map(|k| k.to_string()),
        kind: entry.kind.to_string(),
        subject: entry.subject.to_string(),
        before: entry.before,
        after: entry.after,
        content_hash: None,
        link: None,
    };
    execute_cached(
        tx,
        "INSERT INTO audit (at, env_id, actor, kind, subject, before, after, content_hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            event.at,
            event.env_id,
            event.actor,
            event.kind,
            event.subject,
            event.before.as_ref().map(Value::to_string),
            event.after.as_ref().map(Value::to_string),
            content_hash(&event),
        ],
    )
    .map_err(unavailable)?;
    Ok(())
}

const COLUMNS: &str =
    "id, at, env_id, actor, kind, subject, before, after, content_hash, seq, prev_hash, hash";

fn event(row: &Row<'_>) -> StoreResult<AuditEvent> {
    let seq: Option<i64> = col(row, 9)?;
    Ok(AuditEvent {
        id: col(row, 0)?,
        at: col(row, 1)?,
        env_id: col(row, 2)?,
        actor: col(row, 3)?,
        kind: col(row, 4)?,
        subject: col(row, 5)?,
        before: json_opt(col(row, 6)?, "audit before")?,
        after: json_opt(col(row, 7)?, "audit after")?,
        content_hash: col(row, 8)?,
        // A sealed row missing its hashes was tampered with: verification says so.
        link: match seq {
            Some(seq) => Some(ChainLink {
                seq,
                prev_hash: col::<Option<String>>(row, 10)?.unwrap_or_default(),
                hash: col::<Option<String>>(row, 11)?.unwrap_or_default(),
            }),
            None => None,
        },
    })
}

/// Sealed events with `seq > after`, in chain order.
pub(crate) fn events(c: &Connection, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
    query_all(
        c,
        &format!("SELECT {COLUMNS} FROM audit WHERE seq > ?1 ORDER BY seq LIMIT ?2"),
        &[&after, &limit],
        event,
    )
}

/// Unsealed events with `id > after_id`, in insertion order.
pub(crate) fn unsealed(c: &Connection, after_id: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
    query_all(
        c,
        &format!("SELECT {COLUMNS} FROM audit WHERE seq IS NULL AND id > ?1 ORDER BY id LIMIT ?2"),
        &[&after_id, &limit],
        event,
    )
}

/// The stored head and lease, and whether the lease holder is a registered replica.
fn head_and_holder(c: &Connection) -> StoreResult<(AuditHead, bool)> {
    c.query_row_cached(
        "SELECT h.seq, h.hash, h.sealer, h.lease_until,
                EXISTS (SELECT 1 FROM replicas r WHERE r.id = h.sealer)
         FROM audit_head h WHERE h.id = 1",
        [],
        |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, bool>(4)?,
            ))
        },
    )
    .map_err(unavailable)
    .and_then(|(seq, hash, sealer, lease_until, registered)| {
        let sealer = sealer
            .map(|s| ReplicaId::parse(&s).map_err(|e| corrupt("audit sealer", e)))
            .transpose()?;
        Ok((
            AuditHead {
                seq,
                hash,
                sealer,
                lease_until: Millis(lease_until),
            },
            registered,
        ))
    })
}

pub(crate) fn head(c: &Connection) -> StoreResult<AuditHead> {
    head_and_holder(c).map(|(head, _)| head)
}

/// Seals the oldest unsealed events: a read first, so that an idle store queues no write.
pub(crate) async fn seal(store: &SqliteStore, seal: &AuditSeal) -> StoreResult<SealOutcome> {
    let anything = store
        .read(|c| {
            c.query_row_cached(
                "SELECT EXISTS (SELECT 1 FROM audit WHERE seq IS NULL)",
                [],
                |r| r.get::<_, bool>(0),
            )
            .map_err(unavailable)
        })
        .await?;
    if !anything {
        return Ok(SealOutcome::Idle);
    }
    let seal = seal.clone();
    store.write(move |tx| seal_batch(tx, &seal)).await
}

/// One batch, inside the writer's transaction.
fn seal_batch(tx: &Transaction<'_>, seal: &AuditSeal) -> StoreResult<SealOutcome> {
    let (head, registered) = head_and_holder(tx)?;
    if let Some(holder) = &head.sealer {
        if *holder != seal.sealer && head.lease_until > seal.now && registered {
            return Ok(SealOutcome::Held {
                by: holder.clone(),
                until: head.lease_until,
            });
        }
    }
    let batch = unsealed(tx, 0, seal.events_max)?;
    if batch.is_empty() {
        return Ok(SealOutcome::Idle);
    }
    let (mut seq, mut hash) = (head.seq, head.hash);
    for event in &batch {
        let prev = std::mem::take(&mut hash);
        seq += 1;
        // An unsealed event always has a content hash; one without was tampered with, and
        // sealing it over an empty one keeps that visible to verification.
        hash = link_hash(
            seq,
            &prev,
            event.content_hash.as_deref().unwrap_or_default(),
        );
        let changed = execute_cached(
            tx,
            "UPDATE audit SET seq = ?1, prev_hash = ?2, hash = ?3 WHERE id = ?4 AND seq IS NULL",
            params![seq, prev, hash, event.id],
        )
        .map_err(unavailable)?;
        if changed != 1 {
            return Err(corrupt("audit seal", format!("event {} changed", event.id)));
        }
    }
    execute_cached(
        tx,
        "UPDATE audit_head SET seq = ?1, hash = ?2, sealer = ?3, lease_until = ?4, sealed_at = ?5
         WHERE id = 1",
        params![
            seq,
            hash,
            seal.sealer.as_str(),
            seal.now.plus_ms(seal.lease_ms).0,
            seal.now.0
        ],
    )
    .map_err(unavailable)?;
    Ok(SealOutcome::Sealed {
        events: batch.len() as u32,
        head: (seq, hash),
    })
}

/// Brings a store's audit log to the sealed scheme, inside the caller's transaction at open: a
/// table from before sealing is rebuilt with its events as the sealed prefix (their ids are
/// their sequence numbers, their hashes unchanged), and the head is stored once.
pub(crate) fn migrate(tx: &Transaction<'_>) -> StoreResult<()> {
    if !super::conn::has_column(tx, "audit", "content_hash")? {
        tx.execute_batch(super::schema::SEAL_AUDIT_TABLE)
            .map_err(unavailable)?;
    }
    tx.execute_batch(super::schema::AUDIT_SEAL_SCHEMA)
        .map_err(unavailable)?;
    let last: Option<(i64, String)> = tx
        .query_row(
            "SELECT seq, hash FROM audit WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })
        .map_err(unavailable)?;
    let (seq, hash) = last.unwrap_or((0, GENESIS_HASH.to_string()));
    tx.execute(
        "INSERT OR IGNORE INTO audit_head (id, seq, hash, lease_until) VALUES (1, ?1, ?2, 0)",
        params![seq, hash],
    )
    .map_err(unavailable)?;
    Ok(())
}

#[async_trait::async_trait]
impl crate::store::AuditLog for SqliteStore {
    async fn audit_events(&self, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
        self.read(move |c| events(c, after, limit)).await
    }

    async fn unsealed_audit_events(
        &self,
        after_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<AuditEvent>> {
        self.read(move |c| unsealed(c, after_id, limit)).await
    }

    async fn audit_head(&self) -> StoreResult<AuditHead> {
        self.read(head).await
    }

    async fn seal_audit(&self, audit_seal: &AuditSeal) -> StoreResult<SealOutcome> {
        seal(self, audit_seal).await
    }
}
