//! Connected accounts: a secret bound to one integration, with what the provider last said of
//! it. The credential itself is the secret (sealed by the vault, `Catalog::put_secret`); this
//! record holds no part of it.

use steward_core::{EnvironmentId, Millis};

/// Whether a connected account still works, as the provider last answered.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionHealth {
    /// `healthy` or `needs_reauth`.
    pub status: String,
    /// Why it needs re-authentication (never the credential).
    pub reason: Option<String>,
    pub checked_at: Millis,
}

/// What the provider answered of the account held by secret `secret_name`, when it was checked.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheck {
    pub env_id: EnvironmentId,
    pub secret_name: String,
    pub health: ConnectionHealth,
}

/// A connected account.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionRecord {
    pub env_id: EnvironmentId,
    /// The secret holding the credential.
    pub secret_name: String,
    pub integration_id: String,
    /// `api_key` (the only kind Steward connects today) or `oauth`.
    pub auth_kind: String,
    pub description: Option<String>,
    pub health: ConnectionHealth,
    /// The `created_at` of the secret this account was connected into: a secret deleted and
    /// created again under the same name is not this account any more.
    pub secret_created_at: Millis,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl ConnectionRecord {
    /// One row of the backends' `SELECT` of connections: `env_id, secret_name, integration_id,
    /// auth_kind, description, health_status, health_reason, checked_at, secret_created_at,
    /// created_at, updated_at`.
    pub(crate) fn read(row: &impl crate::columns::Columns) -> crate::StoreResult<Self> {
        Ok(ConnectionRecord {
            env_id: row.id(0, EnvironmentId::parse)?,
            secret_name: row.get(1)?,
            integration_id: row.get(2)?,
            auth_kind: row.get(3)?,
            description: row.get(4)?,
            health: ConnectionHealth {
                status: row.get(5)?,
                reason: row.get(6)?,
                checked_at: row.millis(7)?,
            },
            secret_created_at: row.millis(8)?,
            created_at: row.millis(9)?,
            updated_at: row.millis(10)?,
        })
    }

    /// What the audit log records of a connection: never any part of its credential.
    pub(crate) fn audit_view(&self) -> serde_json::Value {
        serde_json::json!({
            "integrationId": self.integration_id, "authKind": self.auth_kind,
            "health": self.health.status, "reason": self.health.reason,
        })
    }
}

/// Where a consent session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatus {
    /// Waiting for the person to consent at the provider.
    Pending,
    /// The provider sent the person back; the code is being exchanged (the `state` is spent).
    Exchanging,
    /// The tokens are sealed into the account's secret.
    Completed,
    /// The provider refused, or the exchange failed; `reason` says which.
    Failed,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Pending => "pending",
            SessionStatus::Exchanging => "exchanging",
            SessionStatus::Completed => "completed",
            SessionStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<SessionStatus> {
        match text {
            "pending" => Some(SessionStatus::Pending),
            "exchanging" => Some(SessionStatus::Exchanging),
            "completed" => Some(SessionStatus::Completed),
            "failed" => Some(SessionStatus::Failed),
            _ => None,
        }
    }
}

/// A consent session: one sign-in at an OAuth provider that, once the person consents, connects
/// the account held by secret `secret_name`. It holds no token: only the digest of its `state`
/// parameter and its PKCE verifier sealed by the vault (opaque here).
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionSession {
    /// `cs_` and a unique suffix.
    pub id: String,
    pub env_id: EnvironmentId,
    pub integration_id: String,
    pub secret_name: String,
    pub description: Option<String>,
    /// The SHA-256 (hex) of the `state` parameter sent to the provider; unique.
    pub state_digest: String,
    /// The PKCE code verifier, sealed by the vault (nonce and ciphertext, hex, `:`-separated).
    pub verifier_sealed: String,
    /// The callback URL the provider sends the person back to (the token request repeats it).
    pub redirect_uri: String,
    pub status: SessionStatus,
    /// Why a session failed (never a token or a code).
    pub reason: Option<String>,
    /// The key that started the session.
    pub created_by: String,
    pub created_at: Millis,
    /// After this, the callback refuses the session.
    pub expires_at: Millis,
    pub updated_at: Millis,
}

impl ConnectionSession {
    /// One row of the backends' `SELECT` of sessions (columns in [`SESSION_COLUMNS`] order).
    pub(crate) fn read(row: &impl crate::columns::Columns) -> crate::StoreResult<Self> {
        let status: String = row.get(9)?;
        Ok(ConnectionSession {
            id: row.get(0)?,
            env_id: row.id(1, EnvironmentId::parse)?,
            integration_id: row.get(2)?,
            secret_name: row.get(3)?,
            description: row.get(4)?,
            state_digest: row.get(5)?,
            verifier_sealed: row.get(6)?,
            redirect_uri: row.get(7)?,
            reason: row.get(8)?,
            status: SessionStatus::parse(&status).ok_or_else(|| {
                crate::StoreError::Corrupt(format!("connection session status {status:?}"))
            })?,
            created_by: row.get(10)?,
            created_at: row.millis(11)?,
            expires_at: row.millis(12)?,
            updated_at: row.millis(13)?,
        })
    }

    /// What the audit log records of a session: never its state, verifier or any token.
    pub(crate) fn audit_view(&self) -> serde_json::Value {
        serde_json::json!({
            "integrationId": self.integration_id, "secretName": self.secret_name,
            "status": self.status.as_str(), "reason": self.reason,
            "expiresAt": self.expires_at.0,
        })
    }
}

/// The columns of `connection_sessions`, in [`ConnectionSession::read`]'s order.
pub(crate) const SESSION_COLUMNS: &str = "id, env_id, integration_id, secret_name, description,
    state_digest, verifier_sealed, redirect_uri, reason, status, created_by, created_at, expires_at,
    updated_at";
