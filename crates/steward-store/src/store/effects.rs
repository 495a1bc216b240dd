//! The invoke write path's records: invocations, their effects, attempts and evidence, and the
//! background reconciler's schedule.

use crate::error::StoreResult;
use crate::records::{
    Actor, EffectChange, EffectDetail, EffectFilter, EffectRecord, FirstAttempt, InvocationFilter,
    InvocationRecord, InvokeContext, NewEvidence, Page, ReconcileDue, Submission, SubmitOutcome,
    Submitted,
};
use async_trait::async_trait;
use steward_core::{
    ActionId, EffectId, EnvironmentId, IdempotencyKey, InvocationId, KeyId, Millis, OperationKey,
};

/// Invocations and effects: recording an invoke (the intent, then the attempt), every later
/// change of an effect's state (compare-and-set), its evidence, and the reads of both.
#[async_trait]
pub trait Effects: Send + Sync {
    /// Records an invoke request (write path step 3, the intent; alone for a parked, denied or
    /// unsendable request). In one transaction: the idempotency key is
    /// checked, the operation key is checked (at most one effect per environment, action and
    /// key, ever: enforced by a unique index, so concurrent submissions from any number of
    /// connections or replicas create one), and the invocation, its effect and its first
    /// evidence are inserted, with the `Idempotency-Key`'s record: in progress when the
    /// invocation starts `ready` (`finish_invoke_request` or the recorded answer marks it done),
    /// done at once when it starts parked or denied, since it is then its own answer. After
    /// `Created` returns, the effect will be found on restart.
    async fn submit(&self, submission: &Submission) -> StoreResult<SubmitOutcome>;

    /// What an invoke reads before deciding anything, in one read: the caller (as `caller`
    /// finds it by `token_hash` at `now`), and in the caller's environment the action by id or
    /// name, the policies, the action's secrets, and the request the caller already recorded
    /// under `idempotency_key`. `None` when the key is missing or unusable at `now`, or its
    /// environment does not exist.
    async fn invoke_context(
        &self,
        token_hash: &str,
        now: Millis,
        action: &str,
        idempotency_key: Option<&IdempotencyKey>,
    ) -> StoreResult<Option<InvokeContext>>;

    /// `submit`, and when it is `Created`, the first attempt in the same transaction: the impact
    /// reservation (`reserve_impact`), then `first.begin` (`change_effect`). Write path step 3
    /// whole, in one commit, with the same guarantees as each call: after `Begun` returns, the attempt
    /// is durable and owned, exactly as after `change_effect` with `AttemptChange::Begin`. A
    /// refusal or a halt leaves the invocation committed `ready`, as the separate calls would.
    async fn submit_and_begin(
        &self,
        submission: &Submission,
        first: &FirstAttempt,
    ) -> StoreResult<Submitted>;

    /// Marks the request behind an invoke's `Idempotency-Key` (sent by `caller`) as answered, so
    /// a resend gets the invocation instead of `InProgress`.
    async fn finish_invoke_request(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()>;

    /// Moves an effect from `change.from` to `change.to` if and only if it is still in
    /// `change.from` (`StateConflict` otherwise), with the attempt, evidence and response that go
    /// with it. With `AttemptChange::Begin` this is write path step 3, the attempt: once it returns, the
    /// attempt is durable and owned by the `Begin`'s replica, and a recovery sweep that finds
    /// that replica dead (`recover`) makes the effect `unknown` rather than send again. The
    /// compare-and-set is what lets at most one of several replicas record the attempt of a
    /// `ready` effect.
    ///
    /// In the same transaction it settles the effect's impact reservations as the move's work
    /// says (`EffectChange::settles`), and it refuses `AttemptChange::Begin` with `Halted`
    /// while the environment is halted (nothing is recorded).
    async fn change_effect(&self, change: &EffectChange) -> StoreResult<()>;

    /// `change_effect`, answering with the effect's invocation as the same transaction leaves
    /// it: what the invoke path answers its caller with, without another read.
    async fn change_effect_and_read(&self, change: &EffectChange) -> StoreResult<InvocationRecord>;

    /// Appends evidence without changing state (a note, an inconclusive lookup).
    async fn append_evidence(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        evidence: &NewEvidence,
        actor: &Actor,
    ) -> StoreResult<()>;

    /// Claims unknown effects whose next read-only reconcile is due (`reconcile_after` unset or
    /// passed), oldest first, at most `limit`: in the same transaction their `reconcile_after`
    /// becomes `claim_until`, so that another replica's reconciler does not look them up at the
    /// same time. The caller sets the real next time with `schedule_reconcile`; if it dies
    /// first, the claim runs out and any replica takes the effect again.
    async fn due_for_reconcile(
        &self,
        now: Millis,
        limit: u32,
        claim_until: Millis,
    ) -> StoreResult<Vec<ReconcileDue>>;
    /// Sets when the background reconciler may look at an unknown effect again and counts the
    /// lookup. `None` means never automatically (no read-only lookup exists for it).
    async fn schedule_reconcile(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        next_at: Option<Millis>,
    ) -> StoreResult<()>;

    async fn invocation(
        &self,
        env: &EnvironmentId,
        id: &InvocationId,
    ) -> StoreResult<Option<InvocationRecord>>;
    /// The invocation whose effect `(env, action, operation_key)` names, if any (the identity
    /// of invariant 2).
    async fn invocation_by_operation_key(
        &self,
        env: &EnvironmentId,
        action: &ActionId,
        operation_key: &OperationKey,
    ) -> StoreResult<Option<InvocationRecord>>;
    /// A page of the environment's invocations, newest first. An input or response body
    /// longer than [`crate::LISTED_FIELD_BYTES_MAX`] is replaced by its elision marker in the
    /// query itself, so a page never holds more than a few MiB whatever was stored
    /// (`elide.rs`); [`Effects::invocation`] reads one whole.
    async fn list_invocations(
        &self,
        env: &EnvironmentId,
        filter: &InvocationFilter,
    ) -> StoreResult<Page<InvocationRecord>>;
    async fn effect(&self, env: &EnvironmentId, id: &EffectId)
        -> StoreResult<Option<EffectDetail>>;
    async fn list_effects(
        &self,
        env: &EnvironmentId,
        filter: &EffectFilter,
    ) -> StoreResult<Page<EffectRecord>>;

    /// How many effects are `unknown` right now, in every environment (for `/metrics`).
    /// Read-only: it claims nothing.
    async fn count_unknown(&self) -> StoreResult<u64>;
}
