//! Replicas and recovery: heartbeats, each on a connection of its own, and the recovery sweep
//! that settles what dead replicas left in between, without sending anything.
//!
//! A heartbeat is one autocommitted upsert of the replica's row, outside the write lock and
//! outside the pool: a replica whose pool is busy with a queue of writers waiting for the lock
//! must still heartbeat on time, or the others would take it for dead. (Taking a live replica
//! for dead is safe, only wasteful: its attempts in flight are marked `unknown` under the next
//! epoch, its late answers are refused as fenced and kept as evidence, and its next heartbeat
//! finds its registration gone and tells it so; compare-and-set keeps it from sending anything
//! twice.)
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
//! heartbeat. The work runs behind the write lock like every write, in chunks of
//! [`SWEEP_CHUNK_EFFECTS`] orphans, one transaction each: of several replicas sweeping at once,
//! each chunk is taken by one of them, and the others find its orphans settled (or owned by a
//! live replica, for approved work it took over). The orphans are also selected `FOR UPDATE
//! SKIP LOCKED`: a row a hot-path transaction holds (recording an answer, not yet behind the
//! lock) is left to it, and a sweep stays exactly-once per piece should writes ever stop
//! sharing one lock. The compare-and-set of every effect change is the second check.
//!
//! A chunk is written with one statement per table (`UPDATE ... FROM UNNEST`, `INSERT ...
//! SELECT FROM UNNEST`), whatever its size; the changes themselves are `recovery::settle`'s,
//! built by `EffectChange::of`, and each writes what `change_effect` would write for it.

use super::audit_log::{append, AuditEntry};
use super::conn::{self, unavailable, Tx};
use super::conn::{in_transaction, Mode};
use super::rows::{self, col};
use super::PostgresStore;
use crate::change_plan::{ChangePlan, EvidenceRow, FinishedAttempt, InvocationUpdate, Settlement};
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::recovery::{self, Orphan, Step, SWEEP_CHUNK_EFFECTS};
use crate::store::{Heartbeat, Replicas};
use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use steward_core::{EffectId, EnvironmentId, InvocationId, Millis, ReplicaId};
use tokio::sync::Mutex;

/// One upsert, answering whether it inserted (`xmax = 0` on a row the statement inserted): a
/// registration, first or anew after a sweep removed the row ([`Heartbeat::Registered`]).
const HEARTBEAT_SQL: &str = "INSERT INTO replicas (id, started_at, heartbeat_at, session_pid, session_started)
     VALUES ($1, $2, $2, pg_backend_pid(),
             (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()))
     ON CONFLICT (id) DO UPDATE SET heartbeat_at = GREATEST(replicas.heartbeat_at, EXCLUDED.heartbeat_at),
         session_pid = EXCLUDED.session_pid, session_started = EXCLUDED.session_started
     RETURNING (xmax = 0)";

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
    pub(crate) async fn beat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<Heartbeat> {
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
            client.query_one(HEARTBEAT_SQL, &[&replica.as_str(), &now.0]),
        )
        .await;
        match answer {
            Ok(Ok(row)) => Ok(if col::<bool>(&row, 0)? {
                Heartbeat::Registered
            } else {
                Heartbeat::Renewed
            }),
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
pub(super) const ALIVE: &str = "r.heartbeat_at >= $2 AND (r.session_pid IS NULL OR EXISTS (
        SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.session_pid
            AND (a.backend_start IS NULL OR r.session_started IS NULL
                 OR a.backend_start = r.session_started)))";

/// True (as SQL) when the row's `owner` is dead for the sweep: not the sweeping replica (`$1`),
/// and not alive. A row without an owner predates replicas: orphaned. The live replicas are
/// found once per statement (an uncorrelated subquery), not once per row: a sweep of a large
/// backlog would otherwise look each row's owner up again, session check included.
fn orphaned(table: &str) -> String {
    format!(
        "({table}.owner IS NULL OR ({table}.owner <> $1
            AND {table}.owner <> ALL (ARRAY(SELECT r.id FROM replicas r WHERE {ALIVE}))))"
    )
}

/// True (as SQL) when the `dispatching` effect `e` has an attempt in flight whose deadline is
/// older than `$n`: overdue by more than the lease, taken whoever owns it.
fn overdue(n: u8) -> String {
    format!(
        "(e.state = 'dispatching' AND EXISTS (
            SELECT 1 FROM attempts a WHERE a.effect_id = e.id AND a.number = e.attempt_count
                AND a.finished_at IS NULL AND a.deadline_at < ${n}))"
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
        overdue: col(row, 7)?,
    })
}

