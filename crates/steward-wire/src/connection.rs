//! Connected accounts (`/connections`): the integrations an account can be connected for, an
//! account with its health, and the bodies that connect, check and reconnect one.

use crate::Text;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A string that may hold a credential (an API key, a webhook header's value): anything but a
/// string is refused with `must be a string`, never with serde's message, which quotes the value
/// it refuses.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Credential(pub String);

impl Credential {
    pub fn into_string(self) -> String {
        self.0
    }
}

/// Never shows the value.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(..)")
    }
}

impl<'de> Deserialize<'de> for Credential {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(text) => Ok(Credential(text)),
            _ => Err(D::Error::custom("must be a string")),
        }
    }
}

/// How an integration's accounts are connected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IntegrationAuth {
    /// `api_key` or `oauth`.
    pub kind: String,
}

/// An integration an account can be connected for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Integration {
    pub id: String,
    pub name: String,
    pub auth: IntegrationAuth,
    /// Where its credential may be sent (the connected secret's `allowedHosts`).
    pub allowed_hosts: Vec<String>,
}

/// What the provider last said of an account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectionHealth {
    /// `healthy` or `needs_reauth`.
    pub status: String,
    pub reason: Option<String>,
    pub checked_at: String,
}

/// A connected account: its secret's metadata (never its value; the fields of
/// [`crate::Secret`]) with its integration and health.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Connection {
    /// The secret's name.
    pub name: String,
    pub description: Option<String>,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_placements: Option<Vec<String>>,
    pub version: u32,
    pub created_at: String,
    pub updated_at: String,
    pub integration_id: String,
    pub auth_kind: String,
    pub health: ConnectionHealth,
    /// When the account was first connected under this secret.
    pub connected_at: String,
}

/// A connect or reconnect that finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionCompleted {
    /// Always `completed`.
    pub status: String,
    pub connection: Connection,
}

impl ConnectionCompleted {
    pub fn new(connection: Connection) -> Self {
        Self {
            status: "completed".to_string(),
            connection,
        }
    }
}

/// `POST /connections/keys`. The three identifying fields are required (the server names the
/// one missing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectKeyBody {
    /// An `api_key` integration of `GET /connections/integrations`.
    #[serde(default)]
    #[schema(required = true, value_type = String)]
    pub integration_id: Option<String>,
    /// The secret to hold the key.
    #[serde(default)]
    #[schema(required = true, value_type = String, pattern = "^[A-Z0-9_]+$")]
    pub secret_name: Option<String>,
    /// The key made in the provider's settings; checked with the provider, then sealed.
    #[serde(default)]
    #[schema(required = true, value_type = String, min_length = 1, max_length = 4096)]
    pub api_key: Option<Credential>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub description: Option<Text>,
}

/// `POST /connections/{secretName}/reconnect`: the new key (required for `api_key`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReconnectBody {
    #[serde(default)]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 4096)]
    pub api_key: Option<Credential>,
}

/// `POST /connections/{secretName}/check`: no fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckBody {}

#[cfg(test)]
mod tests {
    use super::ConnectKeyBody;
    use serde_json::json;

    /// serde's own refusal quotes the value (`invalid type: integer `4242`...`); a key must
    /// never be written back.
    #[test]
    fn a_credential_that_is_not_a_string_is_refused_without_quoting_it() {
        let err = serde_json::from_value::<ConnectKeyBody>(json!({"apiKey": 4242})).unwrap_err();
        assert_eq!(err.to_string(), "must be a string");
        let err = serde_json::from_value::<ConnectKeyBody>(json!({"apiKey": [4242]})).unwrap_err();
        assert!(!err.to_string().contains("4242"), "{err}");
        let err = serde_json::from_value::<crate::SubscriptionBody>(
            json!({"headers": {"X-Token": 4242}}),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "must be a string");
    }
}
