//! Topics, webhook subscriptions and dead letters (`/events/...`, `/dlq`), and the bodies that
//! create and change a subscription.

use crate::{Credential, Text};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// A built-in topic: one family of Steward's events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Topic {
    /// `top_runs`, `top_approvals`, `top_effects` or `top_environment`.
    pub id: String,
    pub name: String,
    pub description: String,
    pub event_types: Vec<String>,
}

/// A webhook subscription. Its secret appears only in the answers to create and rotate-secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Subscription {
    /// `whs_...`
    pub id: String,
    /// The topic's id (every stored topic is a built-in one).
    #[schema(value_type = String)]
    pub topic_id: Option<String>,
    pub topic: String,
    pub url: String,
    /// The event types delivered; empty for every type of the topic.
    pub event_types: Vec<String>,
    pub enabled: bool,
    /// The names of the extra request headers (their values are not shown).
    pub header_names: Vec<String>,
    /// The last event delivered or dead-lettered (`evt_<seq>`); deliveries continue after it.
    pub last_event_id: String,
    /// Failed attempts at the next event.
    pub attempts: u32,
    /// Only in listings: the sealed events of the environment after the cursor, an upper bound
    /// on those still to deliver (counted over at most the next 100,000 sealed events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub backlog: Option<u64>,
    pub next_attempt_at: String,
    pub last_error: Option<String>,
    /// Until when the secret before the last rotation still signs deliveries.
    pub previous_secret_valid_until: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// `whsec_...`: only in the answers to create and rotate-secret, once (the server adds it
    /// to a fresh answer, never to the recorded one a replay returns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub secret: Option<String>,
}

/// An event a subscription gave up on after its retry budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeadLetter {
    /// `dlq_...`
    pub id: String,
    pub subscription_id: String,
    pub event_id: String,
    pub event_type: String,
    /// The event as it was POSTed.
    pub event: Value,
    pub attempts: u32,
    pub last_error: String,
    pub created_at: String,
    /// `dead`, `requested` (an operator asked; the subscription's worker POSTs it once) or
    /// `redelivered` (answered 2xx).
    pub redelivery: String,
    /// When the last redelivery was answered 2xx.
    pub redelivered_at: Option<String>,
}

/// The answer to `POST /events/subscriptions/{id}/dlq/redeliver`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedeliveryRequested {
    pub subscription_id: String,
    /// How many letters were requested by this call (those already requested are not
    /// counted).
    pub requested: u64,
    pub dead_letter_ids: Vec<String>,
}

/// `POST /events/topics/{ref}/subscriptions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscriptionBody {
    /// Where deliveries are POSTed; the same outbound checks as a dispatch apply. Required
    /// (the server names it when it is missing).
    #[serde(default)]
    #[schema(required = true, value_type = String, max_length = 2048)]
    pub url: Option<Text>,
    /// Event types of the topic to deliver; omitted or empty for all.
    #[serde(default)]
    pub event_types: Option<Vec<String>>,
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Accepted for the SDK; every subscription gets a secret, shown once in this answer.
    #[serde(default)]
    pub generate_secret: Option<bool>,
    /// Extra request headers (at most 20; `Anlyon-*`, `Content-Type`, `Content-Length`, `Host`
    /// are Steward's). A value may be a credential: it is never written back.
    #[serde(default)]
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub headers: Option<BTreeMap<String, Credential>>,
}

/// `PATCH /events/subscriptions/{id}`: the fields given change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscriptionPatch {
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 2048)]
    pub url: Option<Text>,
    #[serde(default)]
    pub event_types: Option<Vec<String>>,
    #[serde(default)]
    pub enabled: Option<bool>,
    #[serde(default)]
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub headers: Option<BTreeMap<String, Credential>>,
}
