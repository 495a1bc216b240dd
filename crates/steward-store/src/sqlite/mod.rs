//! The embedded store: SQLite on disk, WAL, `synchronous=FULL`.

mod admin;
mod approvals;
mod audit_log;
mod conn;
mod console_sessions;
mod idempotency;
mod invocations;
mod limits;
mod policies;
mod recover;
mod rows;
mod schema;

use crate::console_session::ConsoleSessionRecord;
use crate::error::{StoreError, StoreResult};
use crate::governance::*;
use crate::records::*;
use crate::store::Store;
use async_trait::async_trait;
use conn::{blocking, Pool};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use steward_core::*;

/// The embedded default store. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct SqliteStore {
    pool: Arc<Pool>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies the schema.
    pub fn open(path: &Path) -> StoreResult<Self> {
        Ok(Self {
            pool: Pool::open(path)?,
        })
    }

    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.pool.write(f).await
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let pool = self.pool.clone();
        let permit = pool
            .reader_permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Unavailable {
                message: "the store is closed".into(),
                source: None,
            })?;
        blocking(move || {
            let _permit = permit;
            pool.read(f)
        })
        .await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn ensure_environment(
        &self,
        name: &str,
        new_id: &EnvironmentId,
        actor: &Actor,
    ) -> StoreResult<Environment> {
        let (name, new_id, actor) = (name.to_string(), new_id.clone(), actor.clone());
        self.write(move |tx| admin::ensure_environment(tx, &name, &new_id, &actor))
            .await
    }

    async fn environment(&self, id: &EnvironmentId) -> StoreResult<Option<Environment>> {
        let id = id.clone();
        self.read(move |c| admin::environment(c, &id)).await
    }

    async fn insert_key(&self, key: &ApiKeyRecord, actor: &Actor) -> StoreResult<()> {
        let (key, actor) = (key.clone(), actor.clone());
        self.write(move |tx| admin::insert_key(tx, &key, &actor))
            .await
    }

    async fn key_by_hash(&self, token_hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
        let hash = token_hash.to_string();
        self.read(move |c| admin::key_by_hash(c, &hash)).await
    }

    async fn key(&self, id: &KeyId) -> StoreResult<Option<ApiKeyRecord>> {
        let id = id.clone();
        self.read(move |c| admin::key(c, &id)).await
    }

    async fn list_keys(&self) -> StoreResult<Vec<ApiKeyRecord>> {
        self.read(admin::list_keys).await
    }

    async fn revoke_key(&self, id: &KeyId, actor: &Actor) -> StoreResult<bool> {
        let (id, actor) = (id.clone(), actor.clone());
        self.write(move |tx| admin::revoke_key(tx, &id, &actor))
            .await
    }

    async fn rotate_key(&self, rotation: &KeyRotation, actor: &Actor) -> StoreResult<ApiKeyRecord> {
        let (rotation, actor) = (rotation.clone(), actor.clone());
        self.write(move |tx| admin::rotate_key(tx, &rotation, &actor))
            .await
    }

    async fn mark_key_used(&self, id: &KeyId, at: Millis) -> StoreResult<()> {
        let id = id.clone();
        self.write(move |tx| admin::mark_key_used(tx, &id, at))
            .await
    }

    async fn create_console_session(
        &self,
        session: &ConsoleSessionRecord,
        actor: &Actor,
    ) -> StoreResult<()> {
        let (session, actor) = (session.clone(), actor.clone());
        self.write(move |tx| console_sessions::create(tx, &session, &actor))
            .await
    }

    async fn console_session(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ConsoleSessionRecord, ApiKeyRecord, Environment)>> {
        let hash = token_hash.to_string();
        self.read(move |c| console_sessions::lookup(c, &hash, now))
            .await
    }

    async fn end_console_session(&self, token_hash: &str, actor: &Actor) -> StoreResult<bool> {
        let (hash, actor) = (token_hash.to_string(), actor.clone());
        self.write(move |tx| console_sessions::end(tx, &hash, &actor))
            .await
    }

    async fn master_key_check(&self) -> StoreResult<Option<String>> {
        self.read(admin::master_key_check).await
    }

    async fn init_master_key_check(&self, check: &str, actor: &Actor) -> StoreResult<String> {
        let (check, actor) = (check.to_string(), actor.clone());
        self.write(move |tx| admin::init_master_key_check(tx, &check, &actor))
            .await
    }

    async fn any_secret(&self) -> StoreResult<Option<SecretRecord>> {
        self.read(admin::any_secret).await
    }

    async fn caller(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ApiKeyRecord, Environment)>> {
        let hash = token_hash.to_string();
        self.read(move |c| {
            let Some(key) = admin::key_by_hash(c, &hash)?.filter(|k| k.usable_at(now)) else {
                return Ok(None);
            };
            Ok(admin::environment(c, &key.env_id)?.map(|env| (key, env)))
        })
        .await
    }

    async fn put_secret(
        &self,
        secret: &SecretRecord,
        expected_version: Option<u32>,
        actor: &Actor,
    ) -> StoreResult<SecretRecord> {
        let (secret, actor) = (secret.clone(), actor.clone());
        self.write(move |tx| admin::put_secret(tx, &secret, expected_version, &actor))
            .await
    }

    async fn secret(&self, env: &EnvironmentId, name: &str) -> StoreResult<Option<SecretRecord>> {
        let (env, name) = (env.clone(), name.to_string());
        self.read(move |c| admin::secret(c, &env, &name)).await
    }

    async fn list_secrets(&self, env: &EnvironmentId) -> StoreResult<Vec<SecretRecord>> {
        let env = env.clone();
        self.read(move |c| admin::list_secrets(c, &env)).await
    }

    async fn delete_secret(
        &self,
        env: &EnvironmentId,
        name: &str,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, name, actor) = (env.clone(), name.to_string(), actor.clone());
        self.write(move |tx| admin::delete_secret(tx, &env, &name, &actor))
            .await
    }

    async fn create_action(&self, action: &ActionRecord, actor: &Actor) -> StoreResult<()> {
        let (action, actor) = (action.clone(), actor.clone());
        self.write(move |tx| admin::create_action(tx, &action, &actor))
            .await
    }

    async fn update_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        expected_version: u32,
        definition: &ActionDefinition,
        actor: &Actor,
    ) -> StoreResult<ActionRecord> {
        let (env, id, def, actor) = (env.clone(), id.clone(), definition.clone(), actor.clone());
        self.write(move |tx| admin::update_action(tx, &env, &id, expected_version, &def, &actor))
            .await
    }

    async fn action(
        &self,
        env: &EnvironmentId,
        reference: &str,
    ) -> StoreResult<Option<ActionRecord>> {
        let (env, reference) = (env.clone(), reference.to_string());
        self.read(move |c| admin::action(c, &env, &reference)).await
    }

    async fn list_actions(&self, env: &EnvironmentId) -> StoreResult<Vec<ActionRecord>> {
        let env = env.clone();
        self.read(move |c| admin::list_actions(c, &env)).await
    }

    async fn delete_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, id, actor) = (env.clone(), id.clone(), actor.clone());
        self.write(move |tx| admin::delete_action(tx, &env, &id, &actor))
            .await
    }

    async fn action_versions(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
    ) -> StoreResult<Vec<ActionVersion>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |c| admin::action_versions(c, &env, &id))
            .await
    }

    async fn submit(&self, submission: &Submission) -> StoreResult<SubmitOutcome> {
        let submission = submission.clone();
        self.write(move |tx| invocations::submit(tx, &submission))
            .await
    }

    async fn invoke_context(
        &self,
        token_hash: &str,
        now: Millis,
        action: &str,
        idempotency_key: Option<&IdempotencyKey>,
    ) -> StoreResult<Option<InvokeContext>> {
        let (hash, action, key) = (
            token_hash.to_string(),
            action.to_string(),
            idempotency_key.cloned(),
        );
        self.read(move |c| {
            let Some(caller) = admin::key_by_hash(c, &hash)?.filter(|k| k.usable_at(now)) else {
                return Ok(None);
            };
            let Some(environment) = admin::environment(c, &caller.env_id)? else {
                return Ok(None);
            };
            let env = &environment.id;
            let action = admin::action(c, env, &action)?;
            let mut secrets = Vec::new();
            for name in action.iter().flat_map(|a| secrets_named_by(&a.definition)) {
                secrets.extend(admin::secret(c, env, &name)?);
            }
            Ok(Some(InvokeContext {
                policies: policies::list(c, env)?,
                earlier: match &key {
                    Some(key) => idempotency::earlier(c, env, &caller.id, key)?,
                    None => None,
                },
                key: caller,
                environment,
                action,
                secrets,
            }))
        })
        .await
    }

    async fn submit_and_begin(
        &self,
        submission: &Submission,
        first: &FirstAttempt,
    ) -> StoreResult<Submitted> {
        let (submission, first) = (submission.clone(), first.clone());
        self.write(move |tx| invocations::submit_and_begin(tx, &submission, &first))
            .await
    }

    async fn finish_invoke_request(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        let (env, caller, key) = (env.clone(), caller.clone(), key.clone());
        self.write(move |tx| invocations::finish_invoke_request(tx, &env, &caller, &key))
            .await
    }

    async fn change_effect(&self, change: &EffectChange) -> StoreResult<()> {
        let change = change.clone();
        self.write(move |tx| invocations::change_effect(tx, &change))
            .await
    }

    async fn change_effect_and_read(&self, change: &EffectChange) -> StoreResult<InvocationRecord> {
        let change = change.clone();
        self.write(move |tx| {
            invocations::change_effect(tx, &change)?;
            invocations::invocation_of_effect(tx, &change.env_id, &change.effect_id)
        })
        .await
    }

    async fn append_evidence(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        evidence: &NewEvidence,
        actor: &Actor,
    ) -> StoreResult<()> {
        let (env, effect, evidence, actor) =
            (env.clone(), effect.clone(), evidence.clone(), actor.clone());
        self.write(move |tx| invocations::append_evidence(tx, &env, &effect, &evidence, &actor))
            .await
    }

    async fn due_for_reconcile(
        &self,
        now: Millis,
        limit: u32,
        claim_until: Millis,
    ) -> StoreResult<Vec<ReconcileDue>> {
        self.write(move |tx| invocations::due_for_reconcile(tx, now, limit, claim_until))
            .await
    }

    async fn schedule_reconcile(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        next_at: Option<Millis>,
    ) -> StoreResult<()> {
        let (env, effect) = (env.clone(), effect.clone());
        self.write(move |tx| invocations::schedule_reconcile(tx, &env, &effect, next_at))
            .await
    }

    async fn invocation(
        &self,
        env: &EnvironmentId,
        id: &InvocationId,
    ) -> StoreResult<Option<InvocationRecord>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |c| invocations::invocation(c, &env, &id))
            .await
    }

    async fn invocation_by_operation_key(
        &self,
        env: &EnvironmentId,
        action: &ActionId,
        operation_key: &OperationKey,
    ) -> StoreResult<Option<InvocationRecord>> {
        let (env, action, key) = (env.clone(), action.clone(), operation_key.clone());
        self.read(move |c| invocations::invocation_by_operation_key(c, &env, &action, &key))
            .await
    }

    async fn list_invocations(
        &self,
        env: &EnvironmentId,
        filter: &InvocationFilter,
    ) -> StoreResult<Page<InvocationRecord>> {
        let (env, filter) = (env.clone(), filter.clone());
        self.read(move |c| invocations::list_invocations(c, &env, &filter))
            .await
    }

    async fn effect(
        &self,
        env: &EnvironmentId,
        id: &EffectId,
    ) -> StoreResult<Option<EffectDetail>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |c| invocations::effect(c, &env, &id)).await
    }

    async fn list_effects(
        &self,
        env: &EnvironmentId,
        filter: &EffectFilter,
    ) -> StoreResult<Page<EffectRecord>> {
        let (env, filter) = (env.clone(), filter.clone());
        self.read(move |c| invocations::list_effects(c, &env, &filter))
            .await
    }

    async fn create_approval(
        &self,
        env: &EnvironmentId,
        approval: &NewApproval,
        requested_by: &KeyId,
        now: Millis,
    ) -> StoreResult<ApprovalRecord> {
        let (env, approval, by) = (env.clone(), approval.clone(), requested_by.clone());
        self.write(move |tx| approvals::create(tx, &env, &approval, &by, now))
            .await
    }

    async fn approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |c| approvals::approval(c, &env, &id)).await
    }

    async fn list_approvals(
        &self,
        env: &EnvironmentId,
        filter: &ApprovalFilter,
    ) -> StoreResult<Page<ApprovalRecord>> {
        let (env, filter) = (env.clone(), filter.clone());
        self.read(move |c| approvals::list(c, &env, &filter)).await
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
        let (env, id, key, note, replica) = (
            env.clone(),
            id.clone(),
            key.clone(),
            note.map(str::to_string),
            replica.clone(),
        );
        self.write(move |tx| {
            approvals::decide(
                tx,
                &env,
                &id,
                &key,
                decision,
                note.as_deref(),
                now,
                &replica,
            )
        })
        .await
    }

    async fn expire_approvals(&self, now: Millis) -> StoreResult<Vec<ApprovalId>> {
        self.write(move |tx| approvals::expire_due(tx, now)).await
    }

    async fn idempotency_begin(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        fingerprint: &str,
        now: Millis,
        owner: &ReplicaId,
    ) -> StoreResult<IdempotencyBegin> {
        let (env, caller, key, fingerprint, owner) = (
            env.clone(),
            caller.clone(),
            key.clone(),
            fingerprint.to_string(),
            owner.clone(),
        );
        self.write(move |tx| idempotency::begin(tx, &env, &caller, &key, &fingerprint, now, &owner))
            .await
    }

    async fn idempotency_finish(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
        status: u16,
        body: &Value,
        _now: Millis,
    ) -> StoreResult<()> {
        let (env, caller, key, body) = (env.clone(), caller.clone(), key.clone(), body.clone());
        self.write(move |tx| idempotency::finish(tx, &env, &caller, &key, status, &body))
            .await
    }

    async fn idempotency_abandon(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        let (env, caller, key) = (env.clone(), caller.clone(), key.clone());
        self.write(move |tx| idempotency::abandon(tx, &env, &caller, &key))
            .await
    }

    async fn create_policy(
        &self,
        policy: &PolicyRecord,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<()> {
        let (policy, note, actor) = (
            policy.clone(),
            change_note.map(str::to_string),
            actor.clone(),
        );
        self.write(move |tx| policies::create(tx, &policy, note.as_deref(), &actor))
            .await
    }

    async fn update_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        expected_version: u32,
        spec: &policy::PolicySpec,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<PolicyRecord> {
        let (env, id, spec, note, actor) = (
            env.clone(),
            id.clone(),
            spec.clone(),
            change_note.map(str::to_string),
            actor.clone(),
        );
        self.write(move |tx| {
            policies::update(
                tx,
                &env,
                &id,
                expected_version,
                &spec,
                note.as_deref(),
                &actor,
            )
        })
        .await
    }

    async fn delete_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, id, note, actor) = (
            env.clone(),
            id.clone(),
            change_note.map(str::to_string),
            actor.clone(),
        );
        self.write(move |tx| policies::delete(tx, &env, &id, note.as_deref(), &actor))
            .await
    }

    async fn policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Option<PolicyRecord>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |c| policies::policy(c, &env, &id)).await
    }

    async fn list_policies(&self, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>> {
        let env = env.clone();
        self.read(move |c| policies::list(c, &env)).await
    }

    async fn policy_versions(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Vec<PolicyVersion>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |c| policies::versions(c, &env, &id)).await
    }

    async fn create_limit(&self, limit: &LimitRecord, actor: &Actor) -> StoreResult<()> {
        let (limit, actor) = (limit.clone(), actor.clone());
        self.write(move |tx| limits::create(tx, &limit, &actor))
            .await
    }

    async fn update_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        name: Option<&str>,
        amount: Option<i64>,
        actor: &Actor,
    ) -> StoreResult<LimitRecord> {
        let (env, id, name, actor) = (
            env.clone(),
            id.clone(),
            name.map(str::to_string),
            actor.clone(),
        );
        self.write(move |tx| limits::update(tx, &env, &id, name.as_deref(), amount, &actor))
            .await
    }

    async fn archive_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, id, actor) = (env.clone(), id.clone(), actor.clone());
        self.write(move |tx| limits::archive(tx, &env, &id, &actor))
            .await
    }

    async fn limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        now: Millis,
    ) -> StoreResult<Option<LimitStatus>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |c| limits::limit(c, &env, &id, now)).await
    }

    async fn list_limits(
        &self,
        env: &EnvironmentId,
        include_archived: bool,
        now: Millis,
    ) -> StoreResult<Vec<LimitStatus>> {
        let env = env.clone();
        self.read(move |c| limits::list(c, &env, include_archived, now))
            .await
    }

    async fn reserve_impact(&self, request: &ImpactRequest) -> StoreResult<ReserveOutcome> {
        let request = request.clone();
        self.write(move |tx| limits::reserve(tx, &request)).await
    }

    async fn set_halted(
        &self,
        env: &EnvironmentId,
        halted: bool,
        reason: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<Environment> {
        let (env, reason, actor) = (env.clone(), reason.map(str::to_string), actor.clone());
        self.write(move |tx| admin::set_halted(tx, &env, halted, reason.as_deref(), &actor))
            .await
    }

    async fn ready_invocations(&self, env: &EnvironmentId) -> StoreResult<Vec<InvocationRecord>> {
        let env = env.clone();
        self.read(move |c| admin::ready_invocations(c, &env)).await
    }

    async fn heartbeat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<()> {
        let replica = replica.clone();
        self.write(move |tx| recover::heartbeat(tx, &replica, now))
            .await
    }

    async fn recover(&self, sweep: &Sweep) -> StoreResult<RecoveryReport> {
        let sweep = sweep.clone();
        self.write(move |tx| recover::recover(tx, &sweep)).await
    }

    async fn count_unknown(&self) -> StoreResult<u64> {
        self.read(|c| {
            c.query_row(
                "SELECT COUNT(*) FROM effects WHERE state = 'unknown'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(conn::unavailable)
        })
        .await
    }

    async fn audit_events(&self, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
        self.read(move |c| audit_log::events(c, after, limit)).await
    }

    async fn unsealed_audit_events(
        &self,
        after_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<AuditEvent>> {
        self.read(move |c| audit_log::unsealed(c, after_id, limit))
            .await
    }

    async fn audit_head(&self) -> StoreResult<crate::audit::AuditHead> {
        self.read(audit_log::head).await
    }

    async fn seal_audit(
        &self,
        seal: &crate::audit::AuditSeal,
    ) -> StoreResult<crate::audit::SealOutcome> {
        audit_log::seal(self, seal).await
    }
}
