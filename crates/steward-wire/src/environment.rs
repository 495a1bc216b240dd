//! Who is calling, and the environment they call in.

use serde::{Deserialize, Serialize};
use steward_core::{EnvironmentId, KeyId};
use utoipa::ToSchema;

/// `GET /auth/identity`: the calling key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Identity {
    /// Always `api_key`.
    pub credential_type: String,
    #[schema(value_type = String)]
    pub api_key_id: KeyId,
    pub name: String,
    #[schema(value_type = String)]
    pub environment_id: EnvironmentId,
    pub environment: String,
    pub scopes: Vec<String>,
    /// Keys do not expire: always `null`.
    pub expires_at: Option<String>,
}

/// An environment and its kill switch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Environment {
    #[schema(value_type = String)]
    pub id: EnvironmentId,
    pub name: String,
    pub halted: bool,
    pub halt_reason: Option<String>,
    /// What a governed invoke with neither an `operationKey` nor an `Idempotency-Key` gets:
    /// `accept` (answered with a `no_request_key` warning; the default) or `refuse` (400
    /// `operation_key_required`).
    /// Read as `accept` when absent (a server from before the setting).
    #[serde(default)]
    pub unkeyed_invokes: UnkeyedInvokes,
    /// Only on resume: how many parked effects were dispatched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub released: Option<u64>,
}

/// An environment's `unkeyedInvokes` setting (`steward_core::UnkeyedInvokes` on the wire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum UnkeyedInvokes {
    #[default]
    Accept,
    Refuse,
}

impl From<steward_core::UnkeyedInvokes> for UnkeyedInvokes {
    fn from(setting: steward_core::UnkeyedInvokes) -> Self {
        match setting {
            steward_core::UnkeyedInvokes::Accept => UnkeyedInvokes::Accept,
            steward_core::UnkeyedInvokes::Refuse => UnkeyedInvokes::Refuse,
        }
    }
}

impl From<UnkeyedInvokes> for steward_core::UnkeyedInvokes {
    fn from(setting: UnkeyedInvokes) -> Self {
        match setting {
            UnkeyedInvokes::Accept => steward_core::UnkeyedInvokes::Accept,
            UnkeyedInvokes::Refuse => steward_core::UnkeyedInvokes::Refuse,
        }
    }
}
