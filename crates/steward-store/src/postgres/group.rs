//! Group commit: the durable steps of concurrent requests (the invoke's `submit_and_begin` or,
//! gated, `submit`, its answer, an approval's decision and the attempt it releases) run as members of one
//! transaction, committed once for all of them (docs/DECISIONS.md, "Group commit on
//! PostgreSQL"). Only with `STEWARD_PG_GROUP_COMMIT=on` (see [`enabled`]); otherwise `in_group!`
//! runs each step as a transaction of its own.
//!
//! A store has [`LANES`] lanes. A lane holds at most one open batch: a pooled connection in a
//! transaction. A member takes a lane (a free one if there is one, else it queues on the lane
//! with the fewest waiting), runs its work (the batch's first member right after the batch's
//! `BEGIN`, sent with its first statement; every later one under a savepoint of its own,
//! `SAVEPOINT s<n>`, sent likewise), and leaves:
//!
//! - its work failed: `ROLLBACK TO SAVEPOINT` undoes it, and only it, locks included; the
//!   others' work stands (the first member's is undone by a `ROLLBACK`: there is nothing else
//!   in the transaction yet). If that rollback fails, the batch is abandoned (its connection
//!   closed, so nothing of it commits) and every member runs again.
//! - a member after the first waits for a lock [`conn::MEMBER_LOCK_WAIT_MS`] at most
//!   (`SET LOCAL lock_timeout`, sent with its savepoint): its batch holds the earlier members'
//!   rows, which the lock's holder may be waiting for. One that gives up is rolled back to its
//!   savepoint and, once its batch ended, runs again as a transaction of its own.
//! - then, when no other member is queued on the lane or the batch has [`BATCH_MEMBERS_MAX`]
//!   members, it hands the batch to a commit task (spawned, so that a cancelled request cannot
//!   leave a `COMMIT` half sent) and the lane is free for the next batch. Otherwise it leaves
//!   the batch open for the member queued behind it, which leaves it the same way: a batch
//!   gathers the members that arrive while it runs. A member that waited [`BATCH_WAIT_MS`]
//!   for an open batch commits it itself (the member queued behind may have been cancelled).
//!
//! Every member that sent a statement waits for its batch's commit before it returns, even a
//! failed one (what it read may be an earlier member's uncommitted write): committed, it
//! returns its own result; rolled back, it runs again from the start (like a deadlock's
//! victim, up to [`super::conn::ATTEMPTS_MAX`] times); unanswered, it is `CommitUnknown` like
//! any unanswered `COMMIT`. So no member's step is acknowledged, and no provider call made
//! after it, before the commit that holds it is durable.
//!
//! A member cancelled while its work runs (its request dropped) poisons its batch: the batch
//! is closed without a commit, and the others run again.
//!
//! Members of one batch run one after another on one connection, each with a fresh snapshot
//! per statement at READ COMMITTED that also sees the batch's earlier members: the batch is the
//! serial run of its members, committed whole or not at all.

use super::conn::{self, Conn, Mode, PendingAudit, RoundTrips, Savepoint, Tx};
use crate::error::{StoreError, StoreResult};
use deadpool_postgres::Pool;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Mutex, OwnedMutexGuard};

/// Open batches a store keeps at once, each on a connection of its own pool: how many members
/// run their statements at the same time. Half the pool: a lane whose batch is committing
/// opens the next batch on another connection, so the lanes use up to twice their number, and
/// a member only queues (joining the batch of the member ahead of it) when that many run
/// already, that is when its step would have waited for a pooled connection anyway. Then
/// batching merges commits without serializing work that could have run side by side.
const LANES: usize = conn::POOL_CONNECTIONS_MAX / 2;
/// Members of one batch at most. Each member that writes is a subtransaction; PostgreSQL keeps
/// up to 64 subtransaction ids of a transaction in shared memory, past which every other
/// backend's snapshots get slower.
pub(crate) const BATCH_MEMBERS_MAX: usize = 32;
/// How long a member waits for its open batch to be committed by the member queued behind it
/// before it commits the batch itself, in milliseconds.
const BATCH_WAIT_MS: u64 = 20;

