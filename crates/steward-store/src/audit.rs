//! The hash chain over audit events: each event's hash covers its content and the previous hash,
//! so changing or removing any event breaks every hash after it.

use crate::records::AuditEvent;
use serde_json::json;
use steward_core::{canonical_json, fingerprint_str};

/// The hash before the first event.
pub const GENESIS_HASH: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// The hash of an event given the hash before it.
pub fn event_hash(event: &AuditEvent) -> String {
    let content = json!({
        "seq": event.seq,
        "at": event.at,
        "env": event.env_id,
        "actor": event.actor,
        "kind": event.kind,
        "subject": event.subject,
        "before": event.before,
        "after": event.after,
        "prev": event.prev_hash,
    });
    fingerprint_str(&canonical_json(&content))
}

/// Where a chain is broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("audit event {seq}: previous hash does not match the event before it")]
    BrokenLink { seq: i64 },
    #[error("audit event {seq}: content does not match its hash")]
    Tampered { seq: i64 },
    #[error("audit event {seq}: sequence gap after {previous}")]
    Gap { seq: i64, previous: i64 },
}

/// Verifies a run of events that follows `prev_hash` (at sequence `prev_seq`).
pub fn verify_chain(
    prev_seq: i64,
    prev_hash: &str,
    events: &[AuditEvent],
) -> Result<(i64, String), ChainError> {
    let mut seq = prev_seq;
    let mut hash = prev_hash.to_string();
    for event in events {
        if event.seq != seq + 1 {
            return Err(ChainError::Gap {
                seq: event.seq,
                previous: seq,
            });
        }
        if event.prev_hash != hash {
            return Err(ChainError::BrokenLink { seq: event.seq });
        }
        if event_hash(event) != event.hash {
            return Err(ChainError::Tampered { seq: event.seq });
        }
        seq = event.seq;
        hash = event.hash.clone();
    }
    Ok((seq, hash))
}
