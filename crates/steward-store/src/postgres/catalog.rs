//! Secrets, the master key's check value, and actions with their versions.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::Tx;
use super::conn::{in_transaction, Mode};
use super::rows;
use super::PostgresStore;
use crate::approval_change::Cancellation;
use crate::catalog_entries;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::store::Catalog;
use async_trait::async_trait;
use serde_json::json;
use steward_core::{ActionDefinition, ActionId, EnvironmentId, KeyId};

pub(crate) async fn secret(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    name: &str,
) -> StoreResult<Option<SecretRecord>> {
    let sql = format!(
        "SELECT {} FROM secrets WHERE env_id = $1 AND name = $2",
        rows::SECRET_COLUMNS
    );
    tx.one(&sql, &[&env.as_str(), &name], rows::secret).await
}

/// The settings row naming the master key's check value.
const MASTER_KEY_CHECK: &str = "master_key_check";

pub(crate) async fn master_key_check(tx: &Tx<'_>) -> StoreResult<Option<String>> {
    tx.one(
        "SELECT value FROM settings WHERE name = $1",
        &[&MASTER_KEY_CHECK],
        |row| rows::col::<String>(row, 0),
    )
    .await
}

async fn insert_version(
    tx: &Tx<'_>,
    id: &ActionId,
    version: u32,
    def: &ActionDefinition,
    actor: &Actor,
) -> StoreResult<()> {
    let raw = serde_json::to_string(def).map_err(|e| rows::corrupt("action definition", e))?;
    tx.execute(
        "INSERT INTO action_versions (action_id, version, definition, created_at, created_by) VALUES ($1, $2, $3, $4, $5)",
        &[&id.as_str(), &i64::from(version), &raw, &actor.now.0, &actor.key.as_ref().map(KeyId::as_str)],
    )
    .await?;
    Ok(())
}

pub(crate) async fn action(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    reference: &str,
) -> StoreResult<Option<ActionRecord>> {
    let column = catalog_entries::reference_column(reference);
    let sql = format!(
        "SELECT {} FROM {} WHERE a.env_id = $1 AND {column} = $2 AND a.deleted_at IS NULL",
        rows::ACTION_COLUMNS,
        rows::ACTION_FROM
    );
    tx.one(&sql, &[&env.as_str(), &reference], rows::action)
        .await
}

#[async_trait]
impl Catalog for PostgresStore {
    async fn put_secret(
        &self,
        record: &SecretRecord,
        expected_version: Option<u32>,
        actor: &Actor,
    ) -> StoreResult<SecretRecord> {
        // Creates (`expected_version` is `None`) or rotates (a compare-and-set on the version).
        in_transaction!(self, Mode::Write, |tx| async {
            let s = record;
            let existing = secret(&tx, &s.env_id, &s.name).await?;
            let found = existing.as_ref().map(|e| e.version);
            if found != expected_version {
                return Err(StoreError::VersionConflict {
                    expected: expected_version.unwrap_or(0),
                    found: found.unwrap_or(0),
                });
            }
            let hosts = s.allowed_hosts.as_ref().map(|h| json!(h).to_string());
            let placements = s.allowed_placements.as_ref().map(|p| json!(p).to_string());
            let changed = match found {
                None => {
                    tx.execute_unique(
                        "secret",
                        "INSERT INTO secrets (env_id, name, nonce, ciphertext, description, allowed_hosts, allowed_placements, version, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $8)",
                        &[&s.env_id.as_str(), &s.name, &s.nonce, &s.ciphertext, &s.description, &hosts, &placements, &actor.now.0],
                    )
                    .await?
                }
                Some(version) => {
                    tx.execute(
                        "UPDATE secrets SET nonce = $1, ciphertext = $2, description = $3, allowed_hosts = $4,
                    allowed_placements = $5, version = $6, updated_at = $7
                 WHERE env_id = $8 AND name = $9 AND version = $10",
                        &[&s.nonce, &s.ciphertext, &s.description, &hosts, &placements, &(i64::from(version) + 1), &actor.now.0, &s.env_id.as_str(), &s.name, &i64::from(version)],
                    )
                    .await?
                }
            };
            assert_eq!(
                changed, 1,
                "secret {} in {}: the version checked under the write lock moved",
                s.name, s.env_id
            );
            let stored = secret(&tx, &s.env_id, &s.name)
                .await?
                .ok_or(StoreError::NotFound { what: "secret" })?;
            append(
                &tx,
                actor,
                catalog_entries::secret_put(existing.as_ref(), &stored),
            )
            .await?;
            Ok(stored)
        })
    }

    async fn secret(&self, env: &EnvironmentId, name: &str) -> StoreResult<Option<SecretRecord>> {
        in_transaction!(self, Mode::Read, |tx| secret(&tx, env, name))
    }