/// Whether steps run as members of a group commit: only with `STEWARD_PG_GROUP_COMMIT=on`.
/// Off by default: on a loaded 2-core machine, six back-to-back pairs did not show it never
/// slower than one transaction per step (workload (a) at c=64 from 0.69x to 1.73x of "off"),
/// though it cuts the commits per invoke by 40 % (docs/DECISIONS.md, "Group commit on
/// PostgreSQL"). Off, each step is a transaction of its own, as before issue #27.
pub(crate) fn enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| {
        matches!(
            std::env::var("STEWARD_PG_GROUP_COMMIT")
                .as_deref()
                .map(str::trim),
            Ok("on")
        )
    })
}

/// How a batch ended.
#[derive(Debug, Clone)]
enum Outcome {
    Committed,
    /// Nothing of it was committed.
    RolledBack(String),
    /// The `COMMIT` was sent and not answered (see `conn::commit_failed`).
    Unknown(String),
}

/// The lanes of one store.
pub(crate) struct Group {
    lanes: Vec<Arc<Lane>>,
    batches: AtomicU64,
    committed: Arc<Committed>,
}

/// Batches committed so far, and the members they held: for tests and profiling.
#[derive(Debug, Default)]
pub(crate) struct Committed {
    batches: AtomicU64,
    members: AtomicU64,
}

impl Group {
    /// Batches committed so far, and the members they held.
    pub(crate) fn committed(&self) -> (u64, u64) {
        (
            self.committed.batches.load(Ordering::Relaxed),
            self.committed.members.load(Ordering::Relaxed),
        )
    }
}

impl Default for Group {
    fn default() -> Self {
        Group {
            lanes: (0..LANES)
                .map(|_| {
                    Arc::new(Lane {
                        slot: Arc::new(Mutex::new(None)),
                        waiting: AtomicUsize::new(0),
                    })
                })
                .collect(),
            batches: AtomicU64::new(0),
            committed: Arc::default(),
        }
    }
}

struct Lane {
    slot: Arc<Mutex<Option<Batch>>>,
    /// Members queued for the slot.
    waiting: AtomicUsize,
}

/// An open batch: a connection in a transaction, and what its members left for the commit.
struct Batch {
    id: u64,
    conn: Conn,
    /// Savepoints opened so far.
    savepoints: u32,
    /// Members that sent a statement (or queued an audit event).
    members: usize,
    audit: Vec<PendingAudit>,
    outcome: Arc<watch::Sender<Option<Outcome>>>,
    /// Set just before the `COMMIT` is sent: a batch dropped after it is `Unknown`.
    commit_sent: Arc<AtomicBool>,
    committed: Arc<Committed>,
}

impl Batch {
    /// Ends the batch without a commit: its connection is closed, which rolls it back.
    fn abandon(self, why: String) {
        let Batch { conn, outcome, .. } = self;
        drop(conn);
        outcome.send_replace(Some(Outcome::RolledBack(why)));
    }

    /// Commits the batch in a task of its own, which a cancelled request cannot stop.
    fn commit(self) {
        tokio::spawn(async move {
            let Batch {
                conn,
                members,
                audit,
                outcome,
                commit_sent,
                committed,
                ..
            } = self;
            let open = conn.open.load(Ordering::Relaxed);
            let result = if !open && audit.is_empty() {
                Outcome::Committed
            } else {
                let tx = Tx::on(&conn, Mode::WriteConcurrent, open, None);
                commit_sent.store(true, Ordering::Relaxed);
                match tx.commit_with(audit).await {
                    Ok(()) => Outcome::Committed,
                    Err(StoreError::CommitUnknown { message, .. }) => Outcome::Unknown(message),
                    Err(other) => Outcome::RolledBack(other.to_string()),
                }
            };
            if matches!(result, Outcome::Committed) {
                committed.batches.fetch_add(1, Ordering::Relaxed);
                committed
                    .members
                    .fetch_add(members as u64, Ordering::Relaxed);
            }
            // Dropped before the members hear: a connection still in its transaction (a failed
            // commit) is closed, not pooled.
            drop(conn);
            outcome.send_replace(Some(result));
        });
    }
}

