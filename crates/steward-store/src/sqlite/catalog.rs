//! Secrets, the master key's check value, and actions with their versions.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{constraint, unavailable};
use super::rows::{self, query_all, query_one};
use super::SqliteStore;
use crate::approval_change::Cancellation;
use crate::catalog_entries;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::store::Catalog;
use async_trait::async_trait;
use rusqlite::{params, Connection, Transaction};
use serde_json::json;
use steward_core::{ActionDefinition, ActionId, EnvironmentId};

pub(crate) fn secret(
    conn: &Connection,
    env: &EnvironmentId,
    name: &str,
) -> StoreResult<Option<SecretRecord>> {
    let sql = format!(
        "SELECT {} FROM secrets WHERE env_id = ?1 AND name = ?2",
        rows::SECRET_COLUMNS
    );
    query_one(conn, &sql, &[&env.as_str(), &name], rows::secret)
}

/// The settings row naming the master key's check value.
const MASTER_KEY_CHECK: &str = "master_key_check";

pub(crate) fn master_key_check(conn: &Connection) -> StoreResult<Option<String>> {
    query_one(
        conn,
        "SELECT value FROM settings WHERE name = ?1",
        &[&MASTER_KEY_CHECK],
        |row| rows::col::<String>(row, 0),
    )
}

fn insert_version(
    tx: &Transaction<'_>,
    id: &ActionId,
    version: u32,
    def: &ActionDefinition,
    actor: &Actor,
) -> StoreResult<String> {
    let raw = serde_json::to_string(def).map_err(|e| rows::corrupt("action definition", e))?;
    tx.execute(
        "INSERT INTO action_versions (action_id, version, definition, created_at, created_by) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id.as_str(), version, raw, actor.now.0, actor.key.as_ref().map(|k| k.to_string())],
    )
    .map_err(unavailable)?;
    Ok(raw)
}

pub(crate) fn action(
    conn: &Connection,
    env: &EnvironmentId,
    reference: &str,
) -> StoreResult<Option<ActionRecord>> {
    let column = catalog_entries::reference_column(reference);
    let sql = format!(
        "SELECT {} FROM {} WHERE a.env_id = ?1 AND {column} = ?2 AND a.deleted_at IS NULL",
        rows::ACTION_COLUMNS,
        rows::ACTION_FROM
    );
    query_one(conn, &sql, &[&env.as_str(), &reference], rows::action)
}

#[async_trait]
impl Catalog for SqliteStore {
    async fn put_secret(
        &self,
        record: &SecretRecord,
        expected_version: Option<u32>,
        actor: &Actor,
    ) -> StoreResult<SecretRecord> {
        let (s, actor) = (record.clone(), actor.clone());
        self.write(move |tx| {
            let existing = secret(tx, &s.env_id, &s.name)?;
            let found = existing.as_ref().map(|e| e.version);
            if found != expected_version {
                return Err(StoreError::VersionConflict {
                    expected: expected_version.unwrap_or(0),
                    found: found.unwrap_or(0),
                });
            }
            let version = found.unwrap_or(0) + 1;
            let created_at = existing.as_ref().map(|e| e.created_at).unwrap_or(actor.now);
            let hosts = s.allowed_hosts.as_ref().map(|h| json!(h).to_string());
            let placements = s.allowed_placements.as_ref().map(|p| json!(p).to_string());
            tx.execute(
                "INSERT INTO secrets (env_id, name, nonce, ciphertext, description, allowed_hosts, allowed_placements, version, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (env_id, name) DO UPDATE SET nonce = excluded.nonce, ciphertext = excluded.ciphertext,
           description = excluded.description, allowed_hosts = excluded.allowed_hosts,
           allowed_placements = excluded.allowed_placements, version = excluded.version, updated_at = excluded.updated_at",
                params![s.env_id.as_str(), s.name, s.nonce, s.ciphertext, s.description, hosts, placements, version, created_at.0, actor.now.0],
            )
            .map_err(|e| constraint(e, "secret"))?;
            let stored = secret(tx, &s.env_id, &s.name)?.ok_or(StoreError::NotFound { what: "secret" })?;
            append(
                tx,
                &actor,
                catalog_entries::secret_put(existing.as_ref(), &stored),
            )?;
            Ok(stored)
        })
        .await
    }

    async fn secret(&self, env: &EnvironmentId, name: &str) -> StoreResult<Option<SecretRecord>> {
        let (env, name) = (env.clone(), name.to_string());
        self.read(move |conn| secret(conn, &env, &name)).await
    }

    async fn list_secrets(&self, env: &EnvironmentId) -> StoreResult<Vec<SecretRecord>> {
        let env = env.clone();
        self.read(move |conn| {
            let sql = format!(
                "SELECT {} FROM secrets WHERE env_id = ?1 ORDER BY name",
                rows::SECRET_COLUMNS
            );
            query_all(conn, &sql, &[&env.as_str()], rows::secret)
        })
        .await
    }