/// A chunk's changes written with one statement per table: each change's [`ChangePlan`], as
/// `change_effect` writes it (the compare-and-set of the effect's state, the attempt it closes,
/// its reservations settled, its invocation, its evidence entry, its audit events), for every
/// change at once. Only the moves a sweep makes (`recovery::settle`): no attempt begins (no
/// kill switch to read) and no request is marked answered.
async fn settle_all(tx: &Tx<'_>, changes: &[EffectChange]) -> StoreResult<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let plans = batch_plans(changes)?;
    move_effects(tx, &plans).await?;
    close_attempts(tx, &plans).await?;
    let settled = settle_reservations(tx, &plans).await?;
    update_invocations(tx, &plans).await?;
    insert_evidence(tx, &plans).await?;
    // The audit events, in the order `change_effect` appends them, change by change.
    for plan in &plans {
        let count = settled.get(plan.change.effect_id.as_str()).copied();
        for entry in plan.audit(count.unwrap_or(0)) {
            append(tx, &plan.change.actor, entry).await?;
        }
    }
    Ok(())
}

/// The plans of a sweep's batch, each change checked as `change_effect` checks it; a change a
/// sweep never makes (one that begins an attempt or answers a request) is refused.
fn batch_plans(changes: &[EffectChange]) -> StoreResult<Vec<ChangePlan<'_>>> {
    changes
        .iter()
        .map(|c| {
            c.check_legal()?;
            let plan = ChangePlan::of(c);
            if plan.begun.is_some() || plan.answers.is_some() {
                return Err(StoreError::IllegalTransition {
                    env: c.env_id.clone(),
                    effect: c.effect_id.clone(),
                    from: c.from,
                    step: "a sweep's batch with a begun attempt or an answered request".into(),
                });
            }
            Ok(plan)
        })
        .collect()
}

/// The compare-and-set of every effect's state; `StateConflict` for the first that did not move.
async fn move_effects(tx: &Tx<'_>, plans: &[ChangePlan<'_>]) -> StoreResult<()> {
    let ids: Vec<&str> = plans.iter().map(|p| p.change.effect_id.as_str()).collect();
    let envs: Vec<&str> = plans.iter().map(|p| p.change.env_id.as_str()).collect();
    let froms: Vec<&str> = plans.iter().map(|p| p.change.from.name()).collect();
    let tos: Vec<&str> = plans.iter().map(|p| p.to).collect();
    let ats: Vec<i64> = plans.iter().map(|p| p.now).collect();
    let references: Vec<Option<&str>> = plans
        .iter()
        .map(|p| p.change.external_reference.as_deref())
        .collect();
    // A sweep's changes are takeovers: the effect becomes the sweeper's, under the next epoch.
    let takers: Vec<Option<&str>> = plans
        .iter()
        .map(|p| match &p.change.fence {
            Some(Fence::TakeOver(by)) => Some(by.as_str()),
            _ => None,
        })
        .collect();
    let moved = tx
        .query(
            "UPDATE effects e SET state = u.to_state, updated_at = u.at,
                 external_reference = COALESCE(u.reference, e.external_reference),
                 owner = COALESCE(u.taker, e.owner),
                 fence = e.fence + CASE WHEN u.taker IS NULL THEN 0 ELSE 1 END
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[],
                         $7::text[])
                 AS u(id, env_id, from_state, to_state, at, reference, taker)
             WHERE e.id = u.id AND e.env_id = u.env_id AND e.state = u.from_state
             RETURNING e.id",
            &[&ids, &envs, &froms, &tos, &ats, &references, &takers],
        )
        .await?;
    if moved.len() == plans.len() {
        return Ok(());
    }
    let moved: HashSet<&str> = moved.iter().map(|row| row.get::<_, &str>(0)).collect();
    let lost = plans
        .iter()
        .map(|p| p.change)
        .find(|c| !moved.contains(c.effect_id.as_str()))
        .expect("fewer rows moved than changes");
    let found = tx
        .query_first(
            "SELECT state FROM effects WHERE env_id = $1 AND id = $2",
            &[&lost.env_id.as_str(), &lost.effect_id.as_str()],
        )
        .await?
        .ok_or(StoreError::NotFound { what: "effect" })?;
    Err(StoreError::StateConflict {
        expected: lost.from,
        found: rows::state(col(&found, 0)?)?,
    })
}

