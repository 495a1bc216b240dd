//! Replicas and recovery: heartbeats, each on a connection of its own, and the recovery sweep
//! that settles what dead replicas left in between, without sending anything.
//!
//! A heartbeat is one autocommitted upsert of the replica's row, outside the write lock and
//! outside the pool: a replica whose pool is busy with a queue of writers waiting for the lock
//! must still heartbeat on time, or the others would take it for dead. (Taking a live replica
//! for dead is safe, only wasteful: its attempts in flight are marked `unknown` and its late
//! answers are kept as evidence; compare-and-set keeps it from sending anything twice.)
//!
//! The row also names the database session the replica heartbeats on (its backend pid and start
//! time). A process that dies, however it dies, closes that session at once, so the recovery
//! sweep takes a replica whose session is gone for dead without waiting for its lease to run
//! out: a crashed replica's attempts become `unknown` at the next sweep of any replica,
//! including its own successor's start-up sweep. The lease still catches a replica that hangs
//! while its session stays open.
//!
//! Every replica sweeps at start-up and then every heartbeat. A sweep first asks, in a read-only
//! snapshot and without the write lock, whether anything is orphaned at all; only then does it
//! take the write lock and do the work, so a quiet cluster costs one cheap read per replica and
//! heartbeat. The work runs behind the write lock like every write: of several replicas sweeping
//! at once, the first takes every orphan and the others find them settled (or owned by a live
//! replica, for approved work it took over). The orphans are also selected `FOR UPDATE SKIP
//! LOCKED`: under the write lock no other transaction holds those rows, so nothing is skipped,
//! but a sweep stays exactly-once per piece should writes ever stop sharing one lock. The
//! compare-and-set of every effect change is the second check.

use super::audit_log::{append, Entry};
use super::conn::{self, unavailable, Tx};
use super::conn::{in_transaction, Mode};
use super::effects::change_effect;
use super::rows::{self, col};
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::recovery::{self, Orphan};
use crate::store::Replicas;
use async_trait::async_trait;
use serde_json::json;
use std::time::Duration;
use steward_core::{EffectId, EffectState, EnvironmentId, InvocationId, Millis, ReplicaId};
use tokio::sync::Mutex;

const HEARTBEAT_SQL: &str = "INSERT INTO replicas (id, started_at, heartbeat_at, session_pid, session_started)
     VALUES ($1, $2, $2, pg_backend_pid(),
             (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()))
     ON CONFLICT (id) DO UPDATE SET heartbeat_at = GREATEST(replicas.heartbeat_at, EXCLUDED.heartbeat_at),
         session_pid = EXCLUDED.session_pid, session_started = EXCLUDED.session_started";

/// How long one heartbeat may wait for its answer before the connection is taken for broken
/// and replaced, in milliseconds. Longer than the default lease: by the time it runs out, the
/// other replicas already count this one as dead, so closing the session (which they would
/// also read as death) costs nothing more. A slow answer is never a reason to drop the session
/// sooner.
const HEARTBEAT_ANSWER_MS_MAX: u64 = 10_000;

/// The heartbeat connection, opened on first use and again after it breaks.
pub(crate) struct Heartbeats {
    config: tokio_postgres::Config,
    client: Mutex<Option<tokio_postgres::Client>>,
}

impl Heartbeats {
    pub(crate) fn new(config: tokio_postgres::Config) -> Self {
        Self {
            config,
            client: Mutex::new(None),
        }
    }

    /// One heartbeat. Cancelling it (dropping the future) keeps the connection and its session:
    /// the session is this replica's proof of life.
    pub(crate) async fn beat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<()> {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_none_or(|client| client.is_closed()) {
            let (client, connection) = conn::dedicated(&self.config, "steward-heartbeat").await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "the heartbeat connection failed");
                }
            });
            *slot = Some(client);
        }
        let client = slot.as_ref().expect("connected above");
        let answer = tokio::time::timeout(
            Duration::from_millis(HEARTBEAT_ANSWER_MS_MAX),
            client.execute(HEARTBEAT_SQL, &[&replica.as_str(), &now.0]),
        )
        .await;
        match answer {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                if client.is_closed() {
                    *slot = None;
                }
                Err(unavailable(e))
            }
            Err(_) => {
                *slot = None;
                Err(StoreError::Unavailable {
                    message: format!(
                        "no heartbeat answer within {HEARTBEAT_ANSWER_MS_MAX} ms; reconnecting"
                    ),
                    source: None,
                })
            }
        }
    }
}

/// True (as SQL) when the replica row `r` is alive for the sweep: it heartbeated at or after
/// `$2`, and the session it heartbeats on is still open (see the module's doc). A session start
/// hidden from this database user (another role's session, without `pg_read_all_stats`) counts
/// as open: the lease alone decides then.
const ALIVE: &str = "r.heartbeat_at >= $2 AND (r.session_pid IS NULL OR EXISTS (
        SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.session_pid
            AND (a.backend_start IS NULL OR r.session_started IS NULL
                 OR a.backend_start = r.session_started)))";

