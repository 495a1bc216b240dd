//! Steward's own events, derived from the sealed audit log (issue #15, items 3-4).
//!
//! Every state change already commits its audit event in its own transaction, and the sealer
//! gives sealed events a gap-free `seq` (`audit_sealer.rs`). An event is a sealed audit event
//! whose action has a public name ([`public_type`]); its id is `evt_<seq>`, so it is durable,
//! ordered, and the same on every replica. The live stream (`api/stream.rs`) and the webhook
//! deliveries (`webhooks/`) both read the log through [`Feed::next`]: there is no second write
//! path, and nothing is published that was not committed.

mod catalog;
mod feed;

pub(crate) use catalog::{event_id, parse_event_id, EVENT_TYPES};
pub(crate) use feed::Feed;