/// A queued member, counted in its lane's `waiting` until it holds the slot or is dropped.
struct Queued<'a>(&'a Lane);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One member of a batch, holding its lane while its work runs.
pub(crate) struct Member {
    lane: Arc<Lane>,
    slot: Option<OwnedMutexGuard<Option<Batch>>>,
    savepoint: Savepoint,
    batch: u64,
    outcome: watch::Receiver<Option<Outcome>>,
    commit_sent: Arc<AtomicBool>,
    /// Set while the member's work may have statements in the batch that are neither rolled
    /// back nor handed over.
    working: bool,
}

/// Whether a member whose work failed runs again, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Again {
    /// Its error is its result.
    No,
    /// In a later batch (a deadlock's victim, a lost race for a unique key).
    InBatch,
    /// As a transaction of its own: it gave up waiting for a lock
    /// ([`conn::MEMBER_LOCK_WAIT_MS`]), which in a batch it may wait for in a cycle.
    Alone,
}

/// How a member ended, once its batch did.
pub(crate) enum Next<T> {
    Done(StoreResult<T>),
    /// Runs again in a later batch.
    Retry(StoreError),
    /// Runs again as a transaction of its own.
    RetryAlone(StoreError),
}

/// How a member's work ended, before its batch's commit.
pub(crate) enum Left<T> {
    /// Nothing was sent: the result stands alone.
    Alone(StoreResult<T>, bool),
    /// Sent: the result holds once the batch commits; how an error is retried.
    Joined(StoreResult<T>, Again, Vec<PendingAudit>),
    /// The member's work could not be undone: the batch must be abandoned.
    Broken(StoreError),
}

impl Group {
    /// Joins a batch: waits for a lane, opening a batch on it (a pooled connection) if it has
    /// none.
    pub(crate) async fn join(
        &self,
        pool: &Pool,
        round_trips: &Arc<RoundTrips>,
    ) -> StoreResult<Member> {
        let free = self
            .lanes
            .iter()
            .find_map(|lane| Some((lane.clone(), lane.slot.clone().try_lock_owned().ok()?)));
        let (lane, mut slot) = match free {
            Some(found) => found,
            None => {
                let lane = self
                    .lanes
                    .iter()
                    .min_by_key(|l| l.waiting.load(Ordering::Relaxed))
                    .expect("a group has lanes")
                    .clone();
                lane.waiting.fetch_add(1, Ordering::Relaxed);
                let queued = Queued(&lane);
                let slot = lane.slot.clone().lock_owned().await;
                drop(queued);
                (lane, slot)
            }
        };
        if slot.is_none() {
            let conn = Conn::get(pool, round_trips).await?;
            *slot = Some(Batch {
                id: self.batches.fetch_add(1, Ordering::Relaxed),
                conn,
                savepoints: 0,
                members: 0,
                audit: Vec::new(),
                outcome: Arc::new(watch::channel(None).0),
                commit_sent: Arc::new(AtomicBool::new(false)),
                committed: self.committed.clone(),
            });
        }
        let batch = slot.as_mut().expect("a batch was opened");
        batch.savepoints += 1;
        let savepoint = Savepoint {
            number: batch.savepoints,
            begin: !batch.conn.open.load(Ordering::Relaxed),
        };
        Ok(Member {
            batch: batch.id,
            outcome: batch.outcome.subscribe(),
            commit_sent: batch.commit_sent.clone(),
            lane,
            slot: Some(slot),
            savepoint,
            working: false,
        })
    }
}

