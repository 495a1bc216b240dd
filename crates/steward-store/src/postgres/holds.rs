//! Holds: an operator's hold on an action or an operation key (`store::Holds`).

use super::audit_log::{append, AuditEntry};
use super::conn::{in_transaction, Mode, Tx};
use super::rows::col;
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::hold_rows::{covered_sql, hold, HOLD_COLUMNS};
use crate::records::{Actor, HoldRecord};
use crate::store::Holds;
use async_trait::async_trait;
use std::sync::LazyLock;
use steward_core::{EffectId, EnvironmentId, HoldId};

static COVERED_SQL: LazyLock<String> = LazyLock::new(|| covered_sql("$1", "$2"));

/// True when a hold of the environment covers the effect's invocation. Read inside the
/// transaction that would record the first attempt, after the environment's lock was taken
/// shared (reading the kill switch takes it): `create_hold` takes it exclusively, so a hold
/// committed before the lock was granted is read here, and none commits until this ends.
pub(crate) async fn is_held(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    effect: &EffectId,
) -> StoreResult<bool> {
    match tx
        .query_first(&COVERED_SQL, &[&env.as_str(), &effect.as_str()])
        .await?
    {
        Some(row) => col(&row, 0),
        None => Ok(false),
    }
}

#[async_trait]
impl Holds for PostgresStore {
    async fn create_hold(&self, record: &HoldRecord, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            // Waits for every transaction recording an attempt in this environment to commit;
            // every later one waits for this one and reads the hold.
            tx.lock_environment(record.env_id.as_str()).await?;
            tx.execute_unique(
                "hold",
                "INSERT INTO holds (id, env_id, action_name, operation_key, reason, created_by, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &record.id.as_str(),
                    &record.env_id.as_str(),
                    &record.action_name,
                    &record.operation_key,
                    &record.reason,
                    &record.created_by,
                    &record.created_at.0,
                ],
            )
            .await?;
            append(&tx, actor, AuditEntry::hold(record, false)).await
        })
    }

    async fn list_holds(&self, env: &EnvironmentId) -> StoreResult<Vec<HoldRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT {HOLD_COLUMNS} FROM holds WHERE env_id = $1 ORDER BY created_at, id"
            );
            tx.all(&sql, &[&env.as_str()], hold).await
        })
    }

    async fn release_hold(
        &self,
        env: &EnvironmentId,
        id: &HoldId,
        actor: &Actor,
    ) -> StoreResult<HoldRecord> {
        in_transaction!(self, Mode::Write, |tx| async {
            let sql =
                format!("DELETE FROM holds WHERE env_id = $1 AND id = $2 RETURNING {HOLD_COLUMNS}");
            let found = tx
                .one(&sql, &[&env.as_str(), &id.as_str()], hold)
                .await?
                .ok_or(StoreError::NotFound { what: "hold" })?;
            append(&tx, actor, AuditEntry::hold(&found, true)).await?;
            Ok(found)
        })
    }
}
