//! The shared store: PostgreSQL, for several Steward replicas on one database.
//!
//! Semantics are the embedded store's, method for method, and every rule is held by the
//! database, never by process memory: unique indexes (one effect per operation key, one live
//! action per name, one retry per failed invocation), compare-and-set updates on an effect's
//! state and on versions, and one transaction-scoped advisory lock that orders writes across
//! every connection and replica (see `conn`: taken first by most writes, and only at commit by
//! the invoke hot path). The audit hash chain is sealed off the commit path (`audit_log`).
//! Constraint violations map to the same [`StoreError`](crate::StoreError) variants as SQLite's:
//! a unique violation (23505) is `Duplicate`, a foreign key violation (23503) is
//! `NotFound { what: "environment" }`, a connection or I/O failure is `Unavailable`, a row that
//! does not decode is `Corrupt`.
//!
//! Durability: a method returns `Ok` only after PostgreSQL acknowledged the `COMMIT`, and with
//! `synchronous_commit` on (the default, checked on connect) PostgreSQL acknowledges a commit only
//! once its write-ahead log record is flushed to disk: that flush is the fsync the crash contract
//! of [`Store`] promises. Where `synchronous_commit` is `remote_write`, `remote_apply` or `on`
//! with synchronous standbys, the commit also waited for them.

mod admin;
mod approvals;
mod audit_log;
pub(crate) mod conn;
mod console_sessions;
mod idempotency;
mod invocations;
mod limits;
mod notify;
mod policies;
mod recover;
mod replicas;
mod rows;
mod schema;

use crate::console_session::ConsoleSessionRecord;
use crate::error::{StoreError, StoreResult};
use crate::governance::*;
use crate::records::*;
use crate::store::Store;
use async_trait::async_trait;
use conn::{in_transaction, Mode};
use deadpool_postgres::Pool;
use serde_json::Value;
use std::sync::Arc;
use steward_core::*;
use tokio::sync::broadcast;

