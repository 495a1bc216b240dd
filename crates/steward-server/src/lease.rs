//! This replica's hold on its own lease, apart from the loops that renew it (`replica.rs`), so
//! that `AppState` can hold it without importing them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use steward_store::Heartbeat;
use tokio::sync::Notify;

/// This replica's hold on its own lease, as its heartbeats find it (docs/DECISIONS.md, "Fencing
/// tokens").
///
/// The other replicas take this one for dead once its last heartbeat is older than the lease.
/// So this one counts its lease from the start of its last heartbeat that committed: once that
/// is older than the lease (a pause, a lost database), it may already be taken for dead, and it
/// sends no provider request until a heartbeat commits again (`dispatch/hold.rs`). A heartbeat
/// that finds its registration gone (`Heartbeat::Registered` after the first) means a sweep
/// took this replica for dead and took over its work: the lease's generation moves on, and
/// every attempt begun under an earlier generation is dropped unsent.
#[derive(Debug)]
pub struct Lease {
    /// How long the lease runs from a heartbeat; `None` when nothing can take it over (the
    /// embedded store: one process at a time).
    length: Option<Duration>,
    /// When the last heartbeat that committed started.
    renewed: Mutex<Instant>,
    /// How many times this replica found its registration gone and registered afresh.
    generation: AtomicU64,
    /// Woken at each heartbeat that commits.
    renewals: Notify,
}

impl Lease {
    /// A lease nothing takes over: the embedded store, in-process tests and simulations.
    pub fn unlimited() -> Self {
        Self::starting(None, Instant::now())
    }

    /// A lease of `length` on a shared store, renewed by a heartbeat that started at `at`.
    pub fn shared(length: Duration, at: Instant) -> Self {
        Self::starting(Some(length), at)
    }

    fn starting(length: Option<Duration>, at: Instant) -> Self {
        Self {
            length,
            renewed: Mutex::new(at),
            generation: AtomicU64::new(0),
            renewals: Notify::new(),
        }
    }

    /// Whether the lease runs now: the last heartbeat that committed started less than a lease
    /// ago.
    pub fn held(&self) -> bool {
        match self.length {
            None => true,
            Some(length) => self.renewed_at().elapsed() < length,
        }
    }

    /// Whether anything can take this replica's work over (a shared store).
    pub fn is_shared(&self) -> bool {
        self.length.is_some()
    }

    /// The generation now: it moves on when this replica finds it was fenced.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Waits at most `within` for the lease to be held again; whether it is.
    pub async fn held_within(&self, within: Duration) -> bool {
        let until = Instant::now() + within;
        loop {
            // Armed before the check, so a renewal in between is not missed.
            let renewed = self.renewals.notified();
            if self.held() {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, renewed).await.is_err() {
                return self.held();
            }
        }
    }

    fn renewed_at(&self) -> Instant {
        *self
            .renewed
            .lock()
            .expect("the lease's clock is never poisoned")
    }

    /// Records a heartbeat that started at `at` and committed with `found`. Answers true when
    /// it finds this replica fenced (its registration was removed since its last heartbeat).
    pub(crate) fn renew(&self, at: Instant, found: Heartbeat) -> bool {
        let fenced = found == Heartbeat::Registered;
        if fenced {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        let mut renewed = self
            .renewed
            .lock()
            .expect("the lease's clock is never poisoned");
        *renewed = (*renewed).max(at);
        drop(renewed);
        self.renewals.notify_waiters();
        fenced
    }
}
