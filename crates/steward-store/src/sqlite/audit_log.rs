//! The audit log on SQLite: events inserted unsealed inside the caller's transaction, and sealed
//! into the chain afterwards by the writer (see `crate::audit` for the scheme).
//!
//! [`append`] inserts the event with its content hash and reads nothing. [`seal`] runs as one
//! job of the writer thread, so seals serialize with every other write (and, through `BEGIN
//! IMMEDIATE`, with other processes' writes to the file): it reads the head, gives the oldest
//! unsealed events their places, and stores the new head, in one transaction.

use super::conn::{execute_cached, unavailable, CachedQuery};
use super::rows::{corrupt, query_all};
use super::SqliteStore;
use crate::audit::{
    held_by_another, seal_links, sealing_epoch, stored_event, AuditHead, AuditSeal, NewLink,
    SealOutcome, Unsealed, GENESIS_HASH, UNSEALED_COLUMNS,
};
pub(crate) use crate::audit_entry::{AuditEntry, AuditKind};
use crate::error::StoreResult;
use crate::records::{Actor, AuditEvent};
use rusqlite::{params, Connection, Row, Transaction};
use serde_json::Value;
use steward_core::{Millis, ReplicaId};

/// Inserts the event, unsealed, with its own content hash. Reads no other audit row.
pub(crate) fn append(tx: &Transaction<'_>, actor: &Actor, entry: AuditEntry) -> StoreResult<()> {
    let (event, content_hash) = entry.into_event(actor);
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
            content_hash,
        ],
    )
    .map_err(unavailable)?;
    Ok(())
}

const COLUMNS: &str =
    "id, at, env_id, actor, kind, subject, before, after, content_hash, seq, prev_hash, hash";

/// Sealed events with `seq > after`, in chain order.
fn event(row: &Row<'_>) -> StoreResult<AuditEvent> {
    stored_event(row)
}

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

/// The oldest unsealed events' ids and content hashes, in insertion order: what a seal reads.
fn unsealed_hashes(c: &Connection, limit: u32) -> StoreResult<Vec<Unsealed>> {
    query_all(
        c,
        &format!("SELECT {UNSEALED_COLUMNS} FROM audit WHERE seq IS NULL ORDER BY id LIMIT ?1"),
        &[&limit],
        |r| {
            Ok(Unsealed {
                id: r.get(0).map_err(unavailable)?,
                content_hash: r.get(1).map_err(unavailable)?,
            })
        },
    )
}

/// The stored head and lease, and whether the lease holder is a registered replica.
fn head_and_holder(c: &Connection) -> StoreResult<(AuditHead, bool)> {
    c.query_row_cached(
        "SELECT h.seq, h.hash, h.sealer, h.lease_until,
                EXISTS (SELECT 1 FROM replicas r WHERE r.id = h.sealer), h.sealer_epoch
         FROM audit_head h WHERE h.id = 1",
        [],
        |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, bool>(4)?,
                r.get::<_, i64>(5)?,
            ))
        },
    )
    .map_err(unavailable)
    .and_then(
        |(seq, hash, sealer, lease_until, registered, sealer_epoch)| {
            let sealer = sealer
                .map(|s| ReplicaId::parse(&s).map_err(|e| corrupt("audit sealer", e)))
                .transpose()?;
            Ok((
                AuditHead {
                    seq,
                    hash,
                    sealer,
                    lease_until: Millis(lease_until),
                    sealer_epoch,
                },
                registered,
            ))
        },
    )
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
    if let Some(held) = held_by_another(&head, registered, seal) {
        return Ok(held);
    }
    let epoch = sealing_epoch(&head, seal)?;
    let batch = unsealed_hashes(tx, seal.events_max)?;
    if batch.is_empty() {
        return Ok(SealOutcome::Idle);
    }
    let links = seal_links(&head, &batch);
    for NewLink { id, link } in &links {
        let changed = execute_cached(
            tx,
            "UPDATE audit SET seq = ?1, prev_hash = ?2, hash = ?3 WHERE id = ?4 AND seq IS NULL",
            params![link.seq, link.prev_hash, link.hash, id],
        )
        .map_err(unavailable)?;
        if changed != 1 {
            return Err(corrupt("audit seal", format!("event {id} changed")));
        }
    }
    let last = &links.last().expect("a batch of one event or more").link;
    let (seq, hash) = (last.seq, last.hash.clone());
    // The compare-and-set on the epoch read above (the writer's lock already keeps it).
    let stored = execute_cached(
        tx,
        "UPDATE audit_head SET seq = ?1, hash = ?2, sealer = ?3, lease_until = ?4, sealed_at = ?5,
            sealer_epoch = ?6
         WHERE id = 1 AND sealer_epoch = ?7",
        params![
            seq,
            hash,
            seal.sealer.as_str(),
            seal.now.plus_ms(seal.lease_ms).0,
            seal.now.0,
            epoch,
            head.sealer_epoch
        ],
    )
    .map_err(unavailable)?;
    if stored != 1 {
        return Err(corrupt(
            "audit head",
            "its sealer epoch moved under the writer's lock",
        ));
    }
    Ok(SealOutcome::Sealed {
        events: batch.len() as u32,
        head: (seq, hash),
        epoch,
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
