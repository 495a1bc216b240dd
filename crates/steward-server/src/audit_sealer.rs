//! The audit sealer: seals committed audit events into the hash chain in the background
//! (issue #13; the scheme is in `steward_store::audit`).
//!
//! Every audited commit writes its event unsealed, carrying its own content hash. Every server
//! process runs this task. On a shared store the sealer's lease (`Store::seal_audit`) keeps one
//! replica sealing while it is registered and renews the lease; when it stops (its lease runs
//! out, or a recovery sweep finds it dead and removes it) the next replica to try takes over.
//! Correctness does not rest on the lease: seals serialize in the database, and a seal that
//! dies mid-batch commits nothing. With the embedded store the one server process seals.

use crate::state::AppState;
use std::time::Duration;
use steward_store::{AuditSeal, SealOutcome, SEAL_BATCH_EVENTS_MAX};

/// How often the sealer looks for unsealed events, in milliseconds: how long an event waits
/// for its seal at most while the sealer keeps up (a backlog is sealed batch after batch).
pub const AUDIT_SEAL_INTERVAL_MS: u64 = 200;

/// Seals forever, every [`AUDIT_SEAL_INTERVAL_MS`], holding the sealer's lease for `lease` (the
/// replica lease) from each seal.
pub(crate) async fn run(state: AppState, lease: Duration) {
    let mut tick = tokio::time::interval(Duration::from_millis(AUDIT_SEAL_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        seal_backlog(&state, lease).await;
    }
}

/// Seals batch after batch until nothing is left unsealed, another replica holds the lease, or
/// a seal fails (retried at the next tick).
async fn seal_backlog(state: &AppState, lease: Duration) {
    loop {
        let seal = AuditSeal {
            sealer: state.replica.clone(),
            now: state.clock.now(),
            lease_ms: lease.as_millis() as i64,
            events_max: SEAL_BATCH_EVENTS_MAX,
        };
        match state.store.seal_audit(&seal).await {
            Ok(SealOutcome::Sealed { events, .. }) if events == SEAL_BATCH_EVENTS_MAX => {}
            Ok(SealOutcome::Sealed { .. } | SealOutcome::Idle) => return,
            Ok(SealOutcome::Held { by, until }) => {
                tracing::debug!(sealer = %by, until = until.0, "another replica seals the audit log");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "sealing the audit log failed; retrying");
                return;
            }
        }
    }
}
