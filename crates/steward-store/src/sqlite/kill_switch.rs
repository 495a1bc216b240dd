//! The kill switch: halting an environment, and the work a halt parked.

use super::audit_log::{append, AuditEntry};
use super::conn::unavailable;
use super::identity::environment;
use super::rows::{self, query_all};
use super::SqliteStore;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::store::{HaltChange, KillSwitch, UnkeyedChange};
use async_trait::async_trait;
use rusqlite::{params, Connection};
use steward_core::EnvironmentId;

/// True while the environment is halted. Read inside the transaction that records an attempt,
/// so no attempt committed after a halt can be sent.
pub(crate) fn is_halted(conn: &Connection, env: &EnvironmentId) -> StoreResult<bool> {
    Ok(environment(conn, env)?.is_some_and(|e| e.halted))
}

#[async_trait]
impl KillSwitch for SqliteStore {
    async fn set_halted(&self, change: HaltChange<'_>, actor: &Actor) -> StoreResult<Environment> {
        let (env, halted) = (change.env.clone(), change.halted);
        let (reason, actor) = (change.reason().map(str::to_string), actor.clone());
        self.write(move |tx| {
            let reason = reason.as_deref();
            let before = environment(tx, &env)?.ok_or_else(StoreError::environment_not_found)?;
            tx.execute(
                "UPDATE environments SET halted = ?1, halt_reason = ?2 WHERE id = ?3",
                params![halted, reason, env.as_str()],
            )
            .map_err(unavailable)?;
            append(tx, &actor, AuditEntry::halt(&before, halted, reason))?;
            environment(tx, &env)?.ok_or_else(StoreError::environment_not_found)
        })
        .await
    }

    async fn set_unkeyed_invokes(
        &self,
        change: UnkeyedChange<'_>,
        actor: &Actor,
    ) -> StoreResult<Environment> {
        let (env, setting, actor) = (change.env.clone(), change.setting, actor.clone());
        self.write(move |tx| {
            let before = environment(tx, &env)?.ok_or_else(StoreError::environment_not_found)?;
            tx.execute(
                "UPDATE environments SET unkeyed_invokes = ?1 WHERE id = ?2",
                params![setting.as_str(), env.as_str()],
            )
            .map_err(unavailable)?;
            append(tx, &actor, AuditEntry::unkeyed_invokes(&before, setting))?;
            environment(tx, &env)?.ok_or_else(StoreError::environment_not_found)
        })
        .await
    }

    async fn ready_invocations(&self, env: &EnvironmentId) -> StoreResult<Vec<InvocationRecord>> {
        let env = env.clone();
        self.read(move |conn| {
            let sql = format!(
                "SELECT {} FROM invocations WHERE env_id = ?1 AND state = 'ready' ORDER BY created_at, id",
                rows::INVOCATION_COLUMNS
            );
            query_all(conn, &sql, &[&env.as_str()], rows::invocation)
        })
        .await
    }
}