/// True (as SQL) when the row's `owner` is dead for the sweep: not the sweeping replica (`$1`),
/// and not alive. A row without an owner predates replicas: orphaned.
fn orphaned(table: &str) -> String {
    format!(
        "({table}.owner IS NULL OR ({table}.owner <> $1 AND NOT EXISTS (
            SELECT 1 FROM replicas r WHERE r.id = {table}.owner AND {ALIVE})))"
    )
}

fn orphan(row: &tokio_postgres::Row) -> StoreResult<Orphan> {
    Ok(Orphan {
        env: rows::id(row, 0, EnvironmentId::parse)?,
        effect: rows::id(row, 1, EffectId::parse)?,
        invocation: rows::id(row, 2, InvocationId::parse)?,
        state: rows::state(col(row, 3)?)?,
        attempts: rows::int(row, 4)?,
        owner: col(row, 5)?,
        approved: col(row, 6)?,
    })
}

/// Makes an orphaned approved effect the sweeping replica's, which dispatches it.
async fn claim(tx: &Tx<'_>, orphan: &Orphan, sweep: &Sweep) -> StoreResult<()> {
    tx.execute(
        "UPDATE effects SET owner = $1 WHERE id = $2",
        &[&sweep.replica.as_str(), &orphan.effect.as_str()],
    )
    .await?;
    append(
        tx,
        &Actor::system(sweep.now),
        Entry {
            env: Some(orphan.env.as_str()),
            kind: "effect.taken_over",
            subject: orphan.effect.as_str(),
            before: Some(json!({"owner": orphan.owner})),
            after: Some(json!({"owner": sweep.replica})),
        },
    )
    .await
}

#[async_trait]
impl Replicas for PostgresStore {
    async fn heartbeat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<()> {
        self.heartbeats.beat(replica, now).await
    }

    async fn recover(&self, sweep: &Sweep) -> StoreResult<RecoveryReport> {
        // The common case, nothing orphaned, is answered from a snapshot without the lock.
        if !in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT EXISTS (SELECT 1 FROM effects e WHERE e.state IN ('ready', 'dispatching') AND {})
             OR EXISTS (SELECT 1 FROM idempotency i WHERE i.state = 'in_progress' AND {})
             OR EXISTS (SELECT 1 FROM replicas r WHERE r.id <> $1 AND NOT ({ALIVE}))",
                orphaned("e"),
                orphaned("i")
            );
            let row = tx
                .query_first(&sql, &[&sweep.replica.as_str(), &sweep.dead_before.0])
                .await?
                .ok_or_else(|| rows::corrupt("sweep check", "no row"))?;
            col(&row, 0)
        })? {
            return Ok(RecoveryReport::default());
        }
        in_transaction!(self, Mode::Write, |tx| async {
            let (replica, dead_before) = (sweep.replica.as_str(), sweep.dead_before.0);
            let mut report = RecoveryReport::default();
            let sql = format!(
                "SELECT e.env_id, e.id, e.invocation_id, e.state, e.attempt_count, e.owner,
                EXISTS (SELECT 1 FROM approvals a WHERE a.effect_id = e.id AND a.status = 'approved')
         FROM effects e
         WHERE e.state IN ('ready', 'dispatching') AND {}
         ORDER BY e.created_at, e.id
         FOR UPDATE OF e SKIP LOCKED",
                orphaned("e")
            );
            for orphan in tx.all(&sql, &[&replica, &dead_before], orphan).await? {
                match recovery::settle(&orphan, sweep) {
                    recovery::Settle::Change(change) => {
                        change_effect(&tx, &change).await?;
                        match orphan.state {
                            EffectState::Dispatching => {
                                report.dispatching_to_unknown.push(orphan.effect)
                            }
                            _ => report.ready_to_failed.push(orphan.effect),
                        }
                    }
                    recovery::Settle::TakeOver => {
                        claim(&tx, &orphan, sweep).await?;
                        report
                            .approved_to_dispatch
                            .push((orphan.env, orphan.invocation));
                    }
                }
            }
            let marked = tx
                .execute(
                    &format!(
                        "UPDATE idempotency SET state = 'done'
                 WHERE state = 'in_progress' AND kind = 'invoke' AND {}",
                        orphaned("idempotency")
                    ),
                    &[&replica, &dead_before],
                )
                .await?;
            let dropped = tx
                .execute(
                    &format!(
                        "DELETE FROM idempotency WHERE state = 'in_progress' AND kind = 'generic' AND {}",
                        orphaned("idempotency")
                    ),
                    &[&replica, &dead_before],
                )
                .await?;
            report.requests_cleared = marked + dropped;
            report.expired_replicas = tx
                .all(
                    &format!(
                        "DELETE FROM replicas r WHERE r.id <> $1 AND NOT ({ALIVE}) RETURNING r.id"
                    ),
                    &[&replica, &dead_before],
                    |row| rows::id(row, 0, ReplicaId::parse),
                )
                .await?;
            report.expired_replicas.sort();
            if !report.expired_replicas.is_empty() {
                // A dead replica may have died between a decision's commit and its
                // announcement (`notify`): every waiter reads again.
                tx.execute(
                    "SELECT pg_notify($1, $2)",
                    &[
                        &super::notify::APPROVALS_CHANNEL,
                        &super::notify::RESYNC_PAYLOAD,
                    ],
                )
                .await?;
            }
            Ok(report)
        })
    }
}
