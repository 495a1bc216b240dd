//! A store that counts the reads that authenticate a request (`Store::caller` and
//! `Store::invoke_context`), the reads of an environment's whole action list
//! (`Store::list_actions`) and the calls a parked invoke could make after its submission
//! (`Store::submit`, `Store::finish_invoke_request`, `Store::invocation`), and passes every call
//! to the store it wraps.
//!
//! It implements every store trait by delegation, so a change to a trait's method shows here
//! as a compile error naming the method: add or change it the same way, passing the call on.

#![allow(clippy::too_many_arguments)]

use async_trait::async_trait;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use steward_core::policy::PolicySpec;
use steward_core::*;
use steward_store::*;
use tokio::sync::broadcast;

/// The wrapped store, and how many times each authenticating read was made.
pub struct CountingStore {
    inner: Arc<dyn Store>,
    reads: Mutex<BTreeMap<&'static str, u32>>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn Store>) -> CountingStore {
        CountingStore {
            inner,
            reads: Mutex::default(),
        }
    }

    fn note(&self, read: &'static str) {
        let mut reads = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        *reads.entry(read).or_default() += 1;
    }

    /// How many times `read` (a method's name) was made so far.
    pub fn reads(&self, read: &str) -> u32 {
        let reads = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        reads.get(read).copied().unwrap_or(0)
    }

    /// How many authenticating reads (`caller` and `invoke_context`) were made so far.
    pub fn authentications(&self) -> u32 {
        self.reads("caller") + self.reads("invoke_context")
    }
}

#[async_trait]
impl Approvals for CountingStore {
    async fn create_approval(
        &self,
        env: &EnvironmentId,
        approval: &NewApproval,
        requested_by: &KeyId,
        now: Millis,
    ) -> StoreResult<ApprovalRecord> {
        self.inner
            .create_approval(env, approval, requested_by, now)
            .await
    }
    async fn edit_approval(
        &self,
        request: &steward_store::EditRequest,
    ) -> StoreResult<steward_store::EditOutcome> {
        self.inner.edit_approval(request).await
    }
    async fn approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>> {
        self.inner.approval(env, id).await
    }
    async fn list_approvals(
        &self,
        env: &EnvironmentId,
        filter: &ApprovalFilter,
    ) -> StoreResult<Page<ApprovalRecord>> {
        self.inner.list_approvals(env, filter).await
    }
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
        self.inner
            .decide_approval(env, id, key, decision, note, now, replica)
            .await
    }
    async fn decide_and_begin(
        &self,
        request: &DecisionRequest,
        first: Option<&FirstAttempt>,
    ) -> StoreResult<Decided> {
        self.inner.decide_and_begin(request, first).await
    }
    async fn release_context(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ReleaseContext>> {
        self.inner.release_context(env, id).await
    }
    async fn expire_approvals(&self, now: Millis) -> StoreResult<Vec<ApprovalId>> {
        self.inner.expire_approvals(now).await
    }
    async fn withdraw_approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
        requester: &KeyId,
        now: Millis,
    ) -> StoreResult<Withdrawal> {
        self.inner.withdraw_approval(env, id, requester, now).await
    }
    fn approval_events(&self) -> Option<broadcast::Receiver<ApprovalEvent>> {
        self.inner.approval_events()
    }
}

#[async_trait]
impl AuditLog for CountingStore {
    async fn audit_events(&self, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
        self.inner.audit_events(after, limit).await
    }
    async fn unsealed_audit_events(
        &self,
        after_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<AuditEvent>> {
        self.inner.unsealed_audit_events(after_id, limit).await
    }
    async fn audit_head(&self) -> StoreResult<AuditHead> {
        self.inner.audit_head().await
    }
    async fn seal_audit(&self, seal: &AuditSeal) -> StoreResult<SealOutcome> {
        self.inner.seal_audit(seal).await
    }
}

#[async_trait]
impl Budgets for CountingStore {
    async fn put_budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        limit_id: &LimitId,
        spec: &BudgetSpec,
        actor: &Actor,
    ) -> StoreResult<BudgetStatus> {
        self.inner.put_budget(env, key, limit_id, spec, actor).await
    }
    async fn budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        now: Millis,
    ) -> StoreResult<Option<BudgetStatus>> {
        self.inner.budget(env, key, now).await
    }
    async fn list_budgets(
        &self,
        env: &EnvironmentId,
        now: Millis,
    ) -> StoreResult<Vec<BudgetStatus>> {
        self.inner.list_budgets(env, now).await
    }
    async fn key_invocations_since(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        since: Millis,
    ) -> StoreResult<u64> {
        self.inner.key_invocations_since(env, key, since).await
    }
    async fn delete_budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        self.inner.delete_budget(env, key, actor).await
    }
}

