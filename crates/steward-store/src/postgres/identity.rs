//! Environments, API keys and operator console sessions (`console_sessions`): a sign-in, its
//! lookup with the key's checks, and a sign-out. The same rules as `sqlite/identity.rs`.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::Tx;
use super::conn::{in_transaction, Mode};
use super::rows::{self, col};
use super::PostgresStore;
use crate::console_session::ConsoleSessionRecord;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::store::Identity;
use async_trait::async_trait;
use serde_json::json;
use steward_core::{EnvironmentId, KeyId, Millis};
use tokio_postgres::Row;

pub(crate) async fn environment(
    tx: &Tx<'_>,
    id: &EnvironmentId,
) -> StoreResult<Option<Environment>> {
    let sql = format!(
        "SELECT {} FROM environments WHERE id = $1",
        rows::ENVIRONMENT_COLUMNS
    );
    tx.one(&sql, &[&id.as_str()], rows::environment).await
}

pub(crate) async fn key(tx: &Tx<'_>, id: &KeyId) -> StoreResult<Option<ApiKeyRecord>> {
    let sql = format!("SELECT {} FROM api_keys WHERE id = $1", rows::KEY_COLUMNS);
    tx.one(&sql, &[&id.as_str()], rows::api_key).await
}

pub(crate) async fn key_by_hash(tx: &Tx<'_>, hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
    let sql = format!(
        "SELECT {} FROM api_keys WHERE token_hash = $1",
        rows::KEY_COLUMNS
    );
    tx.one(&sql, &[&hash], rows::api_key).await
}

const SESSION_COLUMNS: &str = "id, token_hash, key_id, env_id, created_at, expires_at";

fn session(row: &Row) -> StoreResult<ConsoleSessionRecord> {
    let corrupt =
        |e: steward_core::IdError| StoreError::Corrupt(format!("console session id: {e}"));
    Ok(ConsoleSessionRecord {
        id: col(row, 0)?,
        token_hash: col(row, 1)?,
        key_id: KeyId::parse(col::<&str>(row, 2)?).map_err(corrupt)?,
        env_id: EnvironmentId::parse(col::<&str>(row, 3)?).map_err(corrupt)?,
        created_at: Millis(col(row, 4)?),
        expires_at: Millis(col(row, 5)?),
    })
}

async fn session_by_hash(
    tx: &Tx<'_>,
    token_hash: &str,
) -> StoreResult<Option<ConsoleSessionRecord>> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM console_sessions WHERE token_hash = $1");
    tx.one(&sql, &[&token_hash], session).await
}

#[async_trait]
impl Identity for PostgresStore {
    async fn ensure_environment(
        &self,
        env: NewEnvironment<'_>,
        actor: &Actor,
    ) -> StoreResult<Environment> {
        let (name, new_id) = (env.name, env.id);
        in_transaction!(self, Mode::Write, |tx| async {
            let sql = format!(
                "SELECT {} FROM environments WHERE name = $1",
                rows::ENVIRONMENT_COLUMNS
            );
            if let Some(env) = tx.one(&sql, &[&name], rows::environment).await? {
                return Ok(env);
            }
            tx.execute(
                "INSERT INTO environments (id, name, halted, created_at) VALUES ($1, $2, FALSE, $3)",
                &[&new_id.as_str(), &name, &actor.now.0],
            )
            .await?;
            append(
                &tx,
                actor,
                AuditEntry::new(
                    AuditKind::EnvironmentCreated,
                    new_id.as_str(),
                    new_id.as_str(),
                )
                .after(json!({"name": name})),
            )
            .await?;
            tx.one(&sql, &[&name], rows::environment)
                .await?
                .ok_or(StoreError::NotFound {
                    what: "environment",
                })
        })
    }

    async fn environment(&self, id: &EnvironmentId) -> StoreResult<Option<Environment>> {
        in_transaction!(self, Mode::Read, |tx| environment(&tx, id))
    }