/// The attempts the changes close; closing one that does not exist is corruption.
async fn close_attempts(tx: &Tx<'_>, plans: &[ChangePlan<'_>]) -> StoreResult<()> {
    let finished: Vec<(&ChangePlan<'_>, FinishedAttempt<'_>)> = plans
        .iter()
        .filter_map(|p| p.finished.map(|f| (p, f)))
        .collect();
    if finished.is_empty() {
        return Ok(());
    }
    let effects: Vec<&str> = finished
        .iter()
        .map(|f| f.0.change.effect_id.as_str())
        .collect();
    let numbers: Vec<i64> = finished.iter().map(|f| f.1.number).collect();
    let at: Vec<i64> = finished.iter().map(|f| f.0.now).collect();
    let statuses: Vec<&str> = finished.iter().map(|f| f.0.to).collect();
    let answered: Vec<Option<i64>> = finished.iter().map(|f| f.1.response_status).collect();
    let errors: Vec<Option<&str>> = finished.iter().map(|f| f.1.error).collect();
    let closed = tx
        .query(
            "UPDATE attempts a SET finished_at = u.at, status = u.status,
                 response_status = u.response_status, error = u.error
             FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::text[])
                 AS u(effect_id, number, at, status, response_status, error)
             WHERE a.effect_id = u.effect_id AND a.number = u.number
             RETURNING a.effect_id",
            &[&effects, &numbers, &at, &statuses, &answered, &errors],
        )
        .await?;
    if closed.len() == finished.len() {
        return Ok(());
    }
    let closed: HashSet<&str> = closed.iter().map(|row| row.get::<_, &str>(0)).collect();
    let (plan, attempt) = finished
        .iter()
        .find(|f| !closed.contains(f.0.change.effect_id.as_str()))
        .expect("fewer attempts closed than asked");
    Err(StoreError::Corrupt(format!(
        "attempt {} of {} does not exist",
        attempt.number, plan.change.effect_id
    )))
}

/// The reservations the changes settle, each from the states its settlement moves. Answers how
/// many moved, by effect.
async fn settle_reservations(
    tx: &Tx<'_>,
    plans: &[ChangePlan<'_>],
) -> StoreResult<HashMap<String, u64>> {
    let settling: Vec<(&ChangePlan<'_>, Settlement)> = plans
        .iter()
        .filter_map(|p| p.settlement.map(|s| (p, s)))
        .collect();
    let mut settled: HashMap<String, u64> = HashMap::new();
    if settling.is_empty() {
        return Ok(settled);
    }
    let effects: Vec<&str> = settling
        .iter()
        .map(|s| s.0.change.effect_id.as_str())
        .collect();
    let afters: Vec<&str> = settling.iter().map(|s| s.1.after.as_str()).collect();
    let at: Vec<i64> = settling.iter().map(|s| s.0.now).collect();
    let open = |i: usize| -> Vec<Option<&'static str>> {
        settling
            .iter()
            .map(|s| s.1.from.get(i).map(|r| r.as_str()))
            .collect()
    };
    let (first_open, second_open) = (open(0), open(1));
    for row in tx
        .query(
            "UPDATE impact_reservations r SET state = u.after, updated_at = u.at
             FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[])
                 AS u(effect_id, after, at, first_open, second_open)
             WHERE r.effect_id = u.effect_id AND r.state IN (u.first_open, u.second_open)
             RETURNING r.effect_id",
            &[&effects, &afters, &at, &first_open, &second_open],
        )
        .await?
    {
        *settled.entry(row.get::<_, String>(0)).or_default() += 1;
    }
    Ok(settled)
}

