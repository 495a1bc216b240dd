//! The audit log on PostgreSQL: events inserted unsealed at the commit of the transaction that
//! makes the change, and sealed into the chain afterwards by one replica (see `crate::audit`).
//!
//! [`append`] queues the event on the transaction; at commit (`conn::finish`) [`insert`] writes
//! every queued event in one statement, with its content hash and an insertion id from an
//! identity column. No other audit row is read and no lock is taken for it: concurrent audited
//! commits do not wait for each other on account of the audit log.
//!
//! [`seal`] takes the head row `FOR UPDATE`: that row lock is what serializes sealers, whichever
//! replica they run on, so two seals never give out one `seq` twice or fork the chain. It reads
//! the oldest unsealed events its statement's snapshot sees (those of committed transactions),
//! seals them in insertion order and stores the new head, all in one transaction. An event of a
//! transaction still open is invisible to it and keeps `seq IS NULL`, so a later seal finds it:
//! no event is skipped, whatever order transactions commit in. A sealer that dies mid-batch
//! leaves its transaction to be rolled back with its session: nothing half-sealed, the row lock
//! released, and the next sealer carries on from the stored head.

use super::conn::{in_transaction, Mode, PendingAudit, Tx};
use super::rows::{col, corrupt};
use super::PostgresStore;
use crate::audit::{
    held_by_another, seal_links, sealing_epoch, stored_event, AuditHead, AuditSeal, SealOutcome,
    Unsealed, UNSEALED_COLUMNS,
};
pub(crate) use crate::audit_entry::{AuditEntry, AuditKind};
use crate::error::StoreResult;
use crate::records::{Actor, AuditEvent};
use serde_json::Value;
use steward_core::{Millis, ReplicaId};
use tokio_postgres::Row;

/// Queues `entry` with its content hash: it is inserted when the transaction commits, or not at
/// all.
pub(crate) async fn append(tx: &Tx<'_>, actor: &Actor, entry: AuditEntry) -> StoreResult<()> {
    let (event, content_hash) = entry.into_event(actor);
    tx.audit(PendingAudit {
        at: event.at,
        env_id: event.env_id,
        actor: event.actor,
        kind: event.kind,
        subject: event.subject,
        before: event.before,
        after: event.after,
        content_hash,
    });
    Ok(())
}

/// The insert of queued events, unsealed, in the order they were queued: one statement for
/// any number of them.
pub(crate) const INSERT_SQL: &str =
    "INSERT INTO audit (at, env_id, actor, kind, subject, before, after, content_hash)
     SELECT at, env_id, actor, kind, subject, before, after, content_hash
     FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                 $7::text[], $8::text[])
          WITH ORDINALITY AS e(at, env_id, actor, kind, subject, before, after, content_hash, n)
     ORDER BY n";

/// Inserts the queued events, unsealed, in the order they were queued. Called at commit.
pub(crate) async fn insert(tx: &Tx<'_>, pending: Vec<PendingAudit>) -> StoreResult<()> {
    let n = pending.len();
    let (mut ats, mut envs, mut actors, mut kinds) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut subjects, mut befores, mut afters, mut hashes) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for p in pending {
        ats.push(p.at);
        envs.push(p.env_id);
        actors.push(p.actor);
        kinds.push(p.kind);
        subjects.push(p.subject);
        befores.push(p.before.as_ref().map(Value::to_string));
        afters.push(p.after.as_ref().map(Value::to_string));
        hashes.push(p.content_hash);
    }
    tx.execute(
        INSERT_SQL,
        &[
            &ats, &envs, &actors, &kinds, &subjects, &befores, &afters, &hashes,
        ],
    )
    .await?;
    Ok(())
}

const COLUMNS: &str =
    "id, at, env_id, actor, kind, subject, before, after, content_hash, seq, prev_hash, hash";

/// Sealed events with `seq > after`, in chain order.
pub(crate) async fn events(tx: &Tx<'_>, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
    let sql = format!("SELECT {COLUMNS} FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2");
    tx.all(&sql, &[&after, &i64::from(limit)], stored_event)
        .await
}

/// Unsealed events with `id > after_id`, in insertion order.
pub(crate) async fn unsealed(
    tx: &Tx<'_>,
    after_id: i64,
    limit: u32,
) -> StoreResult<Vec<AuditEvent>> {
    let sql =
        format!("SELECT {COLUMNS} FROM audit WHERE seq IS NULL AND id > $1 ORDER BY id LIMIT $2");
    tx.all(&sql, &[&after_id, &i64::from(limit)], stored_event)
        .await
}

/// The oldest unsealed events' ids and content hashes, in insertion order: what a seal reads.
async fn unsealed_hashes(tx: &Tx<'_>, limit: u32) -> StoreResult<Vec<Unsealed>> {
    let sql =
        format!("SELECT {UNSEALED_COLUMNS} FROM audit WHERE seq IS NULL ORDER BY id LIMIT $1");
    tx.all(&sql, &[&i64::from(limit)], |r| {
        Ok(Unsealed {
            id: col(r, 0)?,
            content_hash: col(r, 1)?,
        })
    })
    .await
}

