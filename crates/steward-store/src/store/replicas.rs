//! Replicas and recovery: which server processes are alive, and taking over the work of those
//! that are not.

use crate::error::StoreResult;
use crate::records::{RecoveryReport, Sweep};
use async_trait::async_trait;
use steward_core::{Millis, ReplicaId};

/// Heartbeats and the recovery sweep. In-flight work records the replica that owns it; these
/// two decide when that replica is dead and hand its work on exactly once.
#[async_trait]
pub trait Replicas: Send + Sync {
    /// Records that `replica` is alive at `now`, registering it on its first call. Other
    /// replicas treat it as dead, and take over its in-flight work, once its last heartbeat is
    /// older than their lease (`Sweep::lease`). It never waits for the write lock, so a queue
    /// of writers cannot make a live replica look dead.
    async fn heartbeat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<()>;

    /// A recovery sweep, in one transaction, taking over the work of dead replicas (see
    /// [`Sweep`] for which work is orphaned): every orphaned effect left `dispatching` becomes
    /// `unknown` with evidence saying why (nothing is re-sent); every orphaned effect left
    /// `ready` with no attempt becomes `failed` as provably never sent, unless an approval
    /// released it (those become the sweeping replica's and are listed for it to dispatch once);
    /// orphaned in-flight request markers are cleared; dead replicas' registrations are
    /// removed. Concurrent sweeps from several replicas take each piece exactly once. Work
    /// owned by a live replica is never touched. Run at start-up before the server accepts
    /// requests, and then periodically.
    async fn recover(&self, sweep: &Sweep) -> StoreResult<RecoveryReport>;

    /// Whether this store can serve now: the database answers a read and its schema is the
    /// version this build knows (`GET /readyz`). It takes no lock and writes nothing.
    async fn ready(&self) -> StoreResult<()>;
}
