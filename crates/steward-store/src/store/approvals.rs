//! Approval requests and the decisions on them.

use crate::error::StoreResult;
use crate::records::{
    ApprovalEvent, ApprovalFilter, ApprovalRecord, DecideOutcome, NewApproval, Page,
};
use async_trait::async_trait;
use steward_core::{ApprovalId, Decision, EnvironmentId, KeyId, Millis, ReplicaId};
use tokio::sync::broadcast;

/// Approvals: custom requests (gated invocations create theirs in `Effects::submit`), the
/// decisions that settle them and release or stop their parked effects, expiry, and the
/// announcements that wake long polls on every replica.
#[async_trait]
pub trait Approvals: Send + Sync {
    /// Creates a custom approval request (gated invocations create theirs in `submit`).
    async fn create_approval(
        &self,
        env: &EnvironmentId,
        approval: &NewApproval,
        requested_by: &KeyId,
        now: Millis,
    ) -> StoreResult<ApprovalRecord>;
    async fn approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>>;
    async fn list_approvals(
        &self,
        env: &EnvironmentId,
        filter: &ApprovalFilter,
    ) -> StoreResult<Page<ApprovalRecord>>;
    /// Casts one key's decision in one transaction: the tally, the approval's status and, when
    /// the approval settles, the parked effect's transition. Concurrent approvals of one request
    /// serialize here, so exactly one of them gets `ready`; the released effect is owned by
    /// `replica`, which dispatches it. Once it returns, a recovery sweep that finds `replica`
    /// dead finds the approved effect `ready` and hands it to exactly one live replica to
    /// dispatch once (see `recover`). A shared store announces the change
    /// (`approval_events`) when it commits.
    #[allow(clippy::too_many_arguments)] // one decision: who, what, why, when, where
    async fn decide_approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
        key: &KeyId,
        decision: Decision,
        note: Option<&str>,
        now: Millis,
        replica: &ReplicaId,
    ) -> StoreResult<DecideOutcome>;
    /// Expires every pending approval whose expiry has passed; their effects never run. A
    /// conditional update (`status = 'pending'` and expiry passed) behind the write lock: when
    /// several replicas run it at once, each approval expires once and the others find nothing.
    async fn expire_approvals(&self, now: Millis) -> StoreResult<Vec<ApprovalId>>;
    /// Announcements of approval changes committed by any process sharing this store: a
    /// receiver that gets an event for every decision and expiry from the moment the store
    /// listens (an [`ApprovalEvent::Resync`] says when that is, and when it listens again after
    /// losing its connection). `None` for a store that only one process serves (the embedded
    /// store), whose server wakes its long polls itself. Must be called inside a tokio runtime.
    fn approval_events(&self) -> Option<broadcast::Receiver<ApprovalEvent>> {
        None
    }
}
