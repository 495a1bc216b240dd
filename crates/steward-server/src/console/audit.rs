//! Reading the audit log for the console: the whole log verified as `steward audit verify`
//! does (the sealed chain and each unsealed event's own hash), and the environment's events
//! kept (all, or those about some subjects).

use crate::error::ApiError;
use crate::state::AppState;
use steward_store::{verify_log, AuditEvent, ChainError, LogReport};

/// Events read per page while scanning, as `steward audit verify` reads them.
const AUDIT_PAGE_EVENTS: u32 = 5_000;

/// What a scan found.
pub struct Scan {
    /// The sealed chain's length and head and the unsealed events, or where the log broke.
    pub verified: Result<LogReport, ChainError>,
    /// The caller's environment's matching events, newest last (sealed in chain order, then
    /// unsealed in insertion order), at most `keep` of them.
    pub events: Vec<AuditEvent>,
}

/// Verifies the whole log and keeps the last `keep` events of `env` that `wanted` accepts.
/// Other environments' events are verified (the chain is one line) but never kept.
pub async fn scan(
    state: &AppState,
    env: &str,
    keep: usize,
    wanted: impl Fn(&AuditEvent) -> bool,
) -> Result<Scan, ApiError> {
    let mut events = std::collections::VecDeque::new();
    let verified = verify_log(state.store.as_ref(), AUDIT_PAGE_EVENTS, |event| {
        if event.env_id.as_deref() == Some(env) && wanted(event) {
            if events.len() == keep {
                events.pop_front();
            }
            events.push_back(event.clone());
        }
    })
    .await?;
    Ok(Scan {
        verified,
        events: events.into(),
    })
}