#[async_trait]
impl Catalog for CountingStore {
    async fn put_secret(
        &self,
        secret: &SecretRecord,
        expected_version: Option<u32>,
        actor: &Actor,
    ) -> StoreResult<SecretRecord> {
        self.inner.put_secret(secret, expected_version, actor).await
    }
    async fn secret(&self, env: &EnvironmentId, name: &str) -> StoreResult<Option<SecretRecord>> {
        self.inner.secret(env, name).await
    }
    async fn list_secrets(&self, env: &EnvironmentId) -> StoreResult<Vec<SecretRecord>> {
        self.inner.list_secrets(env).await
    }
    async fn delete_secret(
        &self,
        env: &EnvironmentId,
        name: &str,
        actor: &Actor,
    ) -> StoreResult<bool> {
        self.inner.delete_secret(env, name, actor).await
    }
    async fn master_key_check(&self) -> StoreResult<Option<String>> {
        self.inner.master_key_check().await
    }
    async fn init_master_key_check(&self, check: &str, actor: &Actor) -> StoreResult<String> {
        self.inner.init_master_key_check(check, actor).await
    }
    async fn any_secret(&self) -> StoreResult<Option<SecretRecord>> {
        self.inner.any_secret().await
    }
    async fn create_action(&self, action: &ActionRecord, actor: &Actor) -> StoreResult<()> {
        self.inner.create_action(action, actor).await
    }
    async fn update_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        expected_version: u32,
        definition: &ActionDefinition,
        actor: &Actor,
    ) -> StoreResult<ActionRecord> {
        self.inner
            .update_action(env, id, expected_version, definition, actor)
            .await
    }
    async fn action(
        &self,
        env: &EnvironmentId,
        reference: &str,
    ) -> StoreResult<Option<ActionRecord>> {
        self.inner.action(env, reference).await
    }
    async fn list_actions(&self, env: &EnvironmentId) -> StoreResult<Vec<ActionRecord>> {
        self.note("list_actions");
        self.inner.list_actions(env).await
    }
    async fn delete_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        self.inner.delete_action(env, id, actor).await
    }
    async fn action_versions(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
    ) -> StoreResult<Vec<ActionVersion>> {
        self.inner.action_versions(env, id).await
    }
}

