//! The connections API's path parameter, bodies and records (`api/connections.rs`).

#![allow(dead_code)]

use utoipa::{IntoParams, ToSchema};

/// A connected account, by the name of the secret that holds its credential.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SecretNamePath {
    /// The secret's name (`^[A-Z0-9_]+$`); anything else is 404.
    #[param(rename = "secretName")]
    secret_name: String,
}

/// `POST /connections/keys`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ConnectKeyBody {
    /// An `api_key` integration of `GET /connections/integrations`.
    integration_id: String,
    /// The secret to hold the key.
    #[schema(pattern = "^[A-Z0-9_]+$")]
    secret_name: String,
    /// The key made in the provider's settings; checked with the provider, then sealed.
    #[schema(min_length = 1, max_length = 4096)]
    api_key: String,
    description: Option<String>,
}

impl ConnectKeyBody {
    pub const FIELDS: &[&str] = &super::super::connections::KEY_FIELDS;
}

/// `POST /connections/{secretName}/reconnect`: the new key (required for `api_key`).
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ReconnectBody {
    #[schema(min_length = 1, max_length = 4096)]
    api_key: Option<String>,
}

impl ReconnectBody {
    pub const FIELDS: &[&str] = &super::super::connections::RECONNECT_FIELDS;
}

/// `POST /connections/{secretName}/check`: no fields.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckBody {}

impl CheckBody {
    pub const FIELDS: &[&str] = &[];
}

/// How an integration's accounts are connected.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IntegrationAuth {
    /// `api_key` or `oauth`.
    kind: String,
}

/// An integration an account can be connected for.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct IntegrationView {
    id: String,
    name: String,
    auth: IntegrationAuth,
    /// Where its credential may be sent (the connected secret's `allowedHosts`).
    allowed_hosts: Vec<String>,
}

/// What the provider last said of an account.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ConnectionHealthView {
    /// `healthy` or `needs_reauth`.
    status: String,
    reason: Option<String>,
    checked_at: String,
}

/// A connected account: its secret's metadata (never its value) with its integration and
/// health.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct ConnectionView {
    /// The secret's name.
    name: String,
    description: Option<String>,
    allowed_hosts: Option<Vec<String>>,
    allowed_placements: Option<Vec<String>>,
    version: u64,
    created_at: String,
    updated_at: String,
    integration_id: String,
    auth_kind: String,
    health: ConnectionHealthView,
    /// When the account was first connected under this secret.
    connected_at: String,
}

/// A connect or reconnect that finished.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionCompleted {
    /// Always `completed`.
    status: String,
    connection: ConnectionView,
}
