//! The storage contract. Every method is one transaction: when it returns `Ok`, the change is
//! committed and durable (fsync'd) and will be found on restart; when it returns `Err`, nothing
//! of it was committed. Every state change appends its audit event in the same transaction.

use crate::console_session::ConsoleSessionRecord;
use crate::error::StoreResult;
use crate::governance::*;
use crate::records::*;
use async_trait::async_trait;
use serde_json::Value;
use steward_core::policy::PolicySpec;
use steward_core::{
    ActionDefinition, ActionId, ApprovalId, Decision, EffectId, EnvironmentId, IdempotencyKey,
    InvocationId, KeyId, LimitId, Millis, OperationKey, PolicyId, ReplicaId,
};
use tokio::sync::broadcast;

#[async_trait]
pub trait Store: Send + Sync + 'static {
    // --- environments and keys -------------------------------------------------------------

    /// The environment called `name`, created with `new_id` if it does not exist yet.
    async fn ensure_environment(
        &self,
        name: &str,
        new_id: &EnvironmentId,
        actor: &Actor,
    ) -> StoreResult<Environment>;
    async fn environment(&self, id: &EnvironmentId) -> StoreResult<Option<Environment>>;
    /// Stores a key's hash and metadata. `Duplicate` if the hash exists.
    async fn insert_key(&self, key: &ApiKeyRecord, actor: &Actor) -> StoreResult<()>;
    /// The key with this hash, usable or not (revoked and expired keys included).
    async fn key_by_hash(&self, token_hash: &str) -> StoreResult<Option<ApiKeyRecord>>;
    async fn key(&self, id: &KeyId) -> StoreResult<Option<ApiKeyRecord>>;
    /// `key_by_hash` and that key's environment, in one read: what authenticating a request
    /// needs. `None` when either is missing, or when the key is not usable at `now`
    /// (`ApiKeyRecord::usable_at`: revoked or expired). Read from the database every time, so
    /// a revocation committed by any process refuses the next request on every replica.
    async fn caller(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ApiKeyRecord, Environment)>>;
    async fn list_keys(&self) -> StoreResult<Vec<ApiKeyRecord>>;
    /// Revokes a key, with its `key.revoked` audit event in the same transaction. `false` when
    /// there is no such key or it was already revoked (nothing is written).
    async fn revoke_key(&self, id: &KeyId, actor: &Actor) -> StoreResult<bool>;
    /// Rotates a key in one transaction: inserts the new key with the old one's environment,
    /// name and scopes, moves the old key's expiry to `rotation.old_expires_at` (never later
    /// than it already was), and appends the `key.rotated` audit event. `NotFound` when the old
    /// key does not exist or is no longer usable at `actor.now`. Returns the new key.
    async fn rotate_key(&self, rotation: &KeyRotation, actor: &Actor) -> StoreResult<ApiKeyRecord>;
    /// Records that the key authenticated a request at `at` (only moves `last_used_at`
    /// forward). Bookkeeping, not a state change: no audit event, and callers run it off the
    /// request's path and at most once per key per interval.
    async fn mark_key_used(&self, id: &KeyId, at: Millis) -> StoreResult<()>;

    // --- operator console sessions -----------------------------------------------------------

    /// Records a console sign-in, with its `console.session.started` audit event in the same
    /// transaction. `Duplicate` if the token hash exists; `NotFound` if the key does not.
    async fn create_console_session(
        &self,
        session: &ConsoleSessionRecord,
        actor: &Actor,
    ) -> StoreResult<()>;
    /// The session with this token hash, its key and the key's environment, in one read: what
    /// authenticating a console request needs. `None` when any is missing, when the session
    /// has expired at `now`, or when its key is not usable at `now` (revoked or expired). Read
    /// from the database every time, like [`Store::caller`].
    async fn console_session(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ConsoleSessionRecord, ApiKeyRecord, Environment)>>;
    /// Ends a session (sign-out), with its `console.session.ended` audit event in the same
    /// transaction. `false` when there is no such session (nothing is written).
    async fn end_console_session(&self, token_hash: &str, actor: &Actor) -> StoreResult<bool>;

    // --- the master key's check value --------------------------------------------------------

    /// The check value of the master key the database's secrets are sealed with, if recorded.
    async fn master_key_check(&self) -> StoreResult<Option<String>>;
    /// Records `check` as the master key's check value unless one is recorded already (with
    /// its audit event), and returns the recorded one: of replicas starting together on a
    /// new database, the first one's value wins and the others compare against it.
    async fn init_master_key_check(&self, check: &str, actor: &Actor) -> StoreResult<String>;
    /// One stored secret of any environment (the oldest), to prove a master key against a
    /// database that has secrets but no check value yet.
    async fn any_secret(&self) -> StoreResult<Option<SecretRecord>>;

    // --- secrets ---------------------------------------------------------------------------

    /// Creates the secret, or rotates it when `expected_version` matches the stored version
    /// (`VersionConflict` otherwise). Returns the stored record.
    async fn put_secret(
        &self,
        secret: &SecretRecord,
        expected_version: Option<u32>,
        actor: &Actor,
    ) -> StoreResult<SecretRecord>;
    async fn secret(&self, env: &EnvironmentId, name: &str) -> StoreResult<Option<SecretRecord>>;
    async fn list_secrets(&self, env: &EnvironmentId) -> StoreResult<Vec<SecretRecord>>;
    async fn delete_secret(
        &self,
        env: &EnvironmentId,
        name: &str,
        actor: &Actor,
    ) -> StoreResult<bool>;

    // --- actions ---------------------------------------------------------------------------

    /// Creates the action with version 1. `Duplicate` if a live action has that name.
    async fn create_action(&self, action: &ActionRecord, actor: &Actor) -> StoreResult<()>;
    /// Appends version `expected_version + 1`; `VersionConflict` if another edit came first.
    async fn update_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        expected_version: u32,
        definition: &ActionDefinition,
        actor: &Actor,
    ) -> StoreResult<ActionRecord>;
    /// A live action by id or by name.
    async fn action(
        &self,
        env: &EnvironmentId,
        reference: &str,
    ) -> StoreResult<Option<ActionRecord>>;
    async fn list_actions(&self, env: &EnvironmentId) -> StoreResult<Vec<ActionRecord>>;
    /// Marks the action deleted. Its versions and invocations are kept.
    async fn delete_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        actor: &Actor,
    ) -> StoreResult<bool>;
    async fn action_versions(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
    ) -> StoreResult<Vec<ActionVersion>>;

    // --- invocations and effects -----------------------------------------------------------

    /// Records an invoke request (write path step 3, the intent; alone for a parked, denied or
    /// unsendable request). In one transaction: the idempotency key is
    /// checked, the operation key is checked (at most one effect per environment, action and
    /// key, ever: enforced by a unique index, so concurrent submissions from any number of
    /// connections or replicas create one), and the invocation, its effect and its first
    /// evidence are inserted. After `Created` returns, the effect will be found on restart.
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
    /// In the same transaction it settles the effect's impact reservations for the new state
    /// (`steward_core::impact::reservation_after`), and it refuses `AttemptChange::Begin` with
    /// `Halted` while the environment is halted (nothing is recorded).
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

    // --- approvals -------------------------------------------------------------------------

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

    // --- generic request idempotency -------------------------------------------------------
    //
    // An `Idempotency-Key` is scoped to the API key that sent it (`caller`), within its
    // environment: another API key's request with the same header value is a separate request,
    // which neither replays nor is refused by this one. Rows written before keys were scoped
    // (`key_id = ''`) still answer any key of their environment.

    /// Records the key as in flight, owned by `owner`, or answers what it found. A recovery
    /// sweep forgets an in-flight marker once its owner is dead, so the request may be sent
    /// again; never while the owner lives.
    async fn idempotency_begin(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        fingerprint: &str,
        now: Millis,
        owner: &ReplicaId,
    ) -> StoreResult<IdempotencyBegin>;
    async fn idempotency_finish(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        status: u16,
        body: &Value,
        now: Millis,
    ) -> StoreResult<()>;
    /// Forgets a begun key whose request failed without a recordable answer (a storage error).
    async fn idempotency_abandon(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()>;

    // --- approval policies -----------------------------------------------------------------

    /// Creates the policy at version 1 (its first immutable version, with `change_note`).
    /// `Duplicate` if a live policy in the environment has that name.
    async fn create_policy(
        &self,
        policy: &PolicyRecord,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<()>;
    /// Appends version `expected_version + 1` holding `spec`; `VersionConflict` if another edit
    /// came first, `NotFound` if the policy is deleted or in another environment, `Duplicate`
    /// if the new name is taken. Earlier versions never change.
    async fn update_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        expected_version: u32,
        spec: &PolicySpec,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<PolicyRecord>;
    /// Deletes a live policy: it stops applying at once, and a tombstone version is appended.
    /// Its versions stay readable (`policy_versions`). `false` if there was no live policy.
    async fn delete_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<bool>;
    /// A live policy at its current version.
    async fn policy(&self, env: &EnvironmentId, id: &PolicyId)
        -> StoreResult<Option<PolicyRecord>>;
    /// Every live policy of the environment (enabled or not), oldest first.
    async fn list_policies(&self, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>>;
    /// Every version of a policy, live or deleted, oldest first (empty if no such policy in
    /// this environment).
    async fn policy_versions(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Vec<PolicyVersion>>;

    // --- impact limits ---------------------------------------------------------------------

    async fn create_limit(&self, limit: &LimitRecord, actor: &Actor) -> StoreResult<()>;
    /// Renames a limit or changes its amount (`None` keeps the field). Lowering it releases no
    /// reservation, consumption or exposure. Works on archived limits too.
    async fn update_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        name: Option<&str>,
        amount: Option<i64>,
        actor: &Actor,
    ) -> StoreResult<LimitRecord>;
    /// Archives a limit: new effects no longer reserve against it; existing reservations still
    /// settle. `false` if it was already archived or does not exist.
    async fn archive_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        actor: &Actor,
    ) -> StoreResult<bool>;
    /// A limit with its usage (consumed, reserved, exposure) in the window containing `now`.
    async fn limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        now: Millis,
    ) -> StoreResult<Option<LimitStatus>>;
    async fn list_limits(
        &self,
        env: &EnvironmentId,
        include_archived: bool,
        now: Millis,
    ) -> StoreResult<Vec<LimitStatus>>;
    /// Reserves, in one transaction, every live limit of the environment that applies to one of
    /// the effect's quantities (`LimitSpec::applies`), in the window containing `actor.now`; or,
    /// when any of them lacks room or the quantity is missing, reserves nothing and answers
    /// `Refused`. Concurrent reservations serialize: their sum never passes a limit. Idempotent
    /// per effect: an effect that already holds reservations gets `AlreadyReserved`. Once
    /// `Reserved` returns, the reservations are durable; `change_effect` settles them (success
    /// consumes, failure or rejection releases, unknown keeps them as exposure), and recovery's
    /// `ready -> failed` releases those of an effect that never got its attempt.
    async fn reserve_impact(&self, request: &ImpactRequest) -> StoreResult<ReserveOutcome>;

    // --- the kill switch -------------------------------------------------------------------

    /// Halts (`halted = true`, with `reason`) or resumes the environment. While it is halted,
    /// `change_effect` refuses every `AttemptChange::Begin` with `Halted` in the same
    /// transaction that would record the attempt, so nothing committed after the halt is sent.
    async fn set_halted(
        &self,
        env: &EnvironmentId,
        halted: bool,
        reason: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<Environment>;
    /// Every invocation of the environment whose effect is `ready` (allowed, never attempted),
    /// oldest first: the work a halt parked.
    async fn ready_invocations(&self, env: &EnvironmentId) -> StoreResult<Vec<InvocationRecord>>;

    // --- replicas and recovery ---------------------------------------------------------------

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

    /// How many effects are `unknown` right now, in every environment (for `/metrics`).
    /// Read-only: it claims nothing.
    async fn count_unknown(&self) -> StoreResult<u64>;

    /// Sealed audit events with `seq > after`, in chain order (`seq` ascending), at most
    /// `limit`. Events committed but not sealed yet are read with `unsealed_audit_events`.
    async fn audit_events(&self, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>>;

    /// Audit events committed but not sealed yet, with insertion id `> after_id`, in insertion
    /// order (`id` ascending), at most `limit`. The sealer seals them in that order, though an
    /// event whose transaction commits later than a newer one's may be sealed after it.
    async fn unsealed_audit_events(
        &self,
        after_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<AuditEvent>>;

    /// The sealed chain's head as the last seal stored it, with the sealer's lease.
    async fn audit_head(&self) -> StoreResult<crate::audit::AuditHead>;

    /// Seals the oldest unsealed events (at most `seal.events_max`), in one transaction: each
    /// gets the next `seq`, the previous event's chain hash and its own chain hash, and the new
    /// head is stored (`audit.rs`). A seal that fails or whose process dies commits nothing.
    /// Seals serialize in the database, so concurrent ones never fork the chain. The lease keeps
    /// one replica sealing: while another replica that is still registered (`heartbeat`) holds
    /// it, this answers `Held` and writes nothing; a seal that seals takes or renews it until
    /// `now + lease_ms`. Correctness never depends on the lease, only the sharing of work.
    async fn seal_audit(
        &self,
        seal: &crate::audit::AuditSeal,
    ) -> StoreResult<crate::audit::SealOutcome>;
}
