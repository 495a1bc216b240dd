//! OAuth consent sessions (`/connections/sessions`): the body that starts one, the body that
//! completes one, and the session as the SDK reads it. No token ever appears here.

use crate::connection::{Connection, ConnectionCompleted};
use crate::Text;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /connections/sessions`. The two identifying fields are required (the server names
/// the one missing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionBody {
    /// An `oauth` integration of `GET /connections/integrations`.
    #[serde(default)]
    #[schema(required = true, value_type = String)]
    pub integration_id: Option<String>,
    /// The secret to hold the account's tokens.
    #[serde(default)]
    #[schema(required = true, value_type = String, pattern = "^[A-Z0-9_]+$")]
    pub secret_name: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub description: Option<Text>,
}

/// `POST /connections/sessions/{id}/complete`. `reference` is accepted for the SDK's sake and
/// not needed: Steward learns of the consent through its own callback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub reference: Option<Text>,
}

/// A consent session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConnectionSession {
    /// `cs_` and a unique suffix.
    pub id: String,
    /// `pending` (the person has not consented yet, or the code is being exchanged),
    /// `completed` (the account is connected: see `connection`), `failed` (see `reason`) or
    /// `expired` (not completed within its 15 minutes).
    pub status: String,
    pub integration_id: String,
    pub secret_name: String,
    /// The provider's consent page, to open in the person's browser. Given only when the
    /// session is created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_url: Option<String>,
    pub expires_at: String,
    /// Why a session failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The connected account, once `completed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection: Option<Connection>,
}

/// A reconnect of a signed-in account: a new consent session under the account's name, to open
/// and `complete` exactly as for a first connect. The account keeps working (or not) as it is
/// until the callback replaces its tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionPending {
    /// Always `pending`.
    pub status: String,
    /// The session, with its `connectUrl`.
    pub session: ConnectionSession,
}

impl ConnectionPending {
    pub fn new(session: ConnectionSession) -> Self {
        Self {
            status: "pending".to_string(),
            session,
        }
    }
}

/// What `POST /connections/{secretName}/reconnect` answers: the account at once (an `api_key`
/// integration, with its new key) or a consent session (an `oauth` one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Reconnected {
    Completed(ConnectionCompleted),
    Pending(ConnectionPending),
}

/// What the provider's redirect to `GET /connections/callback` answers (the person's browser
/// shows it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallbackDone {
    /// `completed` or `failed`.
    pub status: String,
    pub session_id: String,
    pub secret_name: String,
    pub message: String,
}
