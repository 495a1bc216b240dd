//! Connected accounts (`crate::connection`) in the embedded store.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{execute_cached, unavailable};
use super::rows::{query_all, query_one};
use super::SqliteStore;
use crate::connection::{
    ConnectionRecord, ConnectionSession, HealthCheck, SessionStatus, SESSION_COLUMNS,
};
use crate::error::{StoreError, StoreResult};
use crate::records::Actor;
use crate::store::Connections;
use async_trait::async_trait;
use rusqlite::{params, Connection, Row};

use steward_core::{EnvironmentId, Millis};

/// The accounts whose secret still exists as it was when they were connected.
const SELECT: &str = "SELECT c.env_id, c.secret_name, c.integration_id, c.auth_kind, c.description,
        c.health_status, c.health_reason, c.checked_at, c.secret_created_at, c.created_at, c.updated_at
    FROM connections c JOIN secrets s
      ON s.env_id = c.env_id AND s.name = c.secret_name AND s.created_at = c.secret_created_at";

fn decode(row: &Row<'_>) -> StoreResult<ConnectionRecord> {
    ConnectionRecord::read(row)
}

fn decode_session(row: &Row<'_>) -> StoreResult<ConnectionSession> {
    ConnectionSession::read(row)
}

fn session_by_id(
    conn: &Connection,
    env: &EnvironmentId,
    id: &str,
) -> StoreResult<Option<ConnectionSession>> {
    let sql =
        format!("SELECT {SESSION_COLUMNS} FROM connection_sessions WHERE env_id = ?1 AND id = ?2");
    query_one(conn, &sql, &[&env.as_str(), &id], decode_session)
}

fn one(
    conn: &Connection,
    env: &EnvironmentId,
    name: &str,
) -> StoreResult<Option<ConnectionRecord>> {
    let sql = format!("{SELECT} WHERE c.env_id = ?1 AND c.secret_name = ?2");
    query_one(conn, &sql, &[&env.as_str(), &name], decode)
}