/// The head row's columns, and whether its sealer is a registered replica.
const HEAD_SQL: &str = "SELECT h.seq, h.hash, h.sealer, h.lease_until,
        EXISTS (SELECT 1 FROM replicas r WHERE r.id = h.sealer), h.sealer_epoch
     FROM audit_head h WHERE h.id = 1";

fn head_row(row: &Row) -> StoreResult<(AuditHead, bool)> {
    let sealer = col::<Option<String>>(row, 2)?
        .map(|s| ReplicaId::parse(&s).map_err(|e| corrupt("audit sealer", e)))
        .transpose()?;
    Ok((
        AuditHead {
            seq: col(row, 0)?,
            hash: col(row, 1)?,
            sealer,
            lease_until: Millis(col(row, 3)?),
            sealer_epoch: col(row, 5)?,
        },
        col(row, 4)?,
    ))
}

async fn head_and_holder(tx: &Tx<'_>, sql: &str) -> StoreResult<(AuditHead, bool)> {
    tx.one(sql, &[], head_row)
        .await?
        .ok_or_else(|| corrupt("audit head", "no row"))
}

pub(crate) async fn head(tx: &Tx<'_>) -> StoreResult<AuditHead> {
    head_and_holder(tx, HEAD_SQL).await.map(|(head, _)| head)
}

/// Seals the oldest unsealed events. A read first, without a lock, so that an idle log or a
/// lease held by another replica costs no write; then one transaction for the batch.
pub(crate) async fn seal(store: &PostgresStore, seal: &AuditSeal) -> StoreResult<SealOutcome> {
    let ((head, registered), anything) = in_transaction!(store, Mode::Read, |tx| async {
        let head = head_and_holder(&tx, HEAD_SQL).await?;
        let anything = tx
            .query_first("SELECT 1 FROM audit WHERE seq IS NULL LIMIT 1", &[])
            .await?
            .is_some();
        Ok((head, anything))
    })?;
    if let Some(held) = held_by_another(&head, registered, seal) {
        return Ok(held);
    }
    if !anything {
        return Ok(SealOutcome::Idle);
    }
    // No write lock: the head row's lock orders sealers, and nothing else writes sealed rows.
    in_transaction!(store, Mode::WriteConcurrent, |tx| seal_batch(&tx, seal))
}

async fn seal_batch(tx: &Tx<'_>, seal: &AuditSeal) -> StoreResult<SealOutcome> {
    let (head, registered) = head_and_holder(tx, &format!("{HEAD_SQL} FOR UPDATE OF h")).await?;
    if let Some(held) = held_by_another(&head, registered, seal) {
        return Ok(held);
    }
    let epoch = sealing_epoch(&head, seal)?;
    let batch = unsealed_hashes(tx, seal.events_max).await?;
    if batch.is_empty() {
        return Ok(SealOutcome::Idle);
    }
    let n = batch.len();
    let links = seal_links(&head, &batch);
    let ids: Vec<i64> = links.iter().map(|l| l.id).collect();
    let seqs: Vec<i64> = links.iter().map(|l| l.link.seq).collect();
    let prevs: Vec<&str> = links.iter().map(|l| l.link.prev_hash.as_str()).collect();
    let hashes: Vec<&str> = links.iter().map(|l| l.link.hash.as_str()).collect();
    let sealed = tx
        .execute(
            "UPDATE audit SET seq = u.seq, prev_hash = u.prev, hash = u.hash
             FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::text[]) AS u(id, seq, prev, hash)
             WHERE audit.id = u.id AND audit.seq IS NULL",
            &[&ids, &seqs, &prevs, &hashes],
        )
        .await?;
    if sealed != n as u64 {
        return Err(corrupt(
            "audit seal",
            format!("{sealed} of {n} events sealed"),
        ));
    }
    let last = &links.last().expect("a batch of one event or more").link;
    let (seq, hash) = (last.seq, last.hash.clone());
    // The compare-and-set on the epoch read above (the head row's lock already keeps it).
    let stored = tx
        .execute(
            "UPDATE audit_head SET seq = $1, hash = $2, sealer = $3, lease_until = $4,
                sealed_at = $5, sealer_epoch = $6
             WHERE id = 1 AND sealer_epoch = $7",
            &[
                &seq,
                &hash,
                &seal.sealer.as_str(),
                &seal.now.plus_ms(seal.lease_ms).0,
                &seal.now.0,
                &epoch,
                &head.sealer_epoch,
            ],
        )
        .await?;
    if stored != 1 {
        return Err(corrupt(
            "audit head",
            "its sealer epoch moved under the row's lock",
        ));
    }
    Ok(SealOutcome::Sealed {
        events: n as u32,
        head: (seq, hash),
        epoch,
    })
}

#[async_trait::async_trait]
impl crate::store::AuditLog for PostgresStore {
    async fn audit_events(&self, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
        in_transaction!(self, Mode::Read, |tx| events(&tx, after, limit))
    }

    async fn unsealed_audit_events(
        &self,
        after_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<AuditEvent>> {
        in_transaction!(self, Mode::Read, |tx| unsealed(&tx, after_id, limit))
    }

    async fn audit_head(&self) -> StoreResult<AuditHead> {
        in_transaction!(self, Mode::Read, |tx| head(&tx))
    }

    async fn seal_audit(&self, audit_seal: &AuditSeal) -> StoreResult<SealOutcome> {
        seal(self, audit_seal).await
    }
}