/// The invocations, as `change_effect` leaves them.
async fn update_invocations(tx: &Tx<'_>, plans: &[ChangePlan<'_>]) -> StoreResult<()> {
    let ids: Vec<&str> = plans.iter().map(|p| p.change.effect_id.as_str()).collect();
    let tos: Vec<&str> = plans.iter().map(|p| p.to).collect();
    let updates: Vec<&InvocationUpdate> = plans.iter().map(|p| &p.invocation).collect();
    let response_statuses: Vec<Option<i64>> = updates.iter().map(|u| u.response_status).collect();
    let bodies: Vec<Option<&str>> = updates.iter().map(|u| u.response_body.as_deref()).collect();
    let errors: Vec<Option<&str>> = updates.iter().map(|u| u.error.as_deref()).collect();
    let completed: Vec<Option<i64>> = updates.iter().map(|u| u.completed_at).collect();
    tx.execute(
        "UPDATE invocations i SET state = u.to_state,
             response_status = COALESCE(u.response_status, i.response_status),
             response_body = COALESCE(u.response_body, i.response_body),
             error = COALESCE(u.error, i.error),
             completed_at = COALESCE(i.completed_at, u.completed)
         FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::bigint[])
             AS u(effect_id, to_state, response_status, response_body, error, completed)
         WHERE i.effect_id = u.effect_id",
        &[&ids, &tos, &response_statuses, &bodies, &errors, &completed],
    )
    .await?;
    Ok(())
}

/// One evidence entry per change that carries one, each the next of its effect.
async fn insert_evidence(tx: &Tx<'_>, plans: &[ChangePlan<'_>]) -> StoreResult<()> {
    let rows: Vec<&EvidenceRow<'_>> = plans.iter().filter_map(|p| p.evidence.as_ref()).collect();
    if rows.is_empty() {
        return Ok(());
    }
    let effects: Vec<&str> = rows.iter().map(|r| r.effect).collect();
    let at: Vec<i64> = rows.iter().map(|r| r.at).collect();
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind).collect();
    let sources: Vec<&str> = rows.iter().map(|r| r.source).collect();
    let messages: Vec<&str> = rows.iter().map(|r| r.message).collect();
    let data: Vec<Option<&str>> = rows.iter().map(|r| r.data.as_deref()).collect();
    let actors: Vec<Option<&str>> = rows.iter().map(|r| r.actor).collect();
    tx.execute(
        "INSERT INTO evidence (effect_id, seq, at, kind, source, message, data, actor)
         SELECT u.effect_id,
                (SELECT COALESCE(MAX(v.seq), 0) + 1 FROM evidence v WHERE v.effect_id = u.effect_id),
                u.at, u.kind, u.source, u.message, u.data, u.actor
         FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
             AS u(effect_id, at, kind, source, message, data, actor)",
        &[&effects, &at, &kinds, &sources, &messages, &data, &actors],
    )
    .await?;
    Ok(())
}

