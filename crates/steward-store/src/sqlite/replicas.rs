//! Replicas and recovery: heartbeats, and the sweep that settles what a dead replica left in
//! between, without sending anything. One IMMEDIATE transaction per sweep, so concurrent sweeps
//! (two handles on one file) run one after the other and the second finds the first's work done.

use super::audit_log::{append, AuditEntry};
use super::conn::unavailable;
use super::effects::change_effect;
use super::rows::{self, col, query_all};
use super::SqliteStore;
use crate::error::StoreResult;
use crate::records::*;
use crate::recovery::{self, Orphan, Step};
use crate::store::{Heartbeat, Replicas};
use async_trait::async_trait;
use rusqlite::{params, Transaction};
use steward_core::{EffectId, EnvironmentId, InvocationId, Millis, ReplicaId};

/// True (as SQL) when the row's `owner` is dead for the sweep: not the sweeping replica (`?1`),
/// and no heartbeat at or after `?2`. A row without an owner predates replicas: orphaned.
fn orphaned(table: &str) -> String {
    format!(
        "({table}.owner IS NULL OR ({table}.owner <> ?1 AND NOT EXISTS (
            SELECT 1 FROM replicas r WHERE r.id = {table}.owner AND r.heartbeat_at >= ?2)))"
    )
}

/// True (as SQL) when the `dispatching` effect `e` has an attempt in flight whose deadline is
/// older than `?3`: overdue by more than the lease, taken whoever owns it.
const OVERDUE: &str = "(e.state = 'dispatching' AND EXISTS (
            SELECT 1 FROM attempts a WHERE a.effect_id = e.id AND a.number = e.attempt_count
                AND a.finished_at IS NULL AND a.deadline_at < ?3))";

/// The orphans, oldest first. Whether an approval released each is one uncorrelated subquery,
/// which SQLite evaluates once for the statement: `approvals` has no index on `effect_id`, and a
/// correlated `EXISTS` would scan it once per orphan.
fn orphans(tx: &Transaction<'_>, sweep: &Sweep) -> StoreResult<Vec<Orphan>> {
    let sql = format!(
        "SELECT e.env_id, e.id, e.invocation_id, e.state, e.attempt_count, e.owner,
                (e.id IN (SELECT a.effect_id FROM approvals a
                         WHERE a.status = 'approved' AND a.effect_id IS NOT NULL)
                 OR {held}),
                {OVERDUE}
         FROM effects e
         WHERE e.{} AND e.state IN ('ready', 'dispatching') AND ({} OR {OVERDUE})
         ORDER BY e.created_at, e.id",
        super::schema::OPEN_STATES_TERM,
        orphaned("e"),
        held = crate::hold_rows::HELD_EFFECT,
    );
    query_all(
        tx,
        &sql,
        &[
            &sweep.replica.as_str(),
            &sweep.dead_before.0,
            &sweep.overdue_before.0,
        ],
        |row| {
            let corrupt = |e| rows::corrupt("id", e);
            Ok(Orphan {
                env: EnvironmentId::parse(&col::<String>(row, 0)?).map_err(corrupt)?,
                effect: EffectId::parse(&col::<String>(row, 1)?).map_err(corrupt)?,
                invocation: InvocationId::parse(&col::<String>(row, 2)?).map_err(corrupt)?,
                state: rows::state(&col::<String>(row, 3)?)?,
                attempts: col(row, 4)?,
                owner: col(row, 5)?,
                approved: col::<i64>(row, 6)? != 0,
                overdue: col::<i64>(row, 7)? != 0,
            })
        },
    )
}

/// Makes an orphaned approved effect the sweeping replica's, which dispatches it: a takeover,
/// under the next epoch.
fn claim(
    tx: &Transaction<'_>,
    orphan: &Orphan,
    entry: AuditEntry,
    sweep: &Sweep,
) -> StoreResult<()> {
    super::conn::execute_cached(
        tx,
        "UPDATE effects SET owner = ?1, fence = fence + 1 WHERE id = ?2",
        params![sweep.replica.as_str(), orphan.effect.as_str()],
    )
    .map_err(unavailable)?;
    append(tx, &Actor::system(sweep.now), entry)
}

#[async_trait]
impl Replicas for SqliteStore {
    async fn ready(&self) -> StoreResult<()> {
        // Opening the store migrated it, and nothing else changes its schema while it is open:
        // a read that answers is all there is to know.
        self.read(|conn| {
            conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |row| {
                row.get::<_, i64>(0)
            })
            .map(|_| ())
            .map_err(unavailable)
        })
        .await
    }

    async fn heartbeat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<Heartbeat> {
        let replica = replica.clone();
        self.write(move |tx| {
            // Under the writer's lock: no sweep removes the row between the two statements.
            let renewed = super::conn::execute_cached(
                tx,
                "UPDATE replicas SET heartbeat_at = MAX(heartbeat_at, ?2) WHERE id = ?1",
                params![replica.as_str(), now.0],
            )
            .map_err(unavailable)?;
            if renewed == 1 {
                return Ok(Heartbeat::Renewed);
            }
            super::conn::execute_cached(
                tx,
                "INSERT INTO replicas (id, started_at, heartbeat_at) VALUES (?1, ?2, ?2)",
                params![replica.as_str(), now.0],
            )
            .map_err(unavailable)?;
            Ok(Heartbeat::Registered)
        })
        .await
    }

    async fn recover(&self, sweep: &Sweep) -> StoreResult<RecoveryReport> {
        let sweep = sweep.clone();
        self.write(move |tx| {
            let orphans = orphans(tx, &sweep)?;
            let (steps, mut report) = recovery::plan(&orphans, &sweep);
            for step in steps {
                match step {
                    Step::Change(change) => change_effect(tx, &change)?,
                    Step::TakeOver(orphan, entry) => claim(tx, orphan, entry, &sweep)?,
                }
            }
            let (replica, dead_before) = (sweep.replica.as_str(), sweep.dead_before.0);
            let marked = super::conn::execute_cached(
                tx,
                &format!(
                    "UPDATE idempotency SET state = 'done'
                 WHERE state = 'in_progress' AND kind = 'invoke' AND {}",
                    orphaned("idempotency")
                ),
                params![replica, dead_before],
            )
            .map_err(unavailable)?;
            let dropped = super::conn::execute_cached(
                tx,
                &format!(
                    "DELETE FROM idempotency WHERE state = 'in_progress' AND kind = 'generic' AND {}",
                    orphaned("idempotency")
                ),
                params![replica, dead_before],
            )
            .map_err(unavailable)?;
            report.requests_cleared = (marked + dropped) as u64;
            report.expired_replicas = query_all(
                tx,
                "DELETE FROM replicas WHERE id <> ?1 AND heartbeat_at < ?2 RETURNING id",
                &[&replica, &dead_before],
                |row| ReplicaId::parse(&col::<String>(row, 0)?).map_err(|e| rows::corrupt("id", e)),
            )?;
            report.expired_replicas.sort();
            Ok(report)
        })
        .await
    }
}
