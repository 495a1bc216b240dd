//! Reading the audit log for the console: the whole chain verified as `steward audit verify`
//! does, and the environment's events kept (all, or those about some subjects).

use crate::error::ApiError;
use crate::state::AppState;
use steward_store::{verify_chain, AuditEvent, ChainError, GENESIS_HASH};

/// Events read per page while scanning, as `steward audit verify` reads them.
const AUDIT_PAGE_EVENTS: u32 = 5_000;

/// What a scan found.
pub struct Scan {
    /// The chain's length and head hash, or where it broke.
    pub verified: Result<(i64, String), ChainError>,
    /// The caller's environment's matching events, newest last, at most `keep` of them.
    pub events: Vec<AuditEvent>,
}

/// Verifies the whole chain and keeps the last `keep` events of `env` that `wanted` accepts.
/// Other environments' events are verified (the chain is one line) but never kept.
pub async fn scan(
    state: &AppState,
    env: &str,
    keep: usize,
    wanted: impl Fn(&AuditEvent) -> bool,
) -> Result<Scan, ApiError> {
    let (mut seq, mut hash) = (0_i64, GENESIS_HASH.to_string());
    let mut events = std::collections::VecDeque::new();
    loop {
        let page = state.store.audit_events(seq, AUDIT_PAGE_EVENTS).await?;
        if page.is_empty() {
            break;
        }
        match verify_chain(seq, &hash, &page) {
            Ok((s, h)) => (seq, hash) = (s, h),
            Err(broken) => {
                return Ok(Scan {
                    verified: Err(broken),
                    events: events.into(),
                })
            }
        }
        for event in page {
            if event.env_id.as_deref() == Some(env) && wanted(&event) {
                if events.len() == keep {
                    events.pop_front();
                }
                events.push_back(event);
            }
        }
    }
    Ok(Scan {
        verified: Ok((seq, hash)),
        events: events.into(),
    })
}
