//! This process as one replica among several sharing one store.
//!
//! Each `serve` process picks a fresh [`ReplicaId`] at start. Everything it puts in flight (an
//! accepted effect, an attempt, an approval it released, an in-flight `Idempotency-Key` marker)
//! records that id as its owner. On a shared store (PostgreSQL) the replica heartbeats every
//! [`heartbeat_every`] and sweeps every heartbeat: work whose owner has not heartbeated for a
//! lease ([`REPLICA_LEASE_MS_DEFAULT`]) is taken over by exactly one live replica
//! (`Store::recover`): an attempt in flight becomes `unknown` (nothing is re-sent), accepted but
//! unattempted work `failed` (provably never sent), approved work is dispatched once. Approval
//! changes committed by any replica wake this replica's long polls (`Store::approval_events`).
//!
//! The embedded store serves one process at a time: [`lock_data_dir`] makes a second `serve` on
//! the same data directory fail at start, so at start-up every earlier replica of that store is
//! dead by construction and the first sweep takes over everything in flight (`Sweep::sole`).

pub use crate::lease::Lease;
use crate::start_error::StartError;
use crate::state::AppState;
use std::fs::{File, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};
use steward_core::{EnvironmentId, InvocationId, ReplicaId};
use steward_store::{ApprovalEvent, RecoveryReport, Sweep};
use tokio::sync::broadcast;

/// How long a replica may go without a heartbeat before the others take it for dead and take
/// over its in-flight work, in milliseconds. Five heartbeats: a replica must miss several in a
/// row (a stalled process, a lost network) before it is declared dead, and a dead replica's
/// attempts are still marked `unknown` within seconds, well inside the SDK's 30 s timeout.
pub const REPLICA_LEASE_MS_DEFAULT: u64 = 5_000;
/// How often a replica heartbeats and sweeps, with the default lease, in milliseconds: a fifth
/// of the lease (see [`heartbeat_every`] for other leases).
pub const REPLICA_HEARTBEAT_MS: u64 = 1_000;
/// The shortest lease `--lease-ms` accepts, in milliseconds: tests use short leases, but below
/// this a scheduling hiccup would already look like a dead replica.
pub const REPLICA_LEASE_MS_MIN: u64 = 100;

/// The heartbeat (and sweep) period for `lease`: the same fraction of it as the defaults.
pub fn heartbeat_every(lease: Duration) -> Duration {
    lease * REPLICA_HEARTBEAT_MS as u32 / REPLICA_LEASE_MS_DEFAULT as u32
}

/// The lock file in the data directory that `serve` holds while it serves the embedded store.
pub const LOCK_FILE: &str = "steward.lock";

/// Takes the data directory's exclusive lock, or fails if another `serve` holds it. Held until
/// the returned file is dropped (the process ends, however it ends).
pub fn lock_data_dir(data_dir: &Path) -> Result<File, StartError> {
    let io_error = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| StartError::DataDir {
            action,
            path,
            source,
        }
    };
    // Readable by its owner only: it holds the database and the vault's master key.
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(data_dir)
        .map_err(io_error("create", data_dir))?;
    let path = data_dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_error("open", &path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(StartError::DataDirLocked {
            data_dir: data_dir.to_path_buf(),
            lock_file: path,
        }),
        Err(TryLockError::Error(e)) => Err(io_error("lock", &path)(e)),
    }
}

/// Logs what a sweep did and dispatches, once each, the approved work it took over.
pub(crate) fn took_over(state: &AppState, report: &RecoveryReport) {
    if !report.dispatching_to_unknown.is_empty()
        || !report.ready_to_failed.is_empty()
        || !report.approved_to_dispatch.is_empty()
    {
        // `unknown=N ` is what `steward bench` reads back from the start-up log.
        tracing::warn!(
            unknown = report.dispatching_to_unknown.len(),
            failed_not_sent = report.ready_to_failed.len(),
            approved_to_dispatch = report.approved_to_dispatch.len(),
            dead_replicas = ?report.expired_replicas,
            "took over in-flight work left by a stopped Steward process; nothing was re-sent"
        );
    }
    dispatch_approved(state, &report.approved_to_dispatch);
}

/// Dispatches, once each and in their own tasks, approved invocations this replica took over.
fn dispatch_approved(state: &AppState, invocations: &[(EnvironmentId, InvocationId)]) {
    for (env, id) in invocations {
        let (state, env, id) = (state.clone(), env.clone(), id.clone());
        tokio::spawn(async move {
            match state.store.invocation(&env, &id).await {
                Ok(Some(inv)) => {
                    tracing::info!(invocation = %id, "dispatching approved work taken over");
                    if let Err(e) = crate::dispatch::dispatch(&state, &inv).await {
                        tracing::error!(invocation = %inv.id, error = %e, "approved dispatch failed");
                    }
                }
                Ok(None) => tracing::error!(invocation = %id, "approved invocation vanished"),
                Err(e) => {
                    tracing::error!(invocation = %id, error = %e, "cannot read approved invocation")
                }
            }
        });
    }
}

