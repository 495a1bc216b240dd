//! Signed webhooks (issue #15 item 4): subscriptions to Steward's events, delivered by HTTP POST
//! from a durable cursor over the sealed audit log.
//!
//! Topics are built in, one per event family ([`topics`]). A subscription's secret (`whsec_`)
//! is sealed by the vault and shown once, at creation and at each rotation; after a rotation
//! deliveries are signed with both secrets for [`WEBHOOK_SECRET_GRACE_MS`]. Each replica runs
//! [`deliver::run`], which leases due subscriptions, POSTs the next event each one takes, and
//! records the outcome; the cursor moves only after a 2xx (or a dead letter), so an event
//! committed before a crash is delivered after the restart.

pub(crate) mod deliver;
pub(crate) mod signature;
pub(crate) mod topics;

/// How long the secret before a rotation still signs deliveries, in milliseconds: a day, time
/// to roll the new secret out to every receiver.
pub const WEBHOOK_SECRET_GRACE_MS: i64 = 24 * 60 * 60 * 1_000;
