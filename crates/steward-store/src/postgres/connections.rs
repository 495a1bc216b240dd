//! Connected accounts (`crate::connection`) in the shared store.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{in_transaction, Mode, Tx};
use super::PostgresStore;
use crate::connection::{
    ConnectionRecord, ConnectionSession, HealthCheck, SessionStatus, SESSION_COLUMNS,
};
use crate::error::{StoreError, StoreResult};
use crate::records::Actor;
use crate::store::Connections;
use async_trait::async_trait;

use steward_core::{EnvironmentId, Millis};
use tokio_postgres::Row;

/// The accounts whose secret still exists as it was when they were connected.
const SELECT: &str = "SELECT c.env_id, c.secret_name, c.integration_id, c.auth_kind, c.description,
        c.health_status, c.health_reason, c.checked_at, c.secret_created_at, c.created_at, c.updated_at
    FROM connections c JOIN secrets s
      ON s.env_id = c.env_id AND s.name = c.secret_name AND s.created_at = c.secret_created_at";

fn decode(row: &Row) -> StoreResult<ConnectionRecord> {
    ConnectionRecord::read(row)
}

fn decode_session(row: &Row) -> StoreResult<ConnectionSession> {
    ConnectionSession::read(row)
}

async fn session_by_id(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &str,
) -> StoreResult<Option<ConnectionSession>> {
    let sql =
        format!("SELECT {SESSION_COLUMNS} FROM connection_sessions WHERE env_id = $1 AND id = $2");
    tx.one(&sql, &[&env.as_str(), &id], decode_session).await
}

async fn one(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    name: &str,
) -> StoreResult<Option<ConnectionRecord>> {
    let sql = format!("{SELECT} WHERE c.env_id = $1 AND c.secret_name = $2");
    tx.one(&sql, &[&env.as_str(), &name], decode).await
}