impl Member {
    /// The member's transaction: its statements run under its savepoint in the batch's.
    pub(crate) fn tx(&mut self) -> Tx<'_> {
        self.working = true;
        let batch = self
            .slot
            .as_ref()
            .and_then(|s| s.as_ref())
            .expect("a member holds its batch");
        Tx::on(
            &batch.conn,
            Mode::WriteConcurrent,
            false,
            Some(self.savepoint),
        )
    }

    /// Leaves the batch with the result of the member's work and waits for the batch's commit.
    pub(crate) async fn leave<T>(mut self, left: Left<T>) -> Next<T> {
        self.working = false;
        let mut slot = self.slot.take().expect("a member holds its batch");
        let joined = match left {
            Left::Alone(result, retryable) => Err((result, retryable)),
            Left::Broken(err) => {
                if let Some(batch) = slot.take() {
                    batch.abandon(format!("a member's work could not be undone: {err}"));
                }
                return Next::Retry(err);
            }
            Left::Joined(result, again, audit) => {
                let batch = slot.as_mut().expect("a member holds its batch");
                batch.members += 1;
                batch.audit.extend(audit);
                Ok((result, again))
            }
        };
        // The last member in (none queued behind it on the lane), or the one that fills the
        // batch, commits it; an idle connection goes back to the pool.
        if let Some(batch) = slot.take() {
            let last = self.lane.waiting.load(Ordering::Relaxed) == 0
                || batch.members >= BATCH_MEMBERS_MAX;
            if !last {
                *slot = Some(batch);
            } else if batch.members == 0 && !batch.conn.open.load(Ordering::Relaxed) {
                drop(batch);
            } else {
                batch.commit();
            }
        }
        drop(slot);
        let (result, again) = match joined {
            Ok(joined) => joined,
            Err((Err(err), true)) => return Next::Retry(err),
            Err((result, _)) => return Next::Done(result),
        };
        let outcome = self.outcome().await;
        match (result, outcome) {
            (Ok(value), Outcome::Committed) => Next::Done(Ok(value)),
            (Err(err), Outcome::Committed) => match again {
                Again::No => Next::Done(Err(err)),
                Again::InBatch => Next::Retry(err),
                Again::Alone => Next::RetryAlone(err),
            },
            (_, Outcome::RolledBack(message)) => Next::Retry(StoreError::Unavailable {
                message: format!("the batch this step was in was rolled back: {message}"),
                source: None,
            }),
            (_, Outcome::Unknown(message)) => Next::Done(Err(StoreError::CommitUnknown {
                message,
                source: None,
            })),
        }
    }

    /// Waits for the batch's end; after [`BATCH_WAIT_MS`] commits it, if it is still open.
    async fn outcome(&mut self) -> Outcome {
        let wait = Duration::from_millis(BATCH_WAIT_MS);
        if let Ok(outcome) = tokio::time::timeout(wait, ended(&mut self.outcome)).await {
            return outcome.unwrap_or_else(|| self.dropped());
        }
        // The lane's slot may be held by a member of a later batch (this one ended meanwhile),
        // whose work can wait for locks: the end of this batch is not to wait for it.
        let lane = self.lane.clone();
        tokio::select! {
            outcome = ended(&mut self.outcome) => return outcome.unwrap_or_else(|| self.dropped()),
            mut slot = lane.slot.clone().lock_owned() => {
                if slot.as_ref().is_some_and(|b| b.id == self.batch) {
                    slot.take().expect("checked").commit();
                }
            }
        }
        ended(&mut self.outcome)
            .await
            .unwrap_or_else(|| self.dropped())
    }

    /// A batch dropped without a word: a panic or a runtime shutting down.
    fn dropped(&self) -> Outcome {
        let message = "the batch ended without an outcome".to_string();
        if self.commit_sent.load(Ordering::Relaxed) {
            Outcome::Unknown(message)
        } else {
            Outcome::RolledBack(message)
        }
    }
}

