//! Schemas of the webhook endpoints (`api/webhooks.rs`): topics, subscriptions, dead letters
//! and the bodies that create and change subscriptions.

#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

/// A built-in topic: one family of Steward's events.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Topic {
    /// `top_runs`, `top_approvals`, `top_effects` or `top_environment`.
    id: String,
    name: String,
    description: String,
    event_types: Vec<String>,
}

/// A webhook subscription. Its secret appears only in the answers to create and rotate-secret.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct Subscription {
    /// `whs_...`
    id: String,
    topic_id: String,
    topic: String,
    url: String,
    /// The event types delivered; empty for every type of the topic.
    event_types: Vec<String>,
    enabled: bool,
    /// The names of the extra request headers (their values are not shown).
    header_names: Vec<String>,
    /// The last event delivered or dead-lettered (`evt_<seq>`); deliveries continue after it.
    last_event_id: String,
    /// Failed attempts at the next event.
    attempts: u32,
    /// Only in listings: the sealed events of the environment after the cursor, an upper bound
    /// on those still to deliver (counted over at most the next 100,000 sealed events).
    backlog: Option<u64>,
    next_attempt_at: String,
    last_error: Option<String>,
    /// Until when the secret before the last rotation still signs deliveries.
    previous_secret_valid_until: Option<String>,
    created_at: String,
    updated_at: String,
    /// `whsec_...`: only in the answers to create and rotate-secret, once.
    #[schema(value_type = Option<String>)]
    secret: Option<String>,
}

/// An event a subscription gave up on after its retry budget.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct DeadLetter {
    /// `dlq_...`
    id: String,
    subscription_id: String,
    event_id: String,
    event_type: String,
    /// The event as it was POSTed.
    event: Value,
    attempts: u32,
    last_error: String,
    created_at: String,
    /// `dead`, `requested` (an operator asked; the subscription's worker POSTs it once) or
    /// `redelivered` (answered 2xx).
    redelivery: String,
    /// When the last redelivery was answered 2xx.
    redelivered_at: Option<String>,
}

/// The answer to `POST /events/subscriptions/{id}/dlq/redeliver`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct RedeliveryRequested {
    subscription_id: String,
    /// How many letters were requested by this call (those already requested are not
    /// counted).
    requested: u64,
    dead_letter_ids: Vec<String>,
}

/// `POST /events/topics/{ref}/subscriptions`.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct SubscriptionBody {
    /// Where deliveries are POSTed; the same outbound checks as a dispatch apply.
    #[schema(max_length = 2048)]
    url: String,
    /// Event types of the topic to deliver; omitted or empty for all.
    event_types: Option<Vec<String>>,
    enabled: Option<bool>,
    /// Accepted for the SDK; every subscription gets a secret, shown once in this answer.
    generate_secret: Option<bool>,
    /// Extra request headers (at most 20; `Anlyon-*`, `Content-Type`, `Content-Length`, `Host`
    /// are Steward's).
    headers: Option<BTreeMap<String, String>>,
}

impl SubscriptionBody {
    pub const FIELDS: &[&str] = &["url", "eventTypes", "enabled", "generateSecret", "headers"];
}

/// `PATCH /events/subscriptions/{id}`: the fields given change.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(rename_all = "camelCase")]
pub struct SubscriptionPatch {
    #[schema(max_length = 2048)]
    url: Option<String>,
    event_types: Option<Vec<String>>,
    enabled: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

impl SubscriptionPatch {
    pub const FIELDS: &[&str] = &["url", "eventTypes", "enabled", "headers"];
}

/// A topic by id (`top_effects`) or name (`effects`).
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TopicPath {
    /// The topic's id or name.
    #[param(rename = "ref")]
    reference: String,
}
