//! Approval requests and the decisions on them.

use crate::error::StoreResult;
use crate::records::{
    ApprovalEvent, ApprovalFilter, ApprovalRecord, DecideOutcome, Decided, DecisionRequest,
    FirstAttempt, NewApproval, Page, ReleaseContext, Withdrawal,
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
    /// the approval settles, the parked effect's transition. Concurrent decisions on one request
    /// serialize here, so exactly one of them gets `ready`, while decisions on different
    /// requests need not wait for each other; the released effect is owned by
    /// `replica`, which dispatches it. Once it returns, a recovery sweep that finds `replica`
    /// dead finds the approved effect `ready` and hands it to exactly one live replica to
    /// dispatch once (see `recover`). A shared store announces the change
    /// (`approval_events`) once it has committed.
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
    ) -> StoreResult<DecideOutcome> {
        let request = DecisionRequest {
            env_id: env.clone(),
            approval_id: id.clone(),
            key: key.clone(),
            decision,
            note: note.map(str::to_string),
            now,
            replica: replica.clone(),
        };
        Ok(self.decide_and_begin(&request, None).await?.outcome)
    }

    /// `decide_approval`, and when the decision releases the parked invocation and `first` is
    /// given, the released effect's first attempt in the same transaction: the impact
    /// reservation (`reserve_impact`), then `first.begin` (`change_effect` with
    /// `AttemptChange::Begin`, owned by the deciding replica). Write path step 3 for released
    /// work, in the decision's commit, with the same guarantees as each call: after `Begun`
    /// returns, the attempt is durable and owned, exactly as after `change_effect`, and a
    /// recovery sweep that finds its owner dead makes it `unknown`. A halted environment or a
    /// refusing limit leaves the released effect committed `ready` (owned by the deciding
    /// replica, with no attempt, and refused: with no reservation), as the separate calls
    /// would. A decision that does not release (a denial, an approval short of its count, an
    /// expired or settled approval, a self-decision) ignores `first`.
    ///
    /// `first` must be the attempt of the effect this approval parks (`ready -> dispatching`,
    /// `AttemptChange::Begin`), else `IllegalTransition` and nothing is written.
    async fn decide_and_begin(
        &self,
        request: &DecisionRequest,
        first: Option<&FirstAttempt>,
    ) -> StoreResult<Decided>;

    /// What a decision on approval `id` may release, in one read: the approval with its
    /// decisions and, for a gated invocation still parked, the invocation, its effect's
    /// provider idempotency key, the definition of its action version and that definition's
    /// secrets. `None` when no such approval exists in `env`. Read before deciding, so the
    /// released attempt can be prepared and begun with the decision (`decide_and_begin`).
    async fn release_context(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ReleaseContext>>;
    /// Withdraws pending approval `id` for the key that requested it (`requester`): in one
    /// transaction, the approval is denied with `decisionOrigin: withdrawn` (audited as that
    /// key's) and the effect it parks is rejected with evidence saying so, exactly as a denial
    /// does, so the invocation never runs and a later decision changes nothing. The row is
    /// locked first: a decision on it waits or is waited for, so either the decision or the
    /// withdrawal settles it, never both. An approval found run out is expired instead; a settled
    /// one is left as it is. `NotFound` when no such approval exists in `env`. A shared store
    /// announces the change (`approval_events`) once it has committed.
    async fn withdraw_approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
        requester: &KeyId,
        now: Millis,
    ) -> StoreResult<Withdrawal>;
    /// Expires every pending approval whose expiry has passed; their effects never run. Each
    /// approval's row is locked first (a decision on it waits, or is waited for), so when several
    /// replicas run it at once, each approval expires once and the others find nothing.
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