async fn ended(outcome: &mut watch::Receiver<Option<Outcome>>) -> Option<Outcome> {
    outcome
        .wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|o| o.clone())
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.working {
            // Cancelled while its work ran: what it sent can be neither kept nor undone here.
            if let Some(batch) = self.slot.as_mut().and_then(|s| s.take()) {
                batch.abandon("a member was cancelled while its work ran".into());
            }
        }
    }
}

/// Ends a member's work: a failure after a statement was sent is rolled back to the member's
/// savepoint; what it queued for the audit log goes to the batch on success.
pub(crate) async fn close<T>(tx: Tx<'_>, result: StoreResult<T>) -> Left<T> {
    let audit = tx.take_audit();
    let retryable = tx.retryable();
    if !tx.sent() && audit.is_empty() {
        return Left::Alone(result, retryable);
    }
    let again = match (tx.lock_timed_out(), retryable) {
        (true, _) => Again::Alone,
        (false, true) => Again::InBatch,
        (false, false) => Again::No,
    };
    let result = match result {
        // Work that went on after a statement failed (none does) leaves its savepoint aborted.
        Ok(_) if tx.lock_timed_out() => Err(StoreError::Unavailable {
            message: "a lock wait timed out".into(),
            source: None,
        }),
        other => other,
    };
    match result {
        Ok(value) => Left::Joined(Ok(value), Again::No, audit),
        Err(err) if !tx.sent() => Left::Alone(Err(err), retryable),
        Err(err) => {
            // The batch's first member undoes the whole transaction: it holds no other
            // member's work yet, and the next member begins a new one.
            let opened = tx.savepoint_opened();
            let undo = match tx.connection().client() {
                Ok(client) => {
                    tx.count_round_trip();
                    let sql = match opened {
                        Some(number) => format!("ROLLBACK TO SAVEPOINT s{number}"),
                        None => "ROLLBACK".to_string(),
                    };
                    client.batch_execute(&sql).await.map_err(conn::unavailable)
                }
                Err(e) => Err(e),
            };
            match undo {
                Ok(()) => {
                    if opened.is_none() {
                        tx.connection().open.store(false, Ordering::Relaxed);
                    }
                    Left::Joined(Err(err), again, Vec::new())
                }
                Err(_) => Left::Broken(err),
            }
        }
    }
}

/// Runs `$body`, a future using the transaction `$tx`, as one member of a group commit of
/// `$store` (see the module doc): `Ok` only once the batch holding it committed. A member that
/// ends in [`Next::Retry`] runs again from the start, in a later batch, and one that ends in
/// [`Next::RetryAlone`] as a transaction of its own, up to [`conn::ATTEMPTS_MAX`] times in all.
/// With group commit off, `$body` runs as a transaction of its own (`in_transaction!`).
macro_rules! in_group {
    ($store:expr, |$tx:ident| $body:expr) => {{
        let mut attempt = 1;
        let mut alone = !$crate::postgres::group::enabled();
        loop {
            if alone {
                break $crate::postgres::conn::in_transaction!(
                    $store,
                    $crate::postgres::conn::Mode::WriteConcurrent,
                    |$tx| $body
                );
            }
            let mut member = $store.group.join(&$store.pool, &$store.round_trips).await?;
            let left = {
                let $tx = member.tx();
                let result = $body.await;
                $crate::postgres::group::close($tx, result).await
            };
            match member.leave(left).await {
                $crate::postgres::group::Next::Done(result) => break result,
                $crate::postgres::group::Next::Retry(err)
                | $crate::postgres::group::Next::RetryAlone(err)
                    if attempt >= $crate::postgres::conn::ATTEMPTS_MAX =>
                {
                    break Err(err)
                }
                $crate::postgres::group::Next::Retry(_) => attempt += 1,
                $crate::postgres::group::Next::RetryAlone(_) => {
                    attempt += 1;
                    alone = true;
                }
            }
        }
    }};
}
pub(crate) use in_group;
