//! Signed webhooks (issue #15 item 4): subscriptions to Steward's events, delivered by HTTP POST
//! from a durable cursor over the sealed audit log.
//!
//! Topics are built in, one per event family ([`topics`]). A subscription's secret (`whsec_`)
//! is sealed by the vault and shown once, at creation and at each rotation; after a rotation
//! deliveries are signed with both secrets for [`WEBHOOK_SECRET_GRACE_MS`]. Each replica runs
//! [`deliver::run`], which leases due subscriptions and gives each its own worker that POSTs
//! its events in order and records each outcome; the cursor moves only after a 2xx (or a dead
//! letter, after the [`retry`] schedule), so an event committed before a crash is delivered
//! after the restart. Dead letters can be redelivered on an operator's request.

pub mod channels;
pub(crate) mod deliver;
pub mod retry;
pub(crate) mod signature;
pub(crate) mod topics;

/// How long a receiver may take to answer, in milliseconds; past it the attempt failed.
pub const WEBHOOK_TIMEOUT_MS: u64 = 10_000;

/// The vault name a subscription's secrets are sealed under (bound into the ciphertext).
pub(crate) fn secret_name(subscription: &str) -> String {
    format!("webhook:{subscription}")
}

/// How long the secret before a rotation still signs deliveries, in milliseconds: a day, time
/// to roll the new secret out to every receiver.
pub const WEBHOOK_SECRET_GRACE_MS: i64 = 24 * 60 * 60 * 1_000;