#[async_trait]
impl Connections for CountingStore {
    async fn record_connection(
        &self,
        connection: &ConnectionRecord,
        actor: &Actor,
    ) -> StoreResult<ConnectionRecord> {
        self.inner.record_connection(connection, actor).await
    }
    async fn connection(
        &self,
        env: &EnvironmentId,
        name: &str,
    ) -> StoreResult<Option<ConnectionRecord>> {
        self.inner.connection(env, name).await
    }
    async fn list_connections(&self, env: &EnvironmentId) -> StoreResult<Vec<ConnectionRecord>> {
        self.inner.list_connections(env).await
    }
    async fn record_health(
        &self,
        check: &HealthCheck,
        actor: &Actor,
    ) -> StoreResult<ConnectionRecord> {
        self.inner.record_health(check, actor).await
    }
    async fn create_session(
        &self,
        session: &ConnectionSession,
        actor: &Actor,
    ) -> StoreResult<ConnectionSession> {
        self.inner.create_session(session, actor).await
    }
    async fn session(
        &self,
        env: &EnvironmentId,
        id: &str,
    ) -> StoreResult<Option<ConnectionSession>> {
        self.inner.session(env, id).await
    }
    async fn claim_session(
        &self,
        state_digest: &str,
        now: Millis,
    ) -> StoreResult<Option<ConnectionSession>> {
        self.inner.claim_session(state_digest, now).await
    }
    async fn finish_session(
        &self,
        env: &EnvironmentId,
        id: &str,
        status: SessionStatus,
        reason: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<ConnectionSession> {
        self.inner
            .finish_session(env, id, status, reason, actor)
            .await
    }
}

#[async_trait]
impl Effects for CountingStore {
    async fn submit(&self, submission: &Submission) -> StoreResult<SubmitOutcome> {
        self.note("submit");
        self.inner.submit(submission).await
    }
    async fn invoke_context(
        &self,
        token_hash: &str,
        now: Millis,
        action: &str,
        idempotency_key: Option<&IdempotencyKey>,
    ) -> StoreResult<Option<InvokeContext>> {
        self.note("invoke_context");
        self.inner
            .invoke_context(token_hash, now, action, idempotency_key)
            .await
    }
    async fn submit_and_begin(
        &self,
        submission: &Submission,
        first: &FirstAttempt,
    ) -> StoreResult<Submitted> {
        self.inner.submit_and_begin(submission, first).await
    }
    async fn finish_invoke_request(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        self.note("finish_invoke_request");
        self.inner.finish_invoke_request(env, caller, key).await
    }
    async fn change_effect(&self, change: &EffectChange) -> StoreResult<()> {
        self.inner.change_effect(change).await
    }
    async fn change_effect_and_read(&self, change: &EffectChange) -> StoreResult<InvocationRecord> {
        self.inner.change_effect_and_read(change).await
    }
    async fn append_evidence(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        evidence: &NewEvidence,
        actor: &Actor,
    ) -> StoreResult<()> {
        self.inner
            .append_evidence(env, effect, evidence, actor)
            .await
    }
    async fn due_for_reconcile(
        &self,
        now: Millis,
        limit: u32,
        claim_until: Millis,
    ) -> StoreResult<Vec<ReconcileDue>> {
        self.inner.due_for_reconcile(now, limit, claim_until).await
    }
    async fn schedule_reconcile(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        next_at: Option<Millis>,
    ) -> StoreResult<()> {
        self.inner.schedule_reconcile(env, effect, next_at).await
    }
    async fn invocation(
        &self,
        env: &EnvironmentId,
        id: &InvocationId,
    ) -> StoreResult<Option<InvocationRecord>> {
        self.note("invocation");
        self.inner.invocation(env, id).await
    }
    async fn invocation_by_operation_key(
        &self,
        env: &EnvironmentId,
        action: &ActionId,
        operation_key: &OperationKey,
    ) -> StoreResult<Option<InvocationRecord>> {
        self.inner
            .invocation_by_operation_key(env, action, operation_key)
            .await
    }
    async fn list_invocations(
        &self,
        env: &EnvironmentId,
        filter: &InvocationFilter,
    ) -> StoreResult<Page<InvocationRecord>> {
        self.inner.list_invocations(env, filter).await
    }
    async fn effect(
        &self,
        env: &EnvironmentId,
        id: &EffectId,
    ) -> StoreResult<Option<EffectDetail>> {
        self.inner.effect(env, id).await
    }
    async fn list_effects(
        &self,
        env: &EnvironmentId,
        filter: &EffectFilter,
    ) -> StoreResult<Page<EffectRecord>> {
        self.inner.list_effects(env, filter).await
    }
    async fn count_unknown(&self) -> StoreResult<u64> {
        self.inner.count_unknown().await
    }
}

#[async_trait]
impl Idempotency for CountingStore {
    async fn idempotency_begin(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        fingerprint: &str,
        now: Millis,
        owner: &ReplicaId,
    ) -> StoreResult<IdempotencyBegin> {
        self.inner
            .idempotency_begin(env, caller, key, fingerprint, now, owner)
            .await
    }
    async fn idempotency_finish(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        status: u16,
        body: &Value,
        now: Millis,
    ) -> StoreResult<()> {
        self.inner
            .idempotency_finish(env, caller, key, status, body, now)
            .await
    }
    async fn idempotency_abandon(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        self.inner.idempotency_abandon(env, caller, key).await
    }
}

#[async_trait]
impl Identity for CountingStore {
    async fn ensure_environment(
        &self,
        env: NewEnvironment<'_>,
        actor: &Actor,
    ) -> StoreResult<Environment> {
        self.inner.ensure_environment(env, actor).await
    }
    async fn environment(&self, id: &EnvironmentId) -> StoreResult<Option<Environment>> {
        self.inner.environment(id).await
    }
    async fn insert_key(&self, key: &ApiKeyRecord, actor: &Actor) -> StoreResult<()> {
        self.inner.insert_key(key, actor).await
    }
    async fn key_by_hash(&self, token_hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
        self.inner.key_by_hash(token_hash).await
    }
    async fn key(&self, id: &KeyId) -> StoreResult<Option<ApiKeyRecord>> {
        self.inner.key(id).await
    }
    async fn caller(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ApiKeyRecord, Environment)>> {
        self.note("caller");
        self.inner.caller(token_hash, now).await
    }
    async fn list_keys(&self) -> StoreResult<Vec<ApiKeyRecord>> {
        self.inner.list_keys().await
    }
    async fn revoke_key(&self, id: &KeyId, actor: &Actor) -> StoreResult<bool> {
        self.inner.revoke_key(id, actor).await
    }
    async fn rotate_key(&self, rotation: &KeyRotation, actor: &Actor) -> StoreResult<ApiKeyRecord> {
        self.inner.rotate_key(rotation, actor).await
    }
    async fn mark_key_used(&self, id: &KeyId, at: Millis) -> StoreResult<()> {
        self.inner.mark_key_used(id, at).await
    }
    async fn create_console_session(
        &self,
        session: &ConsoleSessionRecord,
        actor: &Actor,
    ) -> StoreResult<()> {
        self.inner.create_console_session(session, actor).await
    }
    async fn console_session(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ConsoleSessionRecord, ApiKeyRecord, Environment)>> {
        self.inner.console_session(token_hash, now).await
    }
    async fn end_console_session(&self, token_hash: &str, actor: &Actor) -> StoreResult<bool> {
        self.inner.end_console_session(token_hash, actor).await
    }
}

#[async_trait]
impl KillSwitch for CountingStore {
    async fn set_halted(&self, change: HaltChange<'_>, actor: &Actor) -> StoreResult<Environment> {
        self.inner.set_halted(change, actor).await
    }
    async fn set_unkeyed_invokes(
        &self,
        change: UnkeyedChange<'_>,
        actor: &Actor,
    ) -> StoreResult<Environment> {
        self.inner.set_unkeyed_invokes(change, actor).await
    }
    async fn ready_invocations(&self, env: &EnvironmentId) -> StoreResult<Vec<InvocationRecord>> {
        self.inner.ready_invocations(env).await
    }
}

#[async_trait]
impl Holds for CountingStore {
    async fn create_hold(&self, hold: &HoldRecord, actor: &Actor) -> StoreResult<()> {
        self.inner.create_hold(hold, actor).await
    }
    async fn list_holds(&self, env: &EnvironmentId) -> StoreResult<Vec<HoldRecord>> {
        self.inner.list_holds(env).await
    }
    async fn release_hold(
        &self,
        env: &EnvironmentId,
        id: &HoldId,
        actor: &Actor,
    ) -> StoreResult<HoldRecord> {
        self.inner.release_hold(env, id, actor).await
    }
}

#[async_trait]
impl Limits for CountingStore {
    async fn create_limit(&self, limit: &LimitRecord, actor: &Actor) -> StoreResult<()> {
        self.inner.create_limit(limit, actor).await
    }
    async fn update_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        name: Option<&str>,
        amount: Option<i64>,
        actor: &Actor,
    ) -> StoreResult<LimitRecord> {
        self.inner.update_limit(env, id, name, amount, actor).await
    }
    async fn archive_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        self.inner.archive_limit(env, id, actor).await
    }
    async fn limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        now: Millis,
    ) -> StoreResult<Option<LimitStatus>> {
        self.inner.limit(env, id, now).await
    }
    async fn list_limits(
        &self,
        env: &EnvironmentId,
        include_archived: bool,
        now: Millis,
    ) -> StoreResult<Vec<LimitStatus>> {
        self.inner.list_limits(env, include_archived, now).await
    }
    async fn reserve_impact(&self, request: &ImpactRequest) -> StoreResult<ReserveOutcome> {
        self.inner.reserve_impact(request).await
    }
}

