//! A decision on an approval, and the dispatch of the invocation it releases: write path steps
//! 2 to 5 for released work, with step 3 in the decision's own commit.
//!
//! Before deciding, one read (`Store::release_context`) gives the approval and, for a gated
//! invocation still parked, everything its dispatch reads. When the decision, cast on the
//! approval as read, would release the invocation, its request is prepared and checked first
//! (step 2) and its first attempt (reservation and attempt) goes into the decision's
//! transaction (`Store::decide_and_begin`, step 3), as `submit_and_begin` does for a fresh
//! invoke; then it is sent and its answer recorded (steps 4 and 5). One commit before the call
//! where there were three (the decision, the reservation, the attempt), and no reads after.
//!
//! A decision that releases without an attempt in its commit leaves the effect `ready`, owned by
//! the deciding replica, as before: it is dispatched at once as any released work is
//! ([`super::dispatch`]) or, if this replica dies first, by the sweep that takes it over. That
//! happens when the environment is halted (it is parked), when another key's decision landed
//! between the read and the decision (the release was not foreseen), and when step 2 refused the
//! request (it is settled `failed`, unsent, as the dispatcher would).

use super::prepared::Blocked;
use super::{begin_change, block, checked, park, reserve, send_and_record};
use crate::crash;
use crate::effect_error::{EffectError, EffectResult};
use crate::state::AppState;
use steward_core::{CrashPoint, Decision, EffectEvent, EffectState};
use steward_store::{
    DecideOutcome, DecisionRequest, FirstAttempt, FirstAttemptOutcome, InvocationRecord,
    ParkedInvocation,
};

/// What a decision came to, and what became of the invocation it released.
pub struct Decided {
    pub outcome: DecideOutcome,
    /// The released invocation as its recorded answer left it, when it was sent from here with
    /// the decision's attempt; `None` otherwise (read it to answer).
    pub answered: Option<InvocationRecord>,
}

/// The released invocation's first attempt, prepared before the decision.
struct Planned {
    parked: ParkedInvocation,
    prepared: super::prepared::Prepared,
    first: FirstAttempt,
    /// Taken before the attempt's `Begin` was built (`hold.rs`).
    hold: super::hold::Hold,
}

/// Casts `request` and dispatches what it releases (see the module's doc). Run it in a task of
/// its own: a caller that goes away must not cancel a dispatch halfway.
pub async fn decide_and_dispatch(
    state: &AppState,
    request: &DecisionRequest,
) -> EffectResult<Decided> {
    // An approval binds the input its decider saw: when the front end did not say which, the
    // input as the plan reads it (so an edit landing between that read and the decision is
    // refused, never approved with an attempt prepared from the input before it).
    let mut request = request.clone();
    let request = &mut request;
    let (planned, blocked) = match plan(state, request).await? {
        Plan::Attempt(planned) => (Some(*planned), None),
        Plan::Blocked(blocked) => (None, Some(blocked)),
        Plan::Nothing => (None, None),
    };
    // Held until the answer is recorded or kept (`pending.rs`).
    let _sending = planned
        .as_ref()
        .map(|p| state.pending.sending(&p.first.begin.effect_id));
    let started = std::time::Instant::now();
    let decided = state
        .store
        .decide_and_begin(&*request, planned.as_ref().map(|p| &p.first))
        .await;
    let decided = match decided {
        Ok(decided) => decided,
        // The commit's answer was lost: the decision and the released attempt may be recorded
        // or not. Nothing is sent; a recorded attempt is settled failed as not sent once the
        // database answers (`pending.rs`), as for an invoke's intent.
        Err(source) if source.commit_unknown() => {
            if let Some(planned) = &planned {
                let settle = super::pending::not_sent(&planned.first.begin, None);
                state.pending.keep(settle, super::pending::Kind::NotSent);
            }
            return Err(EffectError::IntentNotKnown { source });
        }
        Err(source) => return Err(source.into()),
    };
    state
        .metrics
        .store_commit("decide_approval", started.elapsed());
    let released = match &decided.outcome {
        DecideOutcome::Recorded {
            ready: Some(inv), ..
        } => inv.as_ref().clone(),
        _ => {
            return Ok(Decided {
                outcome: decided.outcome,
                answered: None,
            })
        }
    };
    let answered = match (decided.first, planned) {
        (Some(FirstAttemptOutcome::Begun), Some(p)) => {
            // The attempt committed with the decision: from here on this is the invoke path's
            // step 4 (the crash window is `server_after_record`).
            let inv = &p.parked.invocation;
            send_and_record(
                state,
                inv,
                &p.parked.definition,
                1,
                &p.prepared,
                None,
                p.hold,
            )
            .await?
        }
        (Some(FirstAttemptOutcome::Refused(refused)), _) => {
            reserve::refuse(state, &released, refused).await?;
            None
        }
        (Some(FirstAttemptOutcome::Halted), _) => {
            crash::reach(state, CrashPoint::ServerAfterApproval)?;
            park::park(state, &released, park::Parked::Halted).await?;
            None
        }
        (Some(FirstAttemptOutcome::Held), _) => {
            crash::reach(state, CrashPoint::ServerAfterApproval)?;
            park::park(state, &released, park::Parked::Held).await?;
            None
        }
        (_, _) => {
            crash::reach(state, CrashPoint::ServerAfterApproval)?;
            match blocked {
                Some(blocked) => block(state, &released, blocked).await?,
                None => super::dispatch(state, &released).await?,
            }
            None
        }
    };
    Ok(Decided {
        outcome: decided.outcome,
        answered,
    })
}

enum Plan {
    /// The decision would release the invocation: its first attempt, ready to commit with it.
    Attempt(Box<Planned>),
    /// The decision would release the invocation, and step 2 refused its request.
    Blocked(Blocked),
    /// The decision would release nothing here (a denial, an approval short of its count, a
    /// custom request, an approval already settled).
    Nothing,
}

/// Reads what the decision may release and, when it would release a parked invocation, prepares
/// and checks its request (step 2) and builds its first attempt (step 3).
///
/// Sets `request.seen` to the approval's input fingerprint as read here, when it was not set.
async fn plan(state: &AppState, request: &mut DecisionRequest) -> EffectResult<Plan> {
    if request.decision != Decision::Approve {
        return Ok(Plan::Nothing);
    }
    let Some(context) = state
        .store
        .release_context(&request.env_id, &request.approval_id)
        .await?
    else {
        return Ok(Plan::Nothing);
    };
    if request.seen.is_none() {
        request.seen = context.approval.input_fingerprint.clone();
    }
    if !context.releases(request) {
        return Ok(Plan::Nothing);
    }
    let Some(parked) = context.parked else {
        return Ok(Plan::Nothing);
    };
    let inv = &parked.invocation;
    let effect_key = parked.provider_idempotency_key.as_deref();
    let (prepared, host) = match checked(
        state,
        inv,
        &parked.definition,
        effect_key,
        Some(&parked.secrets),
    )
    .await
    {
        Ok(checked) => checked,
        Err(blocked) => return Ok(Plan::Blocked(blocked)),
    };
    let hold = super::hold::Hold::take(state);
    let begin = begin_change(
        state,
        inv,
        EffectState::Ready,
        EffectEvent::BeginAttempt,
        1,
        &host,
        &prepared,
        effect_key,
    )?;
    let first = FirstAttempt {
        impact: reserve::request(state, inv, &parked.definition),
        begin,
    };
    Ok(Plan::Attempt(Box::new(Planned {
        parked,
        prepared,
        first,
        hold,
    })))
}
