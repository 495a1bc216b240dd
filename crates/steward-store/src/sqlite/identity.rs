//! Environments, API keys and operator console sessions (`console_sessions`): a sign-in, its
//! lookup with the key's checks, and a sign-out.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{constraint, unavailable};
use super::rows::{self, col, query_all, query_one};
use super::SqliteStore;
use crate::console_session::ConsoleSessionRecord;
use crate::error::{StoreError, StoreResult};
use crate::records::*;
use crate::store::Identity;
use async_trait::async_trait;
use rusqlite::{params, Connection, Row};
use serde_json::json;
use steward_core::{EnvironmentId, KeyId, Millis};

pub(crate) fn environment(
    conn: &Connection,
    id: &EnvironmentId,
) -> StoreResult<Option<Environment>> {
    let sql = format!(
        "SELECT {} FROM environments WHERE id = ?1",
        rows::ENVIRONMENT_COLUMNS
    );
    query_one(conn, &sql, &[&id.as_str()], rows::environment)
}

pub(crate) fn key(conn: &Connection, id: &KeyId) -> StoreResult<Option<ApiKeyRecord>> {
    let sql = format!("SELECT {} FROM api_keys WHERE id = ?1", rows::KEY_COLUMNS);
    query_one(conn, &sql, &[&id.as_str()], rows::api_key)
}

pub(crate) fn key_by_hash(conn: &Connection, hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
    let sql = format!(
        "SELECT {} FROM api_keys WHERE token_hash = ?1",
        rows::KEY_COLUMNS
    );
    query_one(conn, &sql, &[&hash], rows::api_key)
}

const SESSION_COLUMNS: &str = "id, token_hash, key_id, env_id, created_at, expires_at";

fn session(row: &Row<'_>) -> StoreResult<ConsoleSessionRecord> {
    let corrupt =
        |e: steward_core::IdError| StoreError::Corrupt(format!("console session id: {e}"));
    Ok(ConsoleSessionRecord {
        id: col(row, 0)?,
        token_hash: col(row, 1)?,
        key_id: KeyId::parse(&col::<String>(row, 2)?).map_err(corrupt)?,
        env_id: EnvironmentId::parse(&col::<String>(row, 3)?).map_err(corrupt)?,
        created_at: Millis(col(row, 4)?),
        expires_at: Millis(col(row, 5)?),
    })
}

fn session_by_hash(
    conn: &Connection,
    token_hash: &str,
) -> StoreResult<Option<ConsoleSessionRecord>> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM console_sessions WHERE token_hash = ?1");
    query_one(conn, &sql, &[&token_hash], session)
}

#[async_trait]
impl Identity for SqliteStore {
    async fn ensure_environment(
        &self,
        env: NewEnvironment<'_>,
        actor: &Actor,
    ) -> StoreResult<Environment> {
        let (name, new_id, actor) = (env.name.to_string(), env.id.clone(), actor.clone());
        self.write(move |tx| {
            let sql = format!(
                "SELECT {} FROM environments WHERE name = ?1",
                rows::ENVIRONMENT_COLUMNS
            );
            if let Some(env) = query_one(tx, &sql, &[&name], rows::environment)? {
                return Ok(env);
            }
            tx.execute(
                "INSERT INTO environments (id, name, halted, created_at) VALUES (?1, ?2, 0, ?3)",
                params![new_id.as_str(), name, actor.now.0],
            )
            .map_err(unavailable)?;
            append(
                tx,
                &actor,
                AuditEntry::new(
                    AuditKind::EnvironmentCreated,
                    new_id.as_str(),
                    new_id.as_str(),
                )
                .after(json!({"name": name})),
            )?;
            query_one(tx, &sql, &[&name], rows::environment)?.ok_or(StoreError::NotFound {
                what: "environment",
            })
        })
        .await
    }

    async fn environment(&self, id: &EnvironmentId) -> StoreResult<Option<Environment>> {
        let id = id.clone();
        self.read(move |conn| environment(conn, &id)).await
    }

    async fn insert_key(&self, key: &ApiKeyRecord, actor: &Actor) -> StoreResult<()> {
        let (key, actor) = (key.clone(), actor.clone());
        self.write(move |tx| {
            let scopes = serde_json::to_string(&key.scopes).map_err(|e| rows::corrupt("scopes", e))?;
            tx.execute(
                "INSERT INTO api_keys (id, env_id, name, scopes, token_hash, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![key.id.as_str(), key.env_id.as_str(), key.name, scopes, key.token_hash, key.created_at.0, key.expires_at.map(|m| m.0)],
            )
            .map_err(|e| constraint(e, "key"))?;
            append(
                tx,
                &actor,
                AuditEntry::new(AuditKind::KeyCreated, key.env_id.as_str(), key.id.as_str())
                    .after(key.audit_view()),
            )
        })
        .await
    }

    async fn key_by_hash(&self, token_hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
        let hash = token_hash.to_string();
        self.read(move |conn| key_by_hash(conn, &hash)).await
    }

    async fn key(&self, id: &KeyId) -> StoreResult<Option<ApiKeyRecord>> {
        let id = id.clone();
        self.read(move |conn| key(conn, &id)).await
    }

