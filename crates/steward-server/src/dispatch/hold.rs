//! The last check before a provider request leaves (write path step 4): this replica still
//! holds its lease, it was not fenced since the attempt was begun, and the attempt's deadline
//! has not passed (docs/DECISIONS.md, "Fencing tokens").
//!
//! Other replicas take this one for dead once its last heartbeat is older than the lease, and
//! take any attempt overdue by more than the lease. A replica paused, or cut off from its
//! database, past its lease may wake up with a request about to leave: it must not send it.
//! It waits (at most until the attempt's deadline) for a heartbeat to commit; if that
//! heartbeat finds this replica fenced (its work taken over), or the deadline passes, the
//! attempt is dropped unsent: closed `failed` (nothing was sent) under the attempt's own fence,
//! which a takeover has already moved on, so the new owner's settlement stands.

use super::record_answer_fenced;
use crate::effect_error::EffectResult;
use crate::state::AppState;
use serde_json::json;
use std::time::Duration;
use steward_core::{
    EffectEvent, EffectState, EvidenceKind, EvidenceSource, IdempotencyKey, Millis,
};
use steward_store::{Actor, AttemptChange, EffectChange, Fence, InvocationRecord, NewEvidence};

/// What an attempt holds from before its `Begin` committed: the lease's generation then, and
/// a deadline no later than the attempt's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    generation: u64,
    deadline: Millis,
}

impl Hold {
    /// Taken just before the attempt's `Begin` is built and committed: a fence found in
    /// between counts against the attempt.
    pub(crate) fn take(state: &AppState) -> Self {
        Hold {
            generation: state.lease.generation(),
            deadline: state
                .clock
                .now()
                .plus_ms(state.dispatch_timeout.as_millis() as i64),
        }
    }
}

/// Why a request must not leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lost {
    /// No heartbeat committed within a lease, and none did before the attempt's deadline.
    Expired,
    /// A heartbeat found this replica fenced after the attempt was begun.
    Fenced,
    /// The attempt's deadline passed before the request could leave (shared stores only,
    /// where a sweep takes an overdue attempt).
    Overdue,
}

impl Lost {
    fn reason(self) -> &'static str {
        match self {
            Lost::Expired => {
                "this Steward process did not hold its replica lease (no heartbeat committed \
                 within the lease) until the attempt's deadline"
            }
            Lost::Fenced => {
                "another Steward process took this process for dead and took over its work \
                 after this attempt was recorded"
            }
            Lost::Overdue => "the attempt's deadline passed before the request could leave",
        }
    }
}

/// Whether the request may leave now: waits for the lease while it is not held, at most until
/// the attempt's deadline.
pub(crate) async fn may_send(state: &AppState, hold: Hold) -> Result<(), Lost> {
    if !state.lease.held() {
        let left = (hold.deadline.0 - state.clock.now().0).max(0) as u64;
        tracing::warn!(
            wait_ms_max = left,
            "this replica does not hold its lease: the request waits for a heartbeat"
        );
        if !state.lease.held_within(Duration::from_millis(left)).await {
            return Err(Lost::Expired);
        }
    }
    if state.lease.generation() != hold.generation {
        return Err(Lost::Fenced);
    }
    // Only a shared store's sweep takes an overdue attempt; alone, a late send is still the
    // attempt's own.
    if state.lease.is_shared() && state.clock.now() >= hold.deadline {
        return Err(Lost::Overdue);
    }
    Ok(())
}

/// Closes attempt `number` unsent, as `failed`, under its holder's fence: refused (and the
/// new owner's state kept) when the attempt was taken over. Answers as `record_answer` does.
pub(crate) async fn drop_unsent(
    state: &AppState,
    inv: &InvocationRecord,
    number: u32,
    lost: Lost,
    answers_request: Option<IdempotencyKey>,
) -> EffectResult<Option<InvocationRecord>> {
    let reason = format!("not sent: {}", lost.reason());
    tracing::warn!(effect = %inv.effect_id, attempt = number, ?lost, "{reason}");
    let evidence = NewEvidence::new(EvidenceKind::Blocked, EvidenceSource::Steward, &reason)
        .with_data(json!({"attempt": number, "code": "lease_lost"}));
    let mut change = EffectChange::of(
        &inv.env_id,
        &inv.effect_id,
        EffectState::Dispatching,
        EffectEvent::NotSent,
        evidence,
        Actor::key(&inv.created_by, state.clock.now()),
    )?;
    change.attempt = Some(AttemptChange::Finish {
        number,
        response_status: None,
        error: Some(reason.clone()),
    });
    change.error = Some(json!({"code": "not_sent", "message": reason}));
    change.answers_request = answers_request;
    change.fence = Some(Fence::Holder(state.replica.clone()));
    record_answer_fenced(state, inv, number, &change, None, &reason).await
}