#[async_trait]
impl Policies for CountingStore {
    async fn create_policy(
        &self,
        policy: &PolicyRecord,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<()> {
        self.inner.create_policy(policy, change_note, actor).await
    }
    async fn update_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        expected_version: u32,
        spec: &PolicySpec,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<PolicyRecord> {
        self.inner
            .update_policy(env, id, expected_version, spec, change_note, actor)
            .await
    }
    async fn delete_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<bool> {
        self.inner.delete_policy(env, id, change_note, actor).await
    }
    async fn policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Option<PolicyRecord>> {
        self.inner.policy(env, id).await
    }
    async fn list_policies(&self, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>> {
        self.inner.list_policies(env).await
    }
    async fn policy_versions(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Vec<PolicyVersion>> {
        self.inner.policy_versions(env, id).await
    }
    async fn apply_policy_set(
        &self,
        change: &PolicySetChange,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<Vec<PolicyRecord>> {
        self.inner
            .apply_policy_set(change, change_note, actor)
            .await
    }
}

#[async_trait]
impl Previews for CountingStore {
    async fn create_preview(&self, preview: &PreviewRecord, actor: &Actor) -> StoreResult<()> {
        self.inner.create_preview(preview, actor).await
    }
    async fn preview(
        &self,
        env: &EnvironmentId,
        id: &PreviewId,
    ) -> StoreResult<Option<PreviewRecord>> {
        self.inner.preview(env, id).await
    }
    async fn refresh_preview(&self, new: &PreviewRecord, actor: &Actor) -> StoreResult<bool> {
        self.inner.refresh_preview(new, actor).await
    }
}

#[async_trait]
impl Replicas for CountingStore {
    async fn heartbeat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<Heartbeat> {
        self.inner.heartbeat(replica, now).await
    }
    async fn recover(&self, sweep: &Sweep) -> StoreResult<RecoveryReport> {
        self.inner.recover(sweep).await
    }
    async fn ready(&self) -> StoreResult<()> {
        self.inner.ready().await
    }
}

#[async_trait]
impl Runs for CountingStore {
    async fn start_run(&self, run: &RunRecord, actor: &Actor) -> StoreResult<()> {
        self.inner.start_run(run, actor).await
    }
    async fn end_run(
        &self,
        env: &EnvironmentId,
        id: &RunId,
        change: &RunEnd,
        actor: &Actor,
    ) -> StoreResult<Result<RunRecord, RunEndRefusal>> {
        self.inner.end_run(env, id, change, actor).await
    }
    async fn run(&self, env: &EnvironmentId, id: &RunId) -> StoreResult<Option<RunRecord>> {
        self.inner.run(env, id).await
    }
    async fn list_runs(
        &self,
        env: &EnvironmentId,
        filter: &RunFilter,
    ) -> StoreResult<Vec<RunRecord>> {
        self.inner.list_runs(env, filter).await
    }
    async fn ingest_spans(
        &self,
        env: &EnvironmentId,
        run: &RunId,
        spans: &[SpanRecord],
        spans_max: usize,
        actor: &Actor,
    ) -> StoreResult<SpansIngested> {
        self.inner
            .ingest_spans(env, run, spans, spans_max, actor)
            .await
    }
    async fn spans(&self, env: &EnvironmentId, run: &RunId) -> StoreResult<Vec<SpanRecord>> {
        self.inner.spans(env, run).await
    }
    async fn span_outlines(
        &self,
        env: &EnvironmentId,
        run: &RunId,
    ) -> StoreResult<Vec<SpanOutline>> {
        self.inner.span_outlines(env, run).await
    }
    async fn span_page(
        &self,
        env: &EnvironmentId,
        run: &RunId,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<(i64, SpanRecord)>> {
        self.inner.span_page(env, run, after, limit).await
    }
    async fn span(
        &self,
        env: &EnvironmentId,
        run: &RunId,
        span_id: &str,
    ) -> StoreResult<Option<SpanRecord>> {
        self.inner.span(env, run, span_id).await
    }
    async fn add_feedback(&self, feedback: &FeedbackRecord, actor: &Actor) -> StoreResult<()> {
        self.inner.add_feedback(feedback, actor).await
    }
    async fn feedback(&self, env: &EnvironmentId, run: &RunId) -> StoreResult<Vec<FeedbackRecord>> {
        self.inner.feedback(env, run).await
    }
    async fn run_timeline(
        &self,
        env: &EnvironmentId,
        run: &RunId,
    ) -> StoreResult<(Vec<InvocationRecord>, Vec<RunApproval>)> {
        self.inner.run_timeline(env, run).await
    }
}

#[async_trait]
impl Webhooks for CountingStore {
    async fn create_subscription(
        &self,
        subscription: &WebhookSubscription,
        actor: &Actor,
    ) -> StoreResult<()> {
        self.inner.create_subscription(subscription, actor).await
    }
    async fn subscriptions(
        &self,
        env: &EnvironmentId,
        topic: Option<&str>,
    ) -> StoreResult<Vec<WebhookSubscription>> {
        self.inner.subscriptions(env, topic).await
    }
    async fn subscription(
        &self,
        env: &EnvironmentId,
        id: &str,
    ) -> StoreResult<Option<WebhookSubscription>> {
        self.inner.subscription(env, id).await
    }
    async fn update_subscription(
        &self,
        subscription: &WebhookSubscription,
        actor: &Actor,
    ) -> StoreResult<bool> {
        self.inner.update_subscription(subscription, actor).await
    }
    async fn delete_subscription(
        &self,
        env: &EnvironmentId,
        id: &str,
        actor: &Actor,
    ) -> StoreResult<bool> {
        self.inner.delete_subscription(env, id, actor).await
    }
    async fn claim_subscriptions(
        &self,
        owner: &str,
        now: Millis,
        lease_until: Millis,
        limit: u32,
    ) -> StoreResult<Vec<WebhookSubscription>> {
        self.inner
            .claim_subscriptions(owner, now, lease_until, limit)
            .await
    }
    async fn record_delivery(
        &self,
        id: &str,
        owner: &str,
        epoch: i64,
        from: i64,
        outcome: &DeliveryOutcome,
        now: Millis,
        keep_until: Option<Millis>,
    ) -> StoreResult<bool> {
        self.inner
            .record_delivery(id, owner, epoch, from, outcome, now, keep_until)
            .await
    }
    async fn release_dead_webhook_leases(&self, sweep: &Sweep) -> StoreResult<u64> {
        self.inner.release_dead_webhook_leases(sweep).await
    }
    async fn dead_letters(&self, env: &EnvironmentId, limit: u32) -> StoreResult<Vec<DeadLetter>> {
        self.inner.dead_letters(env, limit).await
    }
    async fn dead_letter(&self, env: &EnvironmentId, id: &str) -> StoreResult<Option<DeadLetter>> {
        self.inner.dead_letter(env, id).await
    }
    async fn request_redelivery(
        &self,
        env: &EnvironmentId,
        target: RedeliveryTarget<'_>,
        actor: &Actor,
        now: Millis,
    ) -> StoreResult<Vec<DeadLetter>> {
        self.inner.request_redelivery(env, target, actor, now).await
    }
    async fn requested_redeliveries(
        &self,
        subscription: &str,
        limit: u32,
    ) -> StoreResult<Vec<DeadLetter>> {
        self.inner.requested_redeliveries(subscription, limit).await
    }
    async fn record_redelivery(
        &self,
        letter: &str,
        owner: &str,
        result: Result<(), String>,
        now: Millis,
    ) -> StoreResult<bool> {
        self.inner
            .record_redelivery(letter, owner, result, now)
            .await
    }
    async fn webhook_backlog(
        &self,
        env: Option<&EnvironmentId>,
    ) -> StoreResult<Vec<WebhookBacklog>> {
        self.inner.webhook_backlog(env).await
    }
}

#[async_trait]
impl Figures for CountingStore {
    async fn figures(&self, now: Millis) -> StoreResult<OperatingFigures> {
        self.inner.figures(now).await
    }
    fn pool_use(&self) -> PoolUse {
        self.inner.pool_use()
    }
}

#[async_trait]
impl Receipts for CountingStore {
    async fn receipt_keys(&self) -> StoreResult<Vec<ReceiptKeyRecord>> {
        self.inner.receipt_keys().await
    }
    async fn add_receipt_key(
        &self,
        key: &ReceiptKeyRecord,
        first_only: bool,
        actor: &Actor,
    ) -> StoreResult<bool> {
        self.inner.add_receipt_key(key, first_only, actor).await
    }
    async fn receipt_cursor(&self) -> StoreResult<i64> {
        self.inner.receipt_cursor().await
    }
    async fn receipt_head(&self, env: &EnvironmentId) -> StoreResult<Option<(i64, String)>> {
        self.inner.receipt_head(env).await
    }
    async fn issue_receipts(&self, batch: &ReceiptBatch) -> StoreResult<IssueOutcome> {
        self.inner.issue_receipts(batch).await
    }
    async fn effect_receipts(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
    ) -> StoreResult<Vec<ReceiptRecord>> {
        self.inner.effect_receipts(env, effect).await
    }
    async fn receipts(
        &self,
        env: &EnvironmentId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<ReceiptRecord>> {
        self.inner.receipts(env, after, limit).await
    }
}