    async fn delete_secret(
        &self,
        env: &EnvironmentId,
        name: &str,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, name, actor) = (env.clone(), name.to_string(), actor.clone());
        self.write(move |tx| {
            let Some(existing) = secret(tx, &env, &name)? else {
                return Ok(false);
            };
            tx.execute(
                "DELETE FROM secrets WHERE env_id = ?1 AND name = ?2",
                params![env.as_str(), name],
            )
            .map_err(unavailable)?;
            append(tx, &actor, catalog_entries::secret_deleted(&existing))?;
            Ok(true)
        })
        .await
    }

    async fn master_key_check(&self) -> StoreResult<Option<String>> {
        self.read(master_key_check).await
    }

    async fn init_master_key_check(&self, check: &str, actor: &Actor) -> StoreResult<String> {
        let (check, actor) = (check.to_string(), actor.clone());
        self.write(move |tx| {
            if let Some(stored) = master_key_check(tx)? {
                return Ok(stored);
            }
            tx.execute(
                "INSERT INTO settings (name, value) VALUES (?1, ?2)",
                params![MASTER_KEY_CHECK, check],
            )
            .map_err(unavailable)?;
            append(
                tx,
                &actor,
                AuditEntry::global(AuditKind::VaultKeyCheckRecorded, MASTER_KEY_CHECK),
            )?;
            Ok(check.to_string())
        })
        .await
    }

    async fn any_secret(&self) -> StoreResult<Option<SecretRecord>> {
        self.read(|conn| {
            let sql = format!(
                "SELECT {} FROM secrets ORDER BY created_at, env_id, name LIMIT 1",
                rows::SECRET_COLUMNS
            );
            query_one(conn, &sql, &[], rows::secret)
        })
        .await
    }

    async fn create_action(&self, action: &ActionRecord, actor: &Actor) -> StoreResult<()> {
        let (a, actor) = (action.clone(), actor.clone());
        self.write(move |tx| {
            tx.execute(
                "INSERT INTO actions (id, env_id, name, version, created_at, updated_at) VALUES (?1, ?2, ?3, 1, ?4, ?4)",
                params![a.id.as_str(), a.env_id.as_str(), a.name, actor.now.0],
            )
            .map_err(|e| constraint(e, "action"))?;
            insert_version(tx, &a.id, 1, &a.definition, &actor)?;
            append(
                tx,
                &actor,
                catalog_entries::action_created(&a),
            )
        })
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
        let (env, id, expected) = (env.clone(), id.clone(), expected_version);
        let (def, actor) = (definition.clone(), actor.clone());
        self.write(move |tx| {
            let current = action(tx, &env, id.as_str())?.ok_or(StoreError::NotFound { what: "action" })?;
            let version = catalog_entries::next_version(current.version, expected)?;
            tx.execute(
                "UPDATE actions SET version = ?1, name = ?2, updated_at = ?3 WHERE id = ?4 AND version = ?5",
                params![version, def.name, actor.now.0, id.as_str(), expected],
            )
            .map_err(|e| constraint(e, "action"))?;
            insert_version(tx, &id, version, &def, &actor)?;
            append(
                tx,
                &actor,
                catalog_entries::action_updated(&current, version, &def),
            )?;
            if let Some(why) = Cancellation::of_update(current.definition.enabled, def.enabled) {
                super::approvals::cancel_for_action(tx, &env, &id, why, actor.now)?;
            }
            action(tx, &env, id.as_str())?.ok_or(StoreError::NotFound { what: "action" })
        })
        .await
    }

    async fn action(
        &self,
        env: &EnvironmentId,
        reference: &str,
    ) -> StoreResult<Option<ActionRecord>> {
        let (env, reference) = (env.clone(), reference.to_string());
        self.read(move |conn| action(conn, &env, &reference)).await
    }

    async fn list_actions(&self, env: &EnvironmentId) -> StoreResult<Vec<ActionRecord>> {
        let env = env.clone();
        self.read(move |conn| {
            let sql = format!(
                "SELECT {} FROM {} WHERE a.env_id = ?1 AND a.deleted_at IS NULL ORDER BY a.created_at, a.id",
                rows::ACTION_COLUMNS,
                rows::ACTION_FROM
            );
            query_all(conn, &sql, &[&env.as_str()], rows::action)
        })
        .await
    }

    async fn delete_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, id, actor) = (env.clone(), id.clone(), actor.clone());
        self.write(move |tx| {
            let changed = tx
                .execute(
                    "UPDATE actions SET deleted_at = ?1 WHERE env_id = ?2 AND id = ?3 AND deleted_at IS NULL",
                    params![actor.now.0, env.as_str(), id.as_str()],
                )
                .map_err(unavailable)?;
            if changed > 0 {
                append(
                    tx,
                    &actor,
                    catalog_entries::action_deleted(&env, &id),
                )?;
                super::approvals::cancel_for_action(tx, &env, &id, Cancellation::ActionDeleted, actor.now)?;
            }
            Ok(changed > 0)
        })
        .await
    }

    async fn action_versions(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
    ) -> StoreResult<Vec<ActionVersion>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |conn| {
            let sql = "SELECT v.action_id, v.version, v.definition, v.created_at, v.created_by
               FROM action_versions v JOIN actions a ON a.id = v.action_id
               WHERE a.env_id = ?1 AND a.id = ?2 ORDER BY v.version";
            query_all(conn, sql, &[&env.as_str(), &id.as_str()], |row| {
                let raw: String = rows::col(row, 2)?;
                Ok(ActionVersion {
                    action_id: ActionId::parse(&rows::col::<String>(row, 0)?)
                        .map_err(|e| rows::corrupt("id", e))?,
                    version: rows::col(row, 1)?,
                    definition: rows::definition(&raw)?,
                    created_at: steward_core::Millis(rows::col(row, 3)?),
                    created_by: rows::col::<Option<String>>(row, 4)?
                        .map(|k| steward_core::KeyId::parse(&k).map_err(|e| rows::corrupt("id", e)))
                        .transpose()?,
                })
            })
        })
        .await
    }
}