/// Heartbeats forever, every [`heartbeat_every`]. Runs on its own, never behind a sweep or a
/// write, so that a busy replica still looks alive; a slow heartbeat delays the next one, it is
/// never cancelled (the store bounds it). Each heartbeat that commits renews [`Lease`]. Warns
/// when this replica went longer than a lease without a heartbeat, and once more, naming it
/// fenced, when it finds its work was taken over meanwhile: it has rejoined (registered
/// afresh), and what it held is dropped.
pub(crate) async fn heartbeat(state: AppState, lease: Duration) {
    let every = heartbeat_every(lease);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Instant::now();
    loop {
        tick.tick().await;
        let started = Instant::now();
        match state
            .store
            .heartbeat(&state.replica, state.clock.now())
            .await
        {
            Ok(found) => {
                let gap = last.elapsed();
                if gap > lease {
                    tracing::warn!(
                        gap_ms = gap.as_millis() as u64,
                        lease_ms = lease.as_millis() as u64,
                        "this replica went longer than its lease without a heartbeat: other \
                         replicas may have marked its attempts in flight unknown; it sent \
                         nothing meanwhile"
                    );
                }
                if state.lease.renew(started, found) {
                    tracing::warn!(
                        replica = %state.replica,
                        generation = state.lease.generation(),
                        "fenced: another replica took this replica for dead and took over its \
                         work; its attempts begun before are dropped unsent and their late \
                         answers refused; rejoined with a fresh registration"
                    );
                }
                last = Instant::now();
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed; retrying"),
        }
    }
}

/// Sweeps forever, every [`heartbeat_every`]: takes over the work of replicas whose lease
/// expired, and attempts overdue by more than the lease whoever owns them. A replica that does
/// not hold its own lease skips its turn: it may be the one taken for dead.
pub(crate) async fn sweep(state: AppState, lease: Duration) {
    let mut tick = tokio::time::interval(heartbeat_every(lease));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !state.lease.held() {
            continue;
        }
        let sweep = Sweep::lease(&state.replica, state.clock.now(), lease.as_millis() as i64);
        match state.store.recover(&sweep).await {
            Ok(report) => took_over(&state, &report),
            Err(e) => tracing::warn!(error = %e, "recovery sweep failed; retrying"),
        }
    }
}

/// Wakes this replica's long polls whenever any replica decides or expires an approval.
pub(crate) async fn forward_approval_events(
    state: AppState,
    mut events: broadcast::Receiver<ApprovalEvent>,
) {
    loop {
        match events.recv().await {
            // A lagged receiver missed some: waking everyone makes them read again.
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                state.approval_events.notify_waiters()
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// A fresh id for this process.
pub(crate) fn new_id() -> ReplicaId {
    ReplicaId::from_unique(&crate::clock::unique())
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_store::Heartbeat;

    #[test]
    fn the_heartbeat_is_a_fifth_of_the_lease() {
        assert_eq!(
            heartbeat_every(Duration::from_millis(REPLICA_LEASE_MS_DEFAULT)),
            Duration::from_millis(REPLICA_HEARTBEAT_MS)
        );
        assert_eq!(
            heartbeat_every(Duration::from_millis(500)),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn a_lease_runs_from_its_last_heartbeat_and_a_fresh_registration_moves_its_generation() {
        let length = Duration::from_secs(60);
        let lease = Lease::shared(length, Instant::now() - Duration::from_secs(61));
        assert!(!lease.held(), "a heartbeat older than the lease");
        assert!(!lease.renew(Instant::now(), Heartbeat::Renewed));
        assert!(lease.held());
        assert_eq!(lease.generation(), 0);
        assert!(lease.renew(Instant::now(), Heartbeat::Registered), "fenced");
        assert_eq!(lease.generation(), 1);
        assert!(Lease::unlimited().held());
    }

    #[test]
    fn a_second_lock_on_one_data_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock_data_dir(dir.path()).expect("the first lock");
        let second = lock_data_dir(dir.path()).expect_err("the second lock");
        assert!(second.to_string().contains("already serving"), "{second:#}");
        drop(first);
        lock_data_dir(dir.path()).expect("free again once the first is dropped");
    }
}