#[async_trait]
impl Connections for SqliteStore {
    async fn record_connection(
        &self,
        connection: &ConnectionRecord,
        actor: &Actor,
    ) -> StoreResult<ConnectionRecord> {
        let (c, actor) = (connection.clone(), actor.clone());
        self.write(move |tx| {
            execute_cached(
                tx,
                "INSERT INTO connections (env_id, secret_name, integration_id, auth_kind, description,
                    health_status, health_reason, checked_at, secret_created_at, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)
                 ON CONFLICT (env_id, secret_name) DO UPDATE SET integration_id = excluded.integration_id,
                    auth_kind = excluded.auth_kind, description = excluded.description,
                    health_status = excluded.health_status, health_reason = excluded.health_reason,
                    checked_at = excluded.checked_at, secret_created_at = excluded.secret_created_at,
                    updated_at = excluded.updated_at",
                params![
                    c.env_id.as_str(), c.secret_name, c.integration_id, c.auth_kind, c.description,
                    c.health.status, c.health.reason, c.health.checked_at.0, c.secret_created_at.0,
                    actor.now.0
                ],
            )
            .map_err(unavailable)?;
            append(
                tx,
                &actor,
                AuditEntry::new(AuditKind::ConnectionConnected, c.env_id.as_str(), &c.secret_name)
                    .after(c.audit_view()),
            )?;
            one(tx, &c.env_id, &c.secret_name)?.ok_or(StoreError::NotFound { what: "secret" })
        })
        .await
    }

    async fn connection(
        &self,
        env: &EnvironmentId,
        name: &str,
    ) -> StoreResult<Option<ConnectionRecord>> {
        let (env, name) = (env.clone(), name.to_string());
        self.read(move |conn| one(conn, &env, &name)).await
    }

    async fn list_connections(&self, env: &EnvironmentId) -> StoreResult<Vec<ConnectionRecord>> {
        let env = env.clone();
        self.read(move |conn| {
            let sql = format!("{SELECT} WHERE c.env_id = ?1 ORDER BY c.secret_name");
            query_all(conn, &sql, &[&env.as_str()], decode)
        })
        .await
    }

    async fn record_health(
        &self,
        check: &HealthCheck,
        actor: &Actor,
    ) -> StoreResult<ConnectionRecord> {
        let (env, name) = (check.env_id.clone(), check.secret_name.clone());
        let (health, actor) = (check.health.clone(), actor.clone());
        self.write(move |tx| {
            let before = one(tx, &env, &name)?.ok_or(StoreError::NotFound {
                what: "connected account",
            })?;
            execute_cached(
                tx,
                "UPDATE connections SET health_status = ?1, health_reason = ?2, checked_at = ?3, updated_at = ?4
                 WHERE env_id = ?5 AND secret_name = ?6",
                params![health.status, health.reason, health.checked_at.0, actor.now.0, env.as_str(), name],
            )
            .map_err(unavailable)?;
            let after = one(tx, &env, &name)?.ok_or(StoreError::NotFound {
                what: "connected account",
            })?;
            append(
                tx,
                &actor,
                AuditEntry::new(AuditKind::ConnectionChecked, env.as_str(), &name)
                    .before(before.audit_view())
                    .after(after.audit_view()),
            )?;
            Ok(after)
        })
        .await
    }

    async fn create_session(
        &self,
        session: &ConnectionSession,
        actor: &Actor,
    ) -> StoreResult<ConnectionSession> {
        let (c, actor) = (session.clone(), actor.clone());
        self.write(move |tx| {
            let sql = format!(
                "INSERT INTO connection_sessions ({SESSION_COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?12)"
            );
            execute_cached(
                tx,
                &sql,
                params![
                    c.id,
                    c.env_id.as_str(),
                    c.integration_id,
                    c.secret_name,
                    c.description,
                    c.state_digest,
                    c.verifier_sealed,
                    c.redirect_uri,
                    c.reason,
                    SessionStatus::Pending.as_str(),
                    c.created_by,
                    actor.now.0,
                    c.expires_at.0
                ],
            )
            .map_err(unavailable)?;
            let created = session_by_id(tx, &c.env_id, &c.id)?.ok_or(StoreError::NotFound {
                what: "connection session",
            })?;
            append(
                tx,
                &actor,
                AuditEntry::new(
                    AuditKind::ConnectionSessionCreated,
                    c.env_id.as_str(),
                    &c.id,
                )
                .after(created.audit_view()),
            )?;
            Ok(created)
        })
        .await
    }

    async fn session(
        &self,
        env: &EnvironmentId,
        id: &str,
    ) -> StoreResult<Option<ConnectionSession>> {
        let (env, id) = (env.clone(), id.to_string());
        self.read(move |conn| session_by_id(conn, &env, &id)).await
    }

    async fn claim_session(
        &self,
        state_digest: &str,
        now: Millis,
    ) -> StoreResult<Option<ConnectionSession>> {
        let digest = state_digest.to_string();
        self.write(move |tx| {
            let sql = format!(
                "UPDATE connection_sessions SET status = ?1, updated_at = ?2
                 WHERE state_digest = ?3 AND status = ?4 AND expires_at > ?2
                 RETURNING {SESSION_COLUMNS}"
            );
            let claimed = query_one(
                tx,
                &sql,
                &[
                    &SessionStatus::Exchanging.as_str(),
                    &now.0,
                    &digest,
                    &SessionStatus::Pending.as_str(),
                ],
                decode_session,
            )?;
            if let Some(c) = &claimed {
                let actor = Actor::system(now);
                append(
                    tx,
                    &actor,
                    AuditEntry::new(
                        AuditKind::ConnectionSessionClaimed,
                        c.env_id.as_str(),
                        &c.id,
                    )
                    .after(c.audit_view()),
                )?;
            }
            Ok(claimed)
        })
        .await
    }

    async fn finish_session(
        &self,
        env: &EnvironmentId,
        id: &str,
        status: SessionStatus,
        reason: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<ConnectionSession> {
        let (env, id, actor) = (env.clone(), id.to_string(), actor.clone());
        let reason = reason.map(str::to_string);
        self.write(move |tx| {
            let sql = format!(
                "UPDATE connection_sessions SET status = ?1, reason = ?2, updated_at = ?3
                 WHERE env_id = ?4 AND id = ?5 AND status = ?6
                 RETURNING {SESSION_COLUMNS}"
            );
            let finished = query_one(
                tx,
                &sql,
                &[
                    &status.as_str(),
                    &reason,
                    &actor.now.0,
                    &env.as_str(),
                    &id,
                    &SessionStatus::Exchanging.as_str(),
                ],
                decode_session,
            )?
            .ok_or(StoreError::NotFound {
                what: "exchanging connection session",
            })?;
            append(
                tx,
                &actor,
                AuditEntry::new(AuditKind::ConnectionSessionSettled, env.as_str(), &id)
                    .after(finished.audit_view()),
            )?;
            Ok(finished)
        })
        .await
    }
}
