//! Approval channels (`/approval-channels`): where each new pending approval and its outcome are
//! sent for people (issue #29 item 2). The signed webhooks of `/events/...` are the third
//! channel and stay as they are.

use crate::Credential;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An approval channel. Its credential (a Slack URL) is never shown back: only its origin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalChannel {
    /// `apc_...`
    pub id: String,
    /// `slack` or `email`.
    pub kind: String,
    /// Where it sends, without the credential: the origin of a Slack URL, or
    /// `smtp://host:port` and the recipients of an email channel.
    pub destination: String,
    pub enabled: bool,
    /// The last event delivered or dead-lettered (`evt_<seq>`); deliveries continue after it.
    pub last_event_id: String,
    /// Failed attempts at the next message.
    pub attempts: u32,
    pub next_attempt_at: String,
    pub last_error: Option<String>,
    pub created_at: String,
}

/// `POST /approval-channels`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalChannelBody {
    /// `slack` or `email`. Required (the server names it when it is missing).
    #[serde(default)]
    #[schema(required = true, value_type = String)]
    pub kind: Option<String>,
    /// For `slack`: the incoming-webhook URL. A credential: sealed by the vault, never written
    /// back; the same outbound checks as a dispatch apply.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 2048)]
    pub url: Option<Credential>,
    /// For `email`: the SMTP server's host name or address.
    #[serde(default)]
    pub host: Option<String>,
    /// For `email`: the SMTP port (465 for `tls`, 587 for `starttls`, 25 for `none` when
    /// omitted).
    #[serde(default)]
    pub port: Option<u16>,
    /// For `email`: `tls` (the default), `starttls`, or `none` (needs
    /// `--allow-insecure-destinations`).
    #[serde(default)]
    pub tls: Option<String>,
    /// For `email`: the sender's address.
    #[serde(default)]
    pub from: Option<String>,
    /// For `email`: the recipients (1 to 20 addresses).
    #[serde(default)]
    pub to: Option<Vec<String>>,
    /// For `email`: the SMTP user, if the server needs one.
    #[serde(default)]
    pub username: Option<String>,
    /// For `email`: the SMTP password. A credential: sealed by the vault, never written back.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub password: Option<Credential>,
}
