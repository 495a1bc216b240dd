//! The kill switch: halting an environment, and the work a halt parked.

use super::audit_log::{append, AuditEntry};
use super::conn::{in_transaction, Mode};
use super::conn::{Params, Statement, Tx, ENV_LOCK_SHARED_SQL};
use super::identity::environment;
use super::rows;
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::store::{HaltChange, KillSwitch, UnkeyedChange};
use async_trait::async_trait;
use steward_core::EnvironmentId;

/// True while the environment is halted. Read inside the transaction that records an attempt,
/// under the environment's lock, held shared until that transaction ends: a halt waits for it to
/// commit, and a halt committed before the lock was granted is read here. So no attempt
/// committed after a halt can be sent.
pub(crate) async fn is_halted(tx: &Tx<'_>, env: &EnvironmentId) -> StoreResult<bool> {
    let env = env.as_str();
    let params: &Params<'_> = &[&env];
    // The lock and the read go together (one round trip); the read's snapshot is taken once
    // the lock is granted.
    let mut statements: Vec<Statement<'_>> = Vec::with_capacity(2);
    if tx.shares_environment(env) {
        statements.push((ENV_LOCK_SHARED_SQL, params));
    }
    statements.push(("SELECT halted FROM environments WHERE id = $1", params));
    let results = tx.pipeline(&statements).await?;
    match results.last().and_then(|rows| rows.first()) {
        Some(row) => rows::col(row, 0),
        None => Ok(false),
    }
}

#[async_trait]
impl KillSwitch for PostgresStore {
    async fn set_halted(&self, change: HaltChange<'_>, actor: &Actor) -> StoreResult<Environment> {
        let (env, halted, reason) = (change.env, change.halted, change.reason());
        in_transaction!(self, Mode::Write, |tx| async {
            // Waits for every transaction recording an attempt in this environment to commit;
            // every later one waits for this one and reads what it set.
            tx.lock_environment(env.as_str()).await?;
            let before = environment(&tx, env)
                .await?
                .ok_or_else(StoreError::environment_not_found)?;
            tx.execute(
                "UPDATE environments SET halted = $1, halt_reason = $2 WHERE id = $3",
                &[&halted, &reason, &env.as_str()],
            )
            .await?;
            append(&tx, actor, AuditEntry::halt(&before, halted, reason)).await?;
            environment(&tx, env)
                .await?
                .ok_or_else(StoreError::environment_not_found)
        })
    }

    async fn set_unkeyed_invokes(
        &self,
        change: UnkeyedChange<'_>,
        actor: &Actor,
    ) -> StoreResult<Environment> {
        let UnkeyedChange { env, setting } = change;
        in_transaction!(self, Mode::Write, |tx| async {
            let before = environment(&tx, env)
                .await?
                .ok_or_else(StoreError::environment_not_found)?;
            tx.execute(
                "UPDATE environments SET unkeyed_invokes = $1 WHERE id = $2",
                &[&setting.as_str(), &env.as_str()],
            )
            .await?;
            append(&tx, actor, AuditEntry::unkeyed_invokes(&before, setting)).await?;
            environment(&tx, env)
                .await?
                .ok_or_else(StoreError::environment_not_found)
        })
    }

    async fn ready_invocations(&self, env: &EnvironmentId) -> StoreResult<Vec<InvocationRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT {} FROM invocations WHERE env_id = $1 AND state = 'ready' ORDER BY created_at, id",
                rows::INVOCATION_COLUMNS
            );
            tx.all(&sql, &[&env.as_str()], rows::invocation).await
        })
    }
}