    async fn insert_key(&self, key: &ApiKeyRecord, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            let scopes =
                serde_json::to_string(&key.scopes).map_err(|e| rows::corrupt("scopes", e))?;
            tx.execute_unique(
                "key",
                "INSERT INTO api_keys (id, env_id, name, scopes, token_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[&key.id.as_str(), &key.env_id.as_str(), &key.name, &scopes, &key.token_hash, &key.created_at.0, &key.expires_at.map(|m| m.0)],
            )
            .await?;
            append(
                &tx,
                actor,
                AuditEntry::new(AuditKind::KeyCreated, key.env_id.as_str(), key.id.as_str())
                    .after(key.audit_view()),
            )
            .await
        })
    }

    async fn key_by_hash(&self, token_hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
        in_transaction!(self, Mode::Read, |tx| key_by_hash(&tx, token_hash))
    }

    async fn key(&self, id: &KeyId) -> StoreResult<Option<ApiKeyRecord>> {
        in_transaction!(self, Mode::Read, |tx| key(&tx, id))
    }

    async fn caller(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ApiKeyRecord, Environment)>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let Some(key) = key_by_hash(&tx, token_hash)
                .await?
                .filter(|k| k.usable_at(now))
            else {
                return Ok(None);
            };
            Ok(environment(&tx, &key.env_id).await?.map(|env| (key, env)))
        })
    }

    async fn list_keys(&self) -> StoreResult<Vec<ApiKeyRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT {} FROM api_keys ORDER BY created_at, id",
                rows::KEY_COLUMNS
            );
            tx.all(&sql, &[], rows::api_key).await
        })
    }

    async fn revoke_key(&self, id: &KeyId, actor: &Actor) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| async {
            let Some(before) = key(&tx, id).await?.filter(|k| k.revoked_at.is_none()) else {
                return Ok(false);
            };
            tx.execute(
                "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
                &[&actor.now.0, &id.as_str()],
            )
            .await?;
            let after = key(&tx, id)
                .await?
                .ok_or(StoreError::NotFound { what: "key" })?;
            append(
                &tx,
                actor,
                AuditEntry::new(AuditKind::KeyRevoked, before.env_id.as_str(), id.as_str())
                    .before(before.audit_view())
                    .after(after.audit_view()),
            )
            .await?;
            Ok(true)
        })
    }

    async fn rotate_key(&self, rotation: &KeyRotation, actor: &Actor) -> StoreResult<ApiKeyRecord> {
        in_transaction!(self, Mode::Write, |tx| async {
            let r = rotation;
            let (old, old_expires_at, new) = r.plan(key(&tx, &r.old).await?, actor.now)?;
            tx.execute(
                "UPDATE api_keys SET expires_at = $1 WHERE id = $2",
                &[&old_expires_at.0, &r.old.as_str()],
            )
            .await?;
            let scopes =
                serde_json::to_string(&new.scopes).map_err(|e| rows::corrupt("scopes", e))?;
            tx.execute_unique(
                "key",
                "INSERT INTO api_keys (id, env_id, name, scopes, token_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[&new.id.as_str(), &new.env_id.as_str(), &new.name, &scopes, &new.token_hash, &new.created_at.0, &new.expires_at.map(|m| m.0)],
            )
            .await?;
            let after_old = key(&tx, &r.old)
                .await?
                .ok_or(StoreError::NotFound { what: "key" })?;
            append(
                &tx,
                actor,
                AuditEntry::new(AuditKind::KeyRotated, old.env_id.as_str(), r.old.as_str())
                    .before(old.audit_view())
                    .after(json!({"old": after_old.audit_view(), "newKeyId": new.id, "new": new.audit_view()})),
            )
            .await?;
            key(&tx, &new.id)
                .await?
                .ok_or(StoreError::NotFound { what: "key" })
        })
    }

    async fn mark_key_used(&self, id: &KeyId, at: Millis) -> StoreResult<()> {
        // Without the write lock (a conditional update needs none): bookkeeping does not queue
        // behind (or hold up) the writes that take it.
        in_transaction!(self, Mode::WriteConcurrent, |tx| async {
            tx.execute(
                "UPDATE api_keys SET last_used_at = $1 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $1)",
                &[&at.0, &id.as_str()],
            )
            .await?;
            Ok(())
        })
    }

    async fn create_console_session(
        &self,
        session: &ConsoleSessionRecord,
        actor: &Actor,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            let s = session;
            if key(&tx, &s.key_id).await?.is_none() {
                return Err(StoreError::NotFound { what: "key" });
            }
            tx.execute_unique(
                "console session",
                &format!(
                    "INSERT INTO console_sessions ({SESSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)"
                ),
                &[
                    &s.id,
                    &s.token_hash,
                    &s.key_id.as_str(),
                    &s.env_id.as_str(),
                    &s.created_at.0,
                    &s.expires_at.0,
                ],
            )
            .await?;
            append(&tx, actor, s.started_entry()).await
        })
    }

    async fn console_session(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ConsoleSessionRecord, ApiKeyRecord, Environment)>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let Some(s) = session_by_hash(&tx, token_hash)
                .await?
                .filter(|s| s.live_at(now))
            else {
                return Ok(None);
            };
            let Some(k) = key(&tx, &s.key_id).await?.filter(|k| k.usable_at(now)) else {
                return Ok(None);
            };
            Ok(environment(&tx, &k.env_id).await?.map(|env| (s, k, env)))
        })
    }

    async fn end_console_session(&self, token_hash: &str, actor: &Actor) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| async {
            let Some(s) = session_by_hash(&tx, token_hash).await? else {
                return Ok(false);
            };
            tx.execute(
                "DELETE FROM console_sessions WHERE token_hash = $1",
                &[&token_hash],
            )
            .await?;
            append(&tx, actor, s.ended_entry()).await?;
            Ok(true)
        })
    }
}