#[async_trait]
impl Connections for PostgresStore {
    async fn record_connection(
        &self,
        connection: &ConnectionRecord,
        actor: &Actor,
    ) -> StoreResult<ConnectionRecord> {
        in_transaction!(self, Mode::Write, |tx| async {
            let c = connection;
            tx.execute(
                "INSERT INTO connections (env_id, secret_name, integration_id, auth_kind, description,
                    health_status, health_reason, checked_at, secret_created_at, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)
                 ON CONFLICT (env_id, secret_name) DO UPDATE SET integration_id = excluded.integration_id,
                    auth_kind = excluded.auth_kind, description = excluded.description,
                    health_status = excluded.health_status, health_reason = excluded.health_reason,
                    checked_at = excluded.checked_at, secret_created_at = excluded.secret_created_at,
                    updated_at = excluded.updated_at",
                &[
                    &c.env_id.as_str(), &c.secret_name, &c.integration_id, &c.auth_kind, &c.description,
                    &c.health.status, &c.health.reason, &c.health.checked_at.0, &c.secret_created_at.0,
                    &actor.now.0,
                ],
            )
            .await?;
            append(
                &tx,
                actor,
                AuditEntry::new(
                    AuditKind::ConnectionConnected,
                    c.env_id.as_str(),
                    &c.secret_name,
                )
                .after(c.audit_view()),
            )
            .await?;
            one(&tx, &c.env_id, &c.secret_name)
                .await?
                .ok_or(StoreError::NotFound { what: "secret" })
        })
    }

    async fn connection(
        &self,
        env: &EnvironmentId,
        name: &str,
    ) -> StoreResult<Option<ConnectionRecord>> {
        in_transaction!(self, Mode::Read, |tx| one(&tx, env, name))
    }

    async fn list_connections(&self, env: &EnvironmentId) -> StoreResult<Vec<ConnectionRecord>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!("{SELECT} WHERE c.env_id = $1 ORDER BY c.secret_name");
            tx.all(&sql, &[&env.as_str()], decode).await
        })
    }

    async fn record_health(
        &self,
        check: &HealthCheck,
        actor: &Actor,
    ) -> StoreResult<ConnectionRecord> {
        let (env, name, health) = (&check.env_id, check.secret_name.as_str(), &check.health);
        in_transaction!(self, Mode::Write, |tx| async {
            let missing = StoreError::NotFound {
                what: "connected account",
            };
            let Some(before) = one(&tx, env, name).await? else {
                return Err(missing);
            };
            tx.execute(
                "UPDATE connections SET health_status = $1, health_reason = $2, checked_at = $3, updated_at = $4
                 WHERE env_id = $5 AND secret_name = $6",
                &[&health.status, &health.reason, &health.checked_at.0, &actor.now.0, &env.as_str(), &name],
            )
            .await?;
            let after = one(&tx, env, name).await?.ok_or(StoreError::NotFound {
                what: "connected account",
            })?;
            append(
                &tx,
                actor,
                AuditEntry::new(AuditKind::ConnectionChecked, env.as_str(), name)
                    .before(before.audit_view())
                    .after(after.audit_view()),
            )
            .await?;
            Ok(after)
        })
    }

    async fn create_session(
        &self,
        session: &ConnectionSession,
        actor: &Actor,
    ) -> StoreResult<ConnectionSession> {
        let c = session;
        in_transaction!(self, Mode::Write, |tx| async {
            let sql = format!(
                "INSERT INTO connection_sessions ({SESSION_COLUMNS})
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $12)"
            );
            tx.execute(
                &sql,
                &[
                    &c.id,
                    &c.env_id.as_str(),
                    &c.integration_id,
                    &c.secret_name,
                    &c.description,
                    &c.state_digest,
                    &c.verifier_sealed,
                    &c.redirect_uri,
                    &c.reason,
                    &SessionStatus::Pending.as_str(),
                    &c.created_by,
                    &actor.now.0,
                    &c.expires_at.0,
                ],
            )
            .await?;
            let created =
                session_by_id(&tx, &c.env_id, &c.id)
                    .await?
                    .ok_or(StoreError::NotFound {
                        what: "connection session",
                    })?;
            append(
                &tx,
                actor,
                AuditEntry::new(
                    AuditKind::ConnectionSessionCreated,
                    c.env_id.as_str(),
                    &c.id,
                )
                .after(created.audit_view()),
            )
            .await?;
            Ok(created)
        })
    }

    async fn session(
        &self,
        env: &EnvironmentId,
        id: &str,
    ) -> StoreResult<Option<ConnectionSession>> {
        in_transaction!(self, Mode::Read, |tx| session_by_id(&tx, env, id))
    }

    async fn claim_session(
        &self,
        state_digest: &str,
        now: Millis,
    ) -> StoreResult<Option<ConnectionSession>> {
        in_transaction!(self, Mode::Write, |tx| async {
            let sql = format!(
                "UPDATE connection_sessions SET status = $1, updated_at = $2
                 WHERE state_digest = $3 AND status = $4 AND expires_at > $2
                 RETURNING {SESSION_COLUMNS}"
            );
            let claimed = tx
                .one(
                    &sql,
                    &[
                        &SessionStatus::Exchanging.as_str(),
                        &now.0,
                        &state_digest,
                        &SessionStatus::Pending.as_str(),
                    ],
                    decode_session,
                )
                .await?;
            if let Some(c) = &claimed {
                append(
                    &tx,
                    &Actor::system(now),
                    AuditEntry::new(
                        AuditKind::ConnectionSessionClaimed,
                        c.env_id.as_str(),
                        &c.id,
                    )
                    .after(c.audit_view()),
                )
                .await?;
            }
            Ok(claimed)
        })
    }

    async fn finish_session(
        &self,
        env: &EnvironmentId,
        id: &str,
        status: SessionStatus,
        reason: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<ConnectionSession> {
        in_transaction!(self, Mode::Write, |tx| async {
            let sql = format!(
                "UPDATE connection_sessions SET status = $1, reason = $2, updated_at = $3
                 WHERE env_id = $4 AND id = $5 AND status = $6
                 RETURNING {SESSION_COLUMNS}"
            );
            let finished = tx
                .one(
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
                )
                .await?
                .ok_or(StoreError::NotFound {
                    what: "exchanging connection session",
                })?;
            append(
                &tx,
                actor,
                AuditEntry::new(AuditKind::ConnectionSessionSettled, env.as_str(), id)
                    .after(finished.audit_view()),
            )
            .await?;
            Ok(finished)
        })
    }
}