/// Removes the dead replicas' rows, then settles up to [`SWEEP_CHUNK_EFFECTS`] orphans, oldest
/// first, behind the write lock; when fewer were left, also releases the dead replicas'
/// request markers.
/// Returns what it did, and whether the sweep is done.
async fn sweep_chunk(tx: &Tx<'_>, sweep: &Sweep) -> StoreResult<(RecoveryReport, bool)> {
    let (replica, dead_before) = (sweep.replica.as_str(), sweep.dead_before.0);
    // The dead replicas' registrations go first, in the transaction that takes their work: a
    // dead replica that wakes up and heartbeats while this chunk runs waits for it on its row,
    // then finds its registration gone (`Heartbeat::Registered`: fenced), never a renewal that
    // hides a takeover. A heartbeat that commits first keeps its replica alive, and this chunk
    // takes none of its work.
    let mut expired = tx
        .all(
            &format!("DELETE FROM replicas r WHERE r.id <> $1 AND NOT ({ALIVE}) RETURNING r.id"),
            &[&replica, &dead_before],
            |row| rows::id(row, 0, ReplicaId::parse),
        )
        .await?;
    expired.sort();
    if !expired.is_empty() {
        // A dead replica may have died between a decision's commit and its announcement
        // (`notify`): every waiter reads again.
        tx.execute(
            "SELECT pg_notify($1, $2)",
            &[
                &super::notify::APPROVALS_CHANNEL,
                &super::notify::RESYNC_PAYLOAD,
            ],
        )
        .await?;
    }
    let sql = format!(
        "SELECT e.env_id, e.id, e.invocation_id, e.state, e.attempt_count, e.owner,
                (e.id IN (SELECT a.effect_id FROM approvals a
                         WHERE a.status = 'approved' AND a.effect_id IS NOT NULL)
                 OR {held}),
                {overdue}
         FROM effects e
         WHERE e.state IN ('ready', 'dispatching') AND ({} OR {overdue})
         ORDER BY e.created_at, e.id
         LIMIT $3
         FOR UPDATE OF e SKIP LOCKED",
        orphaned("e"),
        overdue = overdue(4),
        held = crate::hold_rows::HELD_EFFECT,
    );
    let chunk = SWEEP_CHUNK_EFFECTS as i64;
    let orphans = tx
        .all(
            &sql,
            &[&replica, &dead_before, &chunk, &sweep.overdue_before.0],
            orphan,
        )
        .await?;
    let (steps, mut report) = recovery::plan(&orphans, sweep);
    report.expired_replicas = expired;
    let mut changes = Vec::with_capacity(steps.len());
    let mut taken = Vec::new();
    for step in steps {
        match step {
            Step::Change(change) => changes.push(*change),
            Step::TakeOver(orphan, entry) => taken.push((orphan, entry)),
        }
    }
    settle_all(tx, &changes).await?;
    claim_all(tx, taken, sweep).await?;
    if orphans.len() == SWEEP_CHUNK_EFFECTS {
        return Ok((report, false));
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
    Ok((report, true))
}

/// Makes orphaned approved effects the sweeping replica's, which dispatches them: a takeover,
/// under the next epoch.
async fn claim_all(
    tx: &Tx<'_>,
    taken: Vec<(&Orphan, AuditEntry)>,
    sweep: &Sweep,
) -> StoreResult<()> {
    if taken.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = taken.iter().map(|(o, _)| o.effect.as_str()).collect();
    tx.execute(
        "UPDATE effects SET owner = $1, fence = fence + 1 WHERE id = ANY($2)",
        &[&sweep.replica.as_str(), &ids],
    )
    .await?;
    for (_, entry) in taken {
        append(tx, &Actor::system(sweep.now), entry).await?;
    }
    Ok(())
}

#[async_trait]
impl Replicas for PostgresStore {
    async fn ready(&self) -> StoreResult<()> {
        let applied: i64 = in_transaction!(self, Mode::Read, |tx| async {
            let row = tx
                .query_first(
                    "SELECT COALESCE(MAX(version), 0) FROM steward_migrations",
                    &[],
                )
                .await?
                .ok_or_else(|| rows::corrupt("schema version", "no row"))?;
            col(&row, 0)
        })?;
        let known = super::schema::current_version();
        if applied == known {
            return Ok(());
        }
        Err(StoreError::Unavailable {
            message: format!(
                "the database schema is at version {applied}; this Steward serves version {known}"
            ),
            source: None,
        })
    }

    async fn heartbeat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<Heartbeat> {
        self.heartbeats.beat(replica, now).await
    }

    async fn recover(&self, sweep: &Sweep) -> StoreResult<RecoveryReport> {
        // The common case, nothing orphaned, is answered from a snapshot without the lock.
        if !in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT EXISTS (SELECT 1 FROM effects e WHERE e.state IN ('ready', 'dispatching')
                               AND ({} OR {}))
             OR EXISTS (SELECT 1 FROM idempotency i WHERE i.state = 'in_progress' AND {})
             OR EXISTS (SELECT 1 FROM replicas r WHERE r.id <> $1 AND NOT ({ALIVE}))",
                orphaned("e"),
                overdue(3),
                orphaned("i")
            );
            let row = tx
                .query_first(
                    &sql,
                    &[
                        &sweep.replica.as_str(),
                        &sweep.dead_before.0,
                        &sweep.overdue_before.0,
                    ],
                )
                .await?
                .ok_or_else(|| rows::corrupt("sweep check", "no row"))?;
            col(&row, 0)
        })? {
            return Ok(RecoveryReport::default());
        }
        // One transaction per chunk of orphans, each first removing the dead replicas' rows;
        // the last (a chunk short of full) also releases their request markers.
        let mut report = RecoveryReport::default();
        loop {
            let (chunk, done) = in_transaction!(self, Mode::Write, |tx| sweep_chunk(&tx, sweep))?;
            report
                .dispatching_to_unknown
                .extend(chunk.dispatching_to_unknown);
            report.ready_to_failed.extend(chunk.ready_to_failed);
            report
                .approved_to_dispatch
                .extend(chunk.approved_to_dispatch);
            report.requests_cleared += chunk.requests_cleared;
            report.expired_replicas.extend(chunk.expired_replicas);
            if done {
                return Ok(report);
            }
        }
    }
}