/// The PostgreSQL store. Cheap to clone; clones share the connection pool, the heartbeat
/// connection and the approval listener.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    heartbeats: Arc<replicas::Heartbeats>,
    announcements: Arc<notify::Announcements>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool.status())
            .finish()
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host:port/database`, or a `key=value` connection
    /// string), checks that commits are durable, and brings the schema up to date. Safe to call
    /// from several replicas at once: migrations are applied exactly once. No TLS: run it on
    /// loopback or a trusted network.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let config = conn::config(url)?;
        let store = Self {
            pool: conn::pool(&config)?,
            heartbeats: Arc::new(replicas::Heartbeats::new(config.clone())),
            announcements: Arc::new(notify::Announcements::new(config)),
        };
        store.check_durable_commits().await?;
        in_transaction!(store, Mode::Write, |tx| schema::migrate(&tx))?;
        Ok(store)
    }

    /// Refuses a server that acknowledges commits before they are on disk.
    async fn check_durable_commits(&self) -> StoreResult<()> {
        let client = conn::client(&self.pool).await?;
        let row = client
            .query_one("SHOW synchronous_commit", &[])
            .await
            .map_err(conn::unavailable)?;
        let setting: &str = rows::col(&row, 0)?;
        if setting == "off" {
            return Err(StoreError::Unavailable {
                message: "PostgreSQL has synchronous_commit=off: a commit could be lost after it \
                          returned, which breaks the store's crash contract; set it to on"
                    .into(),
                source: None,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn ensure_environment(
        &self,
        name: &str,
        new_id: &EnvironmentId,
        actor: &Actor,
    ) -> StoreResult<Environment> {
        in_transaction!(self, Mode::Write, |tx| admin::ensure_environment(
            &tx, name, new_id, actor
        ))
    }

    async fn environment(&self, id: &EnvironmentId) -> StoreResult<Option<Environment>> {
        in_transaction!(self, Mode::Read, |tx| admin::environment(&tx, id))
    }

    async fn insert_key(&self, key: &ApiKeyRecord, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| admin::insert_key(&tx, key, actor))
    }

    async fn key_by_hash(&self, token_hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
        in_transaction!(self, Mode::Read, |tx| admin::key_by_hash(&tx, token_hash))
    }

    async fn key(&self, id: &KeyId) -> StoreResult<Option<ApiKeyRecord>> {
        in_transaction!(self, Mode::Read, |tx| admin::key(&tx, id))
    }

    async fn revoke_key(&self, id: &KeyId, actor: &Actor) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| admin::revoke_key(&tx, id, actor))
    }

    async fn rotate_key(&self, rotation: &KeyRotation, actor: &Actor) -> StoreResult<ApiKeyRecord> {
        in_transaction!(self, Mode::Write, |tx| admin::rotate_key(
            &tx, rotation, actor
        ))
    }

    async fn mark_key_used(&self, id: &KeyId, at: Millis) -> StoreResult<()> {
        // No audit event, so the write lock is never taken: bookkeeping does not queue behind
        // (or hold up) the audited writes.
        in_transaction!(self, Mode::WriteLate, |tx| admin::mark_key_used(
            &tx, id, at
        ))
    }

    async fn create_console_session(
        &self,
        session: &ConsoleSessionRecord,
        actor: &Actor,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| console_sessions::create(
            &tx, session, actor
        ))
    }

    async fn console_session(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ConsoleSessionRecord, ApiKeyRecord, Environment)>> {
        in_transaction!(self, Mode::Read, |tx| console_sessions::lookup(
            &tx, token_hash, now
        ))
    }

    async fn end_console_session(&self, token_hash: &str, actor: &Actor) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| console_sessions::end(
            &tx, token_hash, actor
        ))
    }

    async fn master_key_check(&self) -> StoreResult<Option<String>> {
        in_transaction!(self, Mode::Read, |tx| admin::master_key_check(&tx))
    }

    async fn init_master_key_check(&self, check: &str, actor: &Actor) -> StoreResult<String> {
        in_transaction!(self, Mode::Write, |tx| admin::init_master_key_check(
            &tx, check, actor
        ))
    }

    async fn any_secret(&self) -> StoreResult<Option<SecretRecord>> {
        in_transaction!(self, Mode::Read, |tx| admin::any_secret(&tx))
    }

    async fn caller(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ApiKeyRecord, Environment)>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let Some(key) = admin::key_by_hash(&tx, token_hash)
                .await?
                .filter(|k| k.usable_at(now))
            else {
                return Ok(None);
            };
            Ok(admin::environment(&tx, &key.env_id)
                .await?
                .map(|env| (key, env)))
        })
    }

    async fn list_keys(&self) -> StoreResult<Vec<ApiKeyRecord>> {
        in_transaction!(self, Mode::Read, |tx| admin::list_keys(&tx))
    }

    async fn put_secret(
        &self,
        secret: &SecretRecord,
        expected_version: Option<u32>,
        actor: &Actor,
    ) -> StoreResult<SecretRecord> {
        in_transaction!(self, Mode::Write, |tx| admin::put_secret(
            &tx,
            secret,
            expected_version,
            actor
        ))
    }

    async fn secret(&self, env: &EnvironmentId, name: &str) -> StoreResult<Option<SecretRecord>> {
        in_transaction!(self, Mode::Read, |tx| admin::secret(&tx, env, name))
    }

    async fn list_secrets(&self, env: &EnvironmentId) -> StoreResult<Vec<SecretRecord>> {
        in_transaction!(self, Mode::Read, |tx| admin::list_secrets(&tx, env))
    }

    async fn delete_secret(
        &self,
        env: &EnvironmentId,
        name: &str,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| admin::delete_secret(
            &tx, env, name, actor
        ))
    }

    async fn create_action(&self, action: &ActionRecord, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| admin::create_action(
            &tx, action, actor
        ))
    }

    async fn update_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        expected_version: u32,
        definition: &ActionDefinition,
        actor: &Actor,
    ) -> StoreResult<ActionRecord> {
        in_transaction!(self, Mode::Write, |tx| admin::update_action(
            &tx,
            env,
            id,
            expected_version,
            definition,
            actor
        ))
    }

    async fn action(
        &self,
        env: &EnvironmentId,
        reference: &str,
    ) -> StoreResult<Option<ActionRecord>> {
        in_transaction!(self, Mode::Read, |tx| admin::action(&tx, env, reference))
    }

    async fn list_actions(&self, env: &EnvironmentId) -> StoreResult<Vec<ActionRecord>> {
        in_transaction!(self, Mode::Read, |tx| admin::list_actions(&tx, env))
    }

    async fn delete_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| admin::delete_action(
            &tx, env, id, actor
        ))
    }

    async fn action_versions(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
    ) -> StoreResult<Vec<ActionVersion>> {
        in_transaction!(self, Mode::Read, |tx| admin::action_versions(&tx, env, id))
    }

    async fn submit(&self, submission: &Submission) -> StoreResult<SubmitOutcome> {
        in_transaction!(self, Mode::Write, |tx| invocations::submit(&tx, submission))
    }

    async fn invoke_context(
        &self,
        token_hash: &str,
        now: Millis,
        action: &str,
        idempotency_key: Option<&IdempotencyKey>,
    ) -> StoreResult<Option<InvokeContext>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let Some(caller) = admin::key_by_hash(&tx, token_hash)
                .await?
                .filter(|k| k.usable_at(now))
            else {
                return Ok(None);
            };
            let Some(environment) = admin::environment(&tx, &caller.env_id).await? else {
                return Ok(None);
            };
            let env = &environment.id;
            let action = admin::action(&tx, env, action).await?;
            let mut secrets = Vec::new();
            for name in action.iter().flat_map(|a| secrets_named_by(&a.definition)) {
                secrets.extend(admin::secret(&tx, env, &name).await?);
            }
            Ok(Some(InvokeContext {
                policies: policies::list(&tx, env).await?,
                earlier: match idempotency_key {
                    Some(key) => idempotency::earlier(&tx, env, &caller.id, key).await?,
                    None => None,
                },
                key: caller,
                environment,
                action,
                secrets,
            }))
        })
    }

    async fn submit_and_begin(
        &self,
        submission: &Submission,
        first: &FirstAttempt,
    ) -> StoreResult<Submitted> {
        in_transaction!(self, Mode::WriteLate, |tx| invocations::submit_and_begin(
            &tx, submission, first
        ))
    }

    async fn finish_invoke_request(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::WriteLate, |tx| {
            invocations::finish_invoke_request(&tx, env, caller, key)
        })
    }

    async fn change_effect(&self, change: &EffectChange) -> StoreResult<()> {
        in_transaction!(self, Mode::WriteLate, |tx| invocations::change_effect(
            &tx, change
        ))
    }

    async fn change_effect_and_read(&self, change: &EffectChange) -> StoreResult<InvocationRecord> {
        in_transaction!(self, Mode::WriteLate, |tx| async {
            invocations::change_effect(&tx, change).await?;
            invocations::invocation_of_effect(&tx, &change.env_id, &change.effect_id).await
        })
    }

    async fn append_evidence(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        evidence: &NewEvidence,
        actor: &Actor,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| invocations::append_evidence(
            &tx, env, effect, evidence, actor
        ))
    }

    async fn due_for_reconcile(
        &self,
        now: Millis,
        limit: u32,
        claim_until: Millis,
    ) -> StoreResult<Vec<ReconcileDue>> {
        in_transaction!(self, Mode::Write, |tx| invocations::due_for_reconcile(
            &tx,
            now,
            limit,
            claim_until
        ))
    }

    async fn schedule_reconcile(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
        next_at: Option<Millis>,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| invocations::schedule_reconcile(
            &tx, env, effect, next_at
        ))
    }

    async fn invocation(
        &self,
        env: &EnvironmentId,
        id: &InvocationId,
    ) -> StoreResult<Option<InvocationRecord>> {
        in_transaction!(self, Mode::Read, |tx| invocations::invocation(&tx, env, id))
    }

    async fn invocation_by_operation_key(
        &self,
        env: &EnvironmentId,
        action: &ActionId,
        operation_key: &OperationKey,
    ) -> StoreResult<Option<InvocationRecord>> {
        in_transaction!(self, Mode::Read, |tx| {
            invocations::invocation_by_operation_key(&tx, env, action, operation_key)
        })
    }

    async fn list_invocations(
        &self,
        env: &EnvironmentId,
        filter: &InvocationFilter,
    ) -> StoreResult<Page<InvocationRecord>> {
        in_transaction!(self, Mode::Read, |tx| invocations::list_invocations(
            &tx, env, filter
        ))
    }

    async fn effect(
        &self,
        env: &EnvironmentId,
        id: &EffectId,
    ) -> StoreResult<Option<EffectDetail>> {
        in_transaction!(self, Mode::Read, |tx| invocations::effect(&tx, env, id))
    }

    async fn list_effects(
        &self,
        env: &EnvironmentId,
        filter: &EffectFilter,
    ) -> StoreResult<Page<EffectRecord>> {
        in_transaction!(self, Mode::Read, |tx| invocations::list_effects(
            &tx, env, filter
        ))
    }

    async fn create_approval(
        &self,
        env: &EnvironmentId,
        approval: &NewApproval,
        requested_by: &KeyId,
        now: Millis,
    ) -> StoreResult<ApprovalRecord> {
        in_transaction!(self, Mode::Write, |tx| approvals::create(
            &tx,
            env,
            approval,
            requested_by,
            now
        ))
    }

    async fn approval(
        &self,
        env: &EnvironmentId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>> {
        in_transaction!(self, Mode::Read, |tx| approvals::approval(&tx, env, id))
    }

    async fn list_approvals(
        &self,
        env: &EnvironmentId,
        filter: &ApprovalFilter,
    ) -> StoreResult<Page<ApprovalRecord>> {
        in_transaction!(self, Mode::Read, |tx| approvals::list(&tx, env, filter))
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
        in_transaction!(self, Mode::Write, |tx| approvals::decide(
            &tx, env, id, key, decision, note, now, replica
        ))
    }

    async fn expire_approvals(&self, now: Millis) -> StoreResult<Vec<ApprovalId>> {
        in_transaction!(self, Mode::Write, |tx| approvals::expire_due(&tx, now))
    }

    fn approval_events(&self) -> Option<broadcast::Receiver<ApprovalEvent>> {
        Some(self.announcements.subscribe())
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
        in_transaction!(self, Mode::Write, |tx| idempotency::begin(
            &tx,
            env,
            caller,
            key,
            fingerprint,
            now,
            owner
        ))
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
        in_transaction!(self, Mode::Write, |tx| idempotency::finish(
            &tx, env, caller, key, status, body
        ))
    }

    async fn idempotency_abandon(
        &self,
        env: &EnvironmentId,
        caller: &KeyId,
        key: &IdempotencyKey,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| idempotency::abandon(
            &tx, env, caller, key
        ))
    }

    async fn create_policy(
        &self,
        policy: &PolicyRecord,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| policies::create(
            &tx,
            policy,
            change_note,
            actor
        ))
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
        in_transaction!(self, Mode::Write, |tx| policies::update(
            &tx,
            env,
            id,
            expected_version,
            spec,
            change_note,
            actor
        ))
    }

    async fn delete_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| policies::delete(
            &tx,
            env,
            id,
            change_note,
            actor
        ))
    }

    async fn policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Option<PolicyRecord>> {
        in_transaction!(self, Mode::Read, |tx| policies::policy(&tx, env, id))
    }

    async fn list_policies(&self, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>> {
        in_transaction!(self, Mode::Read, |tx| policies::list(&tx, env))
    }

    async fn policy_versions(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Vec<PolicyVersion>> {
        in_transaction!(self, Mode::Read, |tx| policies::versions(&tx, env, id))
    }

    async fn create_limit(&self, limit: &LimitRecord, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| limits::create(&tx, limit, actor))
    }

    async fn update_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        name: Option<&str>,
        amount: Option<i64>,
        actor: &Actor,
    ) -> StoreResult<LimitRecord> {
        in_transaction!(self, Mode::Write, |tx| limits::update(
            &tx, env, id, name, amount, actor
        ))
    }

    async fn archive_limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| limits::archive(&tx, env, id, actor))
    }

    async fn limit(
        &self,
        env: &EnvironmentId,
        id: &LimitId,
        now: Millis,
    ) -> StoreResult<Option<LimitStatus>> {
        in_transaction!(self, Mode::Read, |tx| limits::limit(&tx, env, id, now))
    }

    async fn list_limits(
        &self,
        env: &EnvironmentId,
        include_archived: bool,
        now: Millis,
    ) -> StoreResult<Vec<LimitStatus>> {
        in_transaction!(self, Mode::Read, |tx| limits::list(
            &tx,
            env,
            include_archived,
            now
        ))
    }

    async fn reserve_impact(&self, request: &ImpactRequest) -> StoreResult<ReserveOutcome> {
        in_transaction!(self, Mode::Write, |tx| limits::reserve(&tx, request))
    }

    async fn set_halted(
        &self,
        env: &EnvironmentId,
        halted: bool,
        reason: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<Environment> {
        in_transaction!(self, Mode::Write, |tx| admin::set_halted(
            &tx, env, halted, reason, actor
        ))
    }

    async fn ready_invocations(&self, env: &EnvironmentId) -> StoreResult<Vec<InvocationRecord>> {
        in_transaction!(self, Mode::Read, |tx| admin::ready_invocations(&tx, env))
    }

    async fn heartbeat(&self, replica: &ReplicaId, now: Millis) -> StoreResult<()> {
        self.heartbeats.beat(replica, now).await
    }

    async fn recover(&self, sweep: &Sweep) -> StoreResult<RecoveryReport> {
        // The common case, nothing orphaned, is answered from a snapshot without the lock.
        if !in_transaction!(self, Mode::Read, |tx| recover::anything_orphaned(
            &tx, sweep
        ))? {
            return Ok(RecoveryReport::default());
        }
        in_transaction!(self, Mode::Write, |tx| recover::recover(&tx, sweep))
    }

    async fn count_unknown(&self) -> StoreResult<u64> {
        let n: i64 = in_transaction!(self, Mode::Read, |tx| tx
            .count("SELECT COUNT(*) FROM effects WHERE state = 'unknown'", &[]))?;
        Ok(n as u64)
    }

    async fn audit_events(&self, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>> {
        in_transaction!(self, Mode::Read, |tx| audit_log::events(&tx, after, limit))
    }

    async fn unsealed_audit_events(
        &self,
        after_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<AuditEvent>> {
        in_transaction!(self, Mode::Read, |tx| audit_log::unsealed(
            &tx, after_id, limit
        ))
    }

    async fn audit_head(&self) -> StoreResult<crate::audit::AuditHead> {
        in_transaction!(self, Mode::Read, |tx| audit_log::head(&tx))
    }

    async fn seal_audit(
        &self,
        seal: &crate::audit::AuditSeal,
    ) -> StoreResult<crate::audit::SealOutcome> {
        audit_log::seal(self, seal).await
    }
}