    async fn list_secrets(&self, env: &EnvironmentId) -> StoreResult<Vec<SecretRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT {} FROM secrets WHERE env_id = $1 ORDER BY name",
                rows::SECRET_COLUMNS
            );
            tx.all(&sql, &[&env.as_str()], rows::secret).await
        })
    }

    async fn delete_secret(
        &self,
        env: &EnvironmentId,
        name: &str,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| async {
            let Some(existing) = secret(&tx, env, name).await? else {
                return Ok(false);
            };
            tx.execute(
                "DELETE FROM secrets WHERE env_id = $1 AND name = $2",
                &[&env.as_str(), &name],
            )
            .await?;
            append(&tx, actor, catalog_entries::secret_deleted(&existing)).await?;
            Ok(true)
        })
    }

    async fn master_key_check(&self) -> StoreResult<Option<String>> {
        in_transaction!(self, Mode::Read, |tx| master_key_check(&tx))
    }

    async fn init_master_key_check(&self, check: &str, actor: &Actor) -> StoreResult<String> {
        // Behind the write lock, so of replicas starting together on a new database exactly one
        // records its value.
        in_transaction!(self, Mode::Write, |tx| async {
            if let Some(stored) = master_key_check(&tx).await? {
                return Ok(stored);
            }
            tx.execute(
                "INSERT INTO settings (name, value) VALUES ($1, $2)",
                &[&MASTER_KEY_CHECK, &check],
            )
            .await?;
            append(
                &tx,
                actor,
                AuditEntry::global(AuditKind::VaultKeyCheckRecorded, MASTER_KEY_CHECK),
            )
            .await?;
            Ok(check.to_string())
        })
    }

    async fn any_secret(&self) -> StoreResult<Option<SecretRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT {} FROM secrets ORDER BY created_at, env_id, name LIMIT 1",
                rows::SECRET_COLUMNS
            );
            tx.one(&sql, &[], rows::secret).await
        })
    }

    async fn create_action(&self, action: &ActionRecord, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            let a = action;
            tx.execute_unique(
                "action",
                "INSERT INTO actions (id, env_id, name, version, created_at, updated_at) VALUES ($1, $2, $3, 1, $4, $4)",
                &[&a.id.as_str(), &a.env_id.as_str(), &a.name, &actor.now.0],
            )
            .await?;
            insert_version(&tx, &a.id, 1, &a.definition, actor).await?;
            append(&tx, actor, catalog_entries::action_created(a)).await
        })
    }

    async fn update_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        expected_version: u32,
        definition: &ActionDefinition,
        actor: &Actor,
    ) -> StoreResult<ActionRecord> {
        // Appends version `expected + 1`: a compare-and-set on the version.
        in_transaction!(self, Mode::Write, |tx| async {
            let (expected, def) = (expected_version, definition);
            let current = action(&tx, env, id.as_str())
                .await?
                .ok_or(StoreError::NotFound { what: "action" })?;
            let version = catalog_entries::next_version(current.version, expected)?;
            let changed = tx
                .execute_unique(
                    "action",
                    "UPDATE actions SET version = $1, name = $2, updated_at = $3 WHERE id = $4 AND version = $5",
                    &[&i64::from(version), &def.name, &actor.now.0, &id.as_str(), &i64::from(expected)],
                )
                .await?;
            assert_eq!(
                changed, 1,
                "action {id}: version {expected} checked under the write lock moved"
            );
            insert_version(&tx, id, version, def, actor).await?;
            append(
                &tx,
                actor,
                catalog_entries::action_updated(&current, version, def),
            )
            .await?;
            if let Some(why) = Cancellation::of_update(current.definition.enabled, def.enabled) {
                super::approvals::cancel_for_action(&tx, env, id, why, actor.now).await?;
            }
            action(&tx, env, id.as_str())
                .await?
                .ok_or(StoreError::NotFound { what: "action" })
        })
    }

    async fn action(
        &self,
        env: &EnvironmentId,
        reference: &str,
    ) -> StoreResult<Option<ActionRecord>> {
        in_transaction!(self, Mode::Read, |tx| action(&tx, env, reference))
    }

    async fn list_actions(&self, env: &EnvironmentId) -> StoreResult<Vec<ActionRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT {} FROM {} WHERE a.env_id = $1 AND a.deleted_at IS NULL ORDER BY a.created_at, a.id",
                rows::ACTION_COLUMNS,
                rows::ACTION_FROM
            );
            tx.all(&sql, &[&env.as_str()], rows::action).await
        })
    }

    async fn delete_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| async {
            let changed = tx
                .execute(
                    "UPDATE actions SET deleted_at = $1 WHERE env_id = $2 AND id = $3 AND deleted_at IS NULL",
                    &[&actor.now.0, &env.as_str(), &id.as_str()],
                )
                .await?;
            if changed > 0 {
                append(&tx, actor, catalog_entries::action_deleted(env, id)).await?;
                super::approvals::cancel_for_action(
                    &tx,
                    env,
                    id,
                    Cancellation::ActionDeleted,
                    actor.now,
                )
                .await?;
            }
            Ok(changed > 0)
        })
    }

    async fn action_versions(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
    ) -> StoreResult<Vec<ActionVersion>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = "SELECT v.action_id, v.version, v.definition, v.created_at, v.created_by
               FROM action_versions v JOIN actions a ON a.id = v.action_id
               WHERE a.env_id = $1 AND a.id = $2 ORDER BY v.version";
            tx.all(sql, &[&env.as_str(), &id.as_str()], |row| {
                Ok(ActionVersion {
                    action_id: rows::id(row, 0, ActionId::parse)?,
                    version: rows::int(row, 1)?,
                    definition: rows::definition(row, 2)?,
                    created_at: rows::millis(row, 3)?,
                    created_by: rows::id_opt(row, 4, KeyId::parse)?,
                })
            })
            .await
        })
    }
}