    async fn caller(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ApiKeyRecord, Environment)>> {
        let hash = token_hash.to_string();
        self.read(move |conn| {
            let Some(key) = key_by_hash(conn, &hash)?.filter(|k| k.usable_at(now)) else {
                return Ok(None);
            };
            Ok(environment(conn, &key.env_id)?.map(|env| (key, env)))
        })
        .await
    }

    async fn list_keys(&self) -> StoreResult<Vec<ApiKeyRecord>> {
        self.read(|conn| {
            let sql = format!(
                "SELECT {} FROM api_keys ORDER BY created_at, id",
                rows::KEY_COLUMNS
            );
            query_all(conn, &sql, &[], rows::api_key)
        })
        .await
    }

    async fn revoke_key(&self, id: &KeyId, actor: &Actor) -> StoreResult<bool> {
        let (id, actor) = (id.clone(), actor.clone());
        self.write(move |tx| {
            let Some(before) = key(tx, &id)?.filter(|k| k.revoked_at.is_none()) else {
                return Ok(false);
            };
            tx.execute(
                "UPDATE api_keys SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
                params![actor.now.0, id.as_str()],
            )
            .map_err(unavailable)?;
            let after = key(tx, &id)?.ok_or(StoreError::NotFound { what: "key" })?;
            append(
                tx,
                &actor,
                AuditEntry::new(AuditKind::KeyRevoked, before.env_id.as_str(), id.as_str())
                    .before(before.audit_view())
                    .after(after.audit_view()),
            )?;
            Ok(true)
        })
        .await
    }

    async fn rotate_key(&self, rotation: &KeyRotation, actor: &Actor) -> StoreResult<ApiKeyRecord> {
        let (r, actor) = (rotation.clone(), actor.clone());
        self.write(move |tx| {
            let (old, old_expires_at, new) = r.plan(key(tx, &r.old)?, actor.now)?;
            tx.execute(
                "UPDATE api_keys SET expires_at = ?1 WHERE id = ?2",
                params![old_expires_at.0, r.old.as_str()],
            )
            .map_err(unavailable)?;
            let scopes = serde_json::to_string(&new.scopes).map_err(|e| rows::corrupt("scopes", e))?;
            tx.execute(
                "INSERT INTO api_keys (id, env_id, name, scopes, token_hash, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![new.id.as_str(), new.env_id.as_str(), new.name, scopes, new.token_hash, new.created_at.0, new.expires_at.map(|m| m.0)],
            )
            .map_err(|e| constraint(e, "key"))?;
            let after_old = key(tx, &r.old)?.ok_or(StoreError::NotFound { what: "key" })?;
            append(
                tx,
                &actor,
                AuditEntry::new(AuditKind::KeyRotated, old.env_id.as_str(), r.old.as_str())
                    .before(old.audit_view())
                    .after(json!({"old": after_old.audit_view(), "newKeyId": new.id, "new": new.audit_view()})),
            )?;
            key(tx, &new.id)?.ok_or(StoreError::NotFound { what: "key" })
        })
        .await
    }

    async fn mark_key_used(&self, id: &KeyId, at: Millis) -> StoreResult<()> {
        let id = id.clone();
        self.write(move |tx| {
            tx.execute(
                "UPDATE api_keys SET last_used_at = ?1 WHERE id = ?2 AND (last_used_at IS NULL OR last_used_at < ?1)",
                params![at.0, id.as_str()],
            )
            .map_err(unavailable)?;
            Ok(())
        })
        .await
    }

    async fn create_console_session(
        &self,
        session: &ConsoleSessionRecord,
        actor: &Actor,
    ) -> StoreResult<()> {
        let (s, actor) = (session.clone(), actor.clone());
        self.write(move |tx| {
            if key(tx, &s.key_id)?.is_none() {
                return Err(StoreError::NotFound { what: "key" });
            }
            tx.execute(
                &format!(
                    "INSERT INTO console_sessions ({SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
                ),
                params![
                    s.id,
                    s.token_hash,
                    s.key_id.as_str(),
                    s.env_id.as_str(),
                    s.created_at.0,
                    s.expires_at.0
                ],
            )
            .map_err(|e| constraint(e, "console session"))?;
            append(
                tx,
                &actor,
                s.started_entry(),
            )
        })
        .await
    }

    async fn console_session(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ConsoleSessionRecord, ApiKeyRecord, Environment)>> {
        let token_hash = token_hash.to_string();
        self.read(move |conn| {
            let Some(s) = session_by_hash(conn, &token_hash)?.filter(|s| s.live_at(now)) else {
                return Ok(None);
            };
            let Some(k) = key(conn, &s.key_id)?.filter(|k| k.usable_at(now)) else {
                return Ok(None);
            };
            Ok(environment(conn, &k.env_id)?.map(|env| (s, k, env)))
        })
        .await
    }

    async fn end_console_session(&self, token_hash: &str, actor: &Actor) -> StoreResult<bool> {
        let (token_hash, actor) = (token_hash.to_string(), actor.clone());
        self.write(move |tx| {
            let Some(s) = session_by_hash(tx, &token_hash)? else {
                return Ok(false);
            };
            tx.execute(
                "DELETE FROM console_sessions WHERE token_hash = ?1",
                params![token_hash],
            )
            .map_err(unavailable)?;
            append(tx, &actor, s.ended_entry())?;
            Ok(true)
        })
        .await
    }
}
