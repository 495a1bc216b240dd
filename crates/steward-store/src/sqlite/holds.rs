//! Holds: an operator's hold on an action or an operation key (`store::Holds`).

use super::audit_log::{append, AuditEntry};
use super::conn::{constraint, unavailable, CachedQuery};
use super::rows::query_all;
use super::SqliteStore;
use crate::error::{StoreError, StoreResult};
use crate::hold_rows::{covered_sql, hold, HOLD_COLUMNS};
use crate::records::{Actor, HoldRecord};
use crate::store::Holds;
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension};
use std::sync::LazyLock;
use steward_core::{EffectId, EnvironmentId, HoldId};

/// [`covered_sql`] with this store's placeholders, built once so its prepared statement is cached.
static COVERED_SQL: LazyLock<String> = LazyLock::new(|| covered_sql("?1", "?2"));

/// True when a hold of the environment covers the effect's invocation. Read inside the
/// transaction that would record the first attempt (the writer's lock is held), so no first
/// attempt committed after a hold can be sent.
pub(crate) fn is_held(
    conn: &Connection,
    env: &EnvironmentId,
    effect: &EffectId,
) -> StoreResult<bool> {
    conn.query_row_cached(&COVERED_SQL, params![env.as_str(), effect.as_str()], |r| {
        r.get(0)
    })
    .map_err(unavailable)
}

fn find(conn: &Connection, env: &EnvironmentId, id: &HoldId) -> StoreResult<Option<HoldRecord>> {
    let sql = format!("SELECT {HOLD_COLUMNS} FROM holds WHERE env_id = ?1 AND id = ?2");
    let found = conn
        .query_row(&sql, params![env.as_str(), id.as_str()], |r| Ok(hold(r)))
        .optional()
        .map_err(unavailable)?;
    found.transpose()
}

#[async_trait]
impl Holds for SqliteStore {
    async fn create_hold(&self, record: &HoldRecord, actor: &Actor) -> StoreResult<()> {
        let (record, actor) = (record.clone(), actor.clone());
        self.write(move |tx| {
            tx.execute(
                "INSERT INTO holds (id, env_id, action_name, operation_key, reason, created_by, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    record.id.as_str(),
                    record.env_id.as_str(),
                    record.action_name,
                    record.operation_key,
                    record.reason,
                    record.created_by,
                    record.created_at.0
                ],
            )
            .map_err(|e| constraint(e, "hold"))?;
            append(tx, &actor, AuditEntry::hold(&record, false))
        })
        .await
    }

    async fn list_holds(&self, env: &EnvironmentId) -> StoreResult<Vec<HoldRecord>> {
        let env = env.clone();
        self.read(move |conn| {
            let sql = format!(
                "SELECT {HOLD_COLUMNS} FROM holds WHERE env_id = ?1 ORDER BY created_at, id"
            );
            query_all(conn, &sql, &[&env.as_str()], |r| hold(r))
        })
        .await
    }

    async fn release_hold(
        &self,
        env: &EnvironmentId,
        id: &HoldId,
        actor: &Actor,
    ) -> StoreResult<HoldRecord> {
        let (env, id, actor) = (env.clone(), id.clone(), actor.clone());
        self.write(move |tx| {
            let found = find(tx, &env, &id)?.ok_or(StoreError::NotFound { what: "hold" })?;
            tx.execute(
                "DELETE FROM holds WHERE env_id = ?1 AND id = ?2",
                params![env.as_str(), id.as_str()],
            )
            .map_err(unavailable)?;
            append(tx, &actor, AuditEntry::hold(&found, true))?;
            Ok(found)
        })
        .await
    }
}
