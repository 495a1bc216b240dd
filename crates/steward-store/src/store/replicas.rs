//! Replicas and recovery: which server processes are alive, and taking over the work of those
//! that are not.

use crate::error::StoreResult;
use crate::records::{RecoveryReport, Sweep};
use async_trait::async_trait;
use steward_core::{Millis, ReplicaId};

/// What a heartbeat found of the replica's registration, its lease on the work it owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The registration was there: the lease is renewed, nothing this replica owns was taken
    /// over since its previous heartbeat.
    Renewed,
    /// There was no registration: this is the replica's first heartbeat, or a recovery sweep
    /// took it for dead, took over its work and removed it (the replica paused or lost the
    /// database past its lease). Registered afresh. A replica that had registered before is
    /// fenced: what it held is no longer its (its late writes are refused), and it starts anew.
    Registered,
}

/// Heartbeats and the recovery sweep. In-flight work records the replica that owns it; these
/// two decide when that replica is dead and hand its work on exactly once.
#[async_trait]
pub trait Replicas: Send + Sync {
    /// Records that `replica` is alive at `now`, registering it on its first call (and again
    /// after a sweep removed it), and says which ([`Heartbeat`]), in one statement. Other
    /// replicas treat it as dead, and take over its in-flight work, once its last heartbeat is
    /// older than their lease (`Sweep::lease`). It never waits for the write lock, so a queue
    /// of writers cannot make a live replica look dead.
    async fn heartbeat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<Heartbeat>;

    /// A recovery sweep, in one transaction, taking over the work of dead replicas (see
    /// [`Sweep`] for which work is orphaned): every orphaned effect left `dispatching` becomes
    /// `unknown` with evidence saying why (nothing is re-sent); every orphaned effect left
    /// `ready` with no attempt becomes `failed` as provably never sent, unless an approval
    /// released it (those become the sweeping replica's and are listed for it to dispatch once);
    /// orphaned in-flight request markers are cleared; dead replicas' registrations are
    /// removed. Concurrent sweeps from several replicas take each piece exactly once. Work
    /// owned by a live replica is never touched, except an attempt overdue by more than the
    /// lease (its deadline older than `Sweep::overdue_before`), which becomes `unknown` whoever
    /// owns it. Every effect a sweep settles or takes moves to the next epoch, and becomes the
    /// sweeping replica's: the previous owner's late writes are refused (`StoreError::Fenced`). Run at start-up before the server accepts
    /// requests, and then periodically.
    async fn recover(&self, sweep: &Sweep) -> StoreResult<RecoveryReport>;

    /// Whether this store can serve now: the database answers a read and its schema is the
    /// version this build knows (`GET /readyz`). It takes no lock and writes nothing.
    async fn ready(&self) -> StoreResult<()>;
}
