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
