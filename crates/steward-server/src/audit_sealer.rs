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
use steward_store::{AuditSeal, SealOutcome, StoreError, SEAL_BATCH_EVENTS_MAX};

/// How often the sealer looks for unsealed events, in milliseconds: how long an event waits
/// for its seal at most while the sealer keeps up (a backlog is sealed batch after batch).
pub const AUDIT_SEAL_INTERVAL_MS: u64 = 200;

/// Seals forever, every [`AUDIT_SEAL_INTERVAL_MS`], holding the sealer's lease for `lease` (the
/// replica lease) from each seal.
pub(crate) async fn run(state: AppState, lease: Duration) {
    let mut tick = tokio::time::interval(Duration::from_millis(AUDIT_SEAL_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The sealer's epoch this replica holds (its fencing token), from its last seal.
    let mut epoch = None;
    loop {
        tick.tick().await;
        // A replica that may be taken for dead seals nothing until a heartbeat commits again.
        if !state.lease.held() {
            continue;
        }
        epoch = seal_backlog(&state, lease, epoch).await;
    }
}

/// Seals batch after batch until nothing is left unsealed, another replica holds the lease, or
/// a seal fails (retried at the next tick). Answers the sealer's epoch this replica holds
/// after: a seal under a stale one is refused, and the next takes the lease afresh.
async fn seal_backlog(state: &AppState, lease: Duration, mut epoch: Option<i64>) -> Option<i64> {
    loop {
        let seal = AuditSeal {
            sealer: state.replica.clone(),
            now: state.clock.now(),
            lease_ms: lease.as_millis() as i64,
            events_max: SEAL_BATCH_EVENTS_MAX,
            epoch,
        };
        match state.store.seal_audit(&seal).await {
            Ok(SealOutcome::Sealed {
                events, epoch: now, ..
            }) => {
                epoch = Some(now);
                if events < SEAL_BATCH_EVENTS_MAX {
                    return epoch;
                }
            }
            Ok(SealOutcome::Idle) => return epoch,
            Ok(SealOutcome::Held { by, until }) => {
                tracing::debug!(sealer = %by, until = until.0, "another replica seals the audit log");
                return None;
            }
            Err(StoreError::Fenced { held, current, .. }) => {
                tracing::warn!(
                    held,
                    current,
                    "fenced: another replica sealed the audit log since this one last did; \
                     nothing was sealed here, and the sealer's lease is taken afresh"
                );
                return None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "sealing the audit log failed; retrying");
                return epoch;
            }
        }
    }
}
