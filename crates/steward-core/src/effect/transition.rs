use super::{EffectEvent, EffectState, ManualOutcome, Rejection};
use serde::Serialize;

/// Work the driver performs after committing a transition, as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Work {
    /// Commit (and fsync) a `dispatching` attempt record. Must be durable before [`Work::Send`].
    RecordAttempt,
    /// Make the provider call. Only ever follows a durable [`Work::RecordAttempt`].
    Send,
    /// Append an evidence entry saying what happened and why. Evidence is never overwritten.
    AppendEvidence,
    /// The effect happened: reserved impact becomes consumed.
    ConsumeImpact,
    /// The effect provably did not happen: reserved impact is released.
    ReleaseImpact,
    /// The outcome is unknown: keep the reservation as exposure and queue a read-only reconcile.
    QueueReconcile,
}

/// A `(state, event)` pair that the effect's rules do not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("effect in state `{}` cannot take event {event:?}", state.name())]
pub struct IllegalTransition {
    pub state: EffectState,
    pub event: EffectEvent,
}

/// True when some event takes an effect from `from` to `to`: the check a store makes before it
/// writes a change, so that a change built by hand cannot skip a step of the rules.
pub fn is_legal(from: EffectState, to: EffectState) -> bool {
    EffectEvent::ALL
        .iter()
        .any(|&event| matches!(next(from, event), Ok((after, _)) if after == to))
}

/// What a transition's work does to the effect's impact reservations: consumed, released, kept
/// as exposure, or nothing.
pub fn settlement(work: &[Work]) -> Option<crate::impact::ReservationState> {
    use crate::impact::ReservationState as R;
    let mut settles = work.iter().filter_map(|w| match w {
        Work::ConsumeImpact => Some(R::Consumed),
        Work::ReleaseImpact => Some(R::Released),
        Work::QueueReconcile => Some(R::Exposure),
        Work::RecordAttempt | Work::Send | Work::AppendEvidence => None,
    });
    let first = settles.next();
    debug_assert!(
        settles.next().is_none(),
        "one settlement per transition: {work:?}"
    );
    first
}

/// The effect's rules: the state after `event`, and the work to do for it.
///
/// Every legal pair is spelled out; illegal pairs are grouped per state so that adding an event
/// forces a decision for every state.
pub fn next(
    state: EffectState,
    event: EffectEvent,
) -> Result<(EffectState, Vec<Work>), IllegalTransition> {
    use EffectEvent as E;
    use EffectState as S;
    use Work as W;
    let illegal = Err(IllegalTransition { state, event });
    let settled_failed = (S::Failed, vec![W::AppendEvidence, W::ReleaseImpact]);
    match state {
        S::AwaitingApproval => match event {
            E::Approve => Ok((S::Ready, vec![W::AppendEvidence])),
            E::Deny => Ok((
                S::Rejected {
                    reason: Rejection::Denied,
                },
                vec![W::AppendEvidence, W::ReleaseImpact],
            )),
            E::Expire => Ok((
                S::Rejected {
                    reason: Rejection::Expired,
                },
                vec![W::AppendEvidence, W::ReleaseImpact],
            )),
            E::Refuse
            | E::Block
            | E::BeginAttempt
            | E::Replay
            | E::NotSent
            | E::ProviderAccepted { .. }
            | E::ProviderRejected
            | E::Ambiguous
            | E::Restarted
            | E::ReconcileFound { .. }
            | E::ReconcileAbsent
            | E::ReconcileInconclusive
            | E::Resolve { .. } => illegal,
        },
        S::Ready => match event {
            E::BeginAttempt => Ok((S::Dispatching, vec![W::RecordAttempt, W::Send])),
            E::Refuse => Ok((
                S::Rejected {
                    reason: Rejection::Refused,
                },
                vec![W::AppendEvidence, W::ReleaseImpact],
            )),
            E::Block => Ok(settled_failed),
            E::Approve
            | E::Deny
            | E::Expire
            | E::Replay
            | E::NotSent
            | E::ProviderAccepted { .. }
            | E::ProviderRejected
            | E::Ambiguous
            | E::Restarted
            | E::ReconcileFound { .. }
            | E::ReconcileAbsent
            | E::ReconcileInconclusive
            | E::Resolve { .. } => illegal,
        },
        S::Dispatching => match event {
            E::ProviderAccepted { confirmed } => Ok((
                S::Succeeded { confirmed },
                vec![W::AppendEvidence, W::ConsumeImpact],
            )),
            E::NotSent | E::ProviderRejected => Ok(settled_failed),
            E::Ambiguous | E::Restarted => {
                Ok((S::Unknown, vec![W::AppendEvidence, W::QueueReconcile]))
            }
            // A lookup while an attempt is in flight decides nothing; it is still evidence.
            E::ReconcileInconclusive => Ok((S::Dispatching, vec![W::AppendEvidence])),
            E::Approve
            | E::Deny
            | E::Expire
            | E::Refuse
            | E::Block
            | E::BeginAttempt
            | E::Replay
            | E::ReconcileFound { .. }
            | E::ReconcileAbsent
            | E::Resolve { .. } => illegal,
        },
        S::Unknown => match event {
            E::Replay => Ok((S::Dispatching, vec![W::RecordAttempt, W::Send])),
            E::ReconcileFound { confirmed } => Ok((
                S::Succeeded { confirmed },
                vec![W::AppendEvidence, W::ConsumeImpact],
            )),
            E::ReconcileAbsent => Ok(settled_failed),
            E::ReconcileInconclusive => Ok((S::Unknown, vec![W::AppendEvidence])),
            E::Resolve {
                outcome: ManualOutcome::Succeeded,
            } => Ok((
                S::Succeeded { confirmed: false },
                vec![W::AppendEvidence, W::ConsumeImpact],
            )),
            E::Resolve {
                outcome: ManualOutcome::Failed,
            } => Ok(settled_failed),
            E::Approve
            | E::Deny
            | E::Expire
            | E::Refuse
            | E::Block
            | E::BeginAttempt
            | E::NotSent
            | E::ProviderAccepted { .. }
            | E::ProviderRejected
            | E::Ambiguous
            | E::Restarted => illegal,
        },
        // Settled and rejected effects never change again: a later lookup or decision is
        // answered from the record, never by a transition.
        S::Succeeded { .. } | S::Failed | S::Rejected { .. } => illegal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effect::Outcome;
    use proptest::prelude::*;

    /// The whole table, written out once more as the specification: (state, event) -> new state.
    fn expected(state: EffectState, event: EffectEvent) -> Option<EffectState> {
        use EffectEvent as E;
        use EffectState as S;
        Some(match (state, event) {
            (S::AwaitingApproval, E::Approve) => S::Ready,
            (S::AwaitingApproval, E::Deny) => S::Rejected {
                reason: Rejection::Denied,
            },
            (S::AwaitingApproval, E::Expire) => S::Rejected {
                reason: Rejection::Expired,
            },
            (S::Ready, E::BeginAttempt) => S::Dispatching,
            (S::Ready, E::Refuse) => S::Rejected {
                reason: Rejection::Refused,
            },
            (S::Ready, E::Block) => S::Failed,
            (S::Dispatching, E::ProviderAccepted { confirmed }) => S::Succeeded { confirmed },
            (S::Dispatching, E::NotSent | E::ProviderRejected) => S::Failed,
            (S::Dispatching, E::Ambiguous | E::Restarted) => S::Unknown,
            (S::Dispatching, E::ReconcileInconclusive) => S::Dispatching,
            (S::Unknown, E::Replay) => S::Dispatching,
            (S::Unknown, E::ReconcileFound { confirmed }) => S::Succeeded { confirmed },
            (S::Unknown, E::ReconcileAbsent) => S::Failed,
            (S::Unknown, E::ReconcileInconclusive) => S::Unknown,
            (
                S::Unknown,
                E::Resolve {
                    outcome: ManualOutcome::Succeeded,
                },
            ) => S::Succeeded { confirmed: false },
            (
                S::Unknown,
                E::Resolve {
                    outcome: ManualOutcome::Failed,
                },
            ) => S::Failed,
            _ => return None,
        })
    }

    #[test]
    fn every_state_event_pair_matches_the_table() {
        let mut legal = 0;
        for state in EffectState::ALL {
            for event in EffectEvent::ALL {
                let got = next(state, event).map(|(s, _)| s).ok();
                assert_eq!(got, expected(state, event), "{state:?} x {event:?}");
                legal += usize::from(got.is_some());
            }
        }
        assert_eq!(
            legal, 20,
            "the number of legal pairs changed: update the table on purpose"
        );
    }

    #[test]
    fn a_move_is_legal_exactly_when_some_event_makes_it() {
        let mut legal = 0;
        for from in EffectState::ALL {
            for to in EffectState::ALL {
                let made = EffectEvent::ALL
                    .iter()
                    .any(|&e| next(from, e).is_ok_and(|(after, _)| after == to));
                assert_eq!(is_legal(from, to), made, "{from:?} -> {to:?}");
                legal += usize::from(made);
            }
        }
        assert_eq!(
            legal, 16,
            "the number of legal moves changed: update this on purpose"
        );
        assert!(!is_legal(
            EffectState::Ready,
            EffectState::Succeeded { confirmed: true }
        ));
        assert!(!is_legal(EffectState::Failed, EffectState::Dispatching));
        assert!(is_legal(EffectState::Ready, EffectState::Dispatching));
    }

    #[test]
    fn the_work_settles_reservations_as_the_state_reached_says() {
        for state in EffectState::ALL {
            for event in EffectEvent::ALL {
                if let Ok((to, work)) = next(state, event) {
                    let by_state = crate::impact::reservation_after(to);
                    let by_work = settlement(&work);
                    // A move into a state that holds nothing (ready, dispatching) settles
                    // nothing; a move to a settled state settles by its work.
                    if by_work.is_some() {
                        assert_eq!(by_work, by_state, "{state:?} x {event:?}");
                    } else {
                        assert!(
                            by_state.is_none() || to == state,
                            "{state:?} x {event:?} -> {to:?}: the work settles nothing but the state says {by_state:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn send_only_ever_follows_a_durable_attempt_record() {
        for state in EffectState::ALL {
            for event in EffectEvent::ALL {
                if let Ok((_, work)) = next(state, event) {
                    if let Some(send) = work.iter().position(|w| *w == Work::Send) {
                        let record = work.iter().position(|w| *w == Work::RecordAttempt);
                        assert!(
                            record.is_some_and(|r| r < send),
                            "{state:?} x {event:?}: {work:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn only_begin_and_replay_send() {
        for state in EffectState::ALL {
            for event in EffectEvent::ALL {
                if let Ok((_, work)) = next(state, event) {
                    let sends = work.contains(&Work::Send);
                    let allowed = matches!(event, EffectEvent::BeginAttempt | EffectEvent::Replay);
                    assert!(!sends || allowed, "{state:?} x {event:?} sends");
                }
            }
        }
    }

    /// A reference model: counts sends and checks that a settled effect never moves.
    #[derive(Default)]
    struct Model {
        sends: u32,
        replays: u32,
        settled: Option<EffectState>,
    }

    fn any_event() -> impl Strategy<Value = EffectEvent> {
        (0..EffectEvent::ALL.len()).prop_map(|i| EffectEvent::ALL[i])
    }

    fn any_start() -> impl Strategy<Value = EffectState> {
        prop_oneof![
            Just(EffectState::AwaitingApproval),
            Just(EffectState::Ready)
        ]
    }

    proptest! {
        #[test]
        fn random_event_sequences_keep_the_promises(
            start in any_start(),
            events in proptest::collection::vec(any_event(), 0..40),
        ) {
            let mut state = start;
            let mut model = Model::default();
            for event in events {
                match next(state, event) {
                    Ok((new_state, work)) => {
                        prop_assert!(model.settled.is_none(), "a settled effect moved: {state:?} x {event:?}");
                        if work.contains(&Work::Send) {
                            model.sends += 1;
                            if event == EffectEvent::Replay { model.replays += 1; }
                        }
                        // Without a replay there is at most one send, ever.
                        prop_assert!(model.sends <= 1 + model.replays);
                        // Unknown never becomes Failed except by a conclusive lookup or a person.
                        if state == EffectState::Unknown && new_state == EffectState::Failed {
                            let by_lookup_or_person = matches!(event, EffectEvent::ReconcileAbsent | EffectEvent::Resolve { .. });
                            prop_assert!(by_lookup_or_person, "unknown failed by {:?}", event);
                        }
                        // Success is only ever learned, never assumed.
                        if matches!(new_state, EffectState::Succeeded { .. }) {
                            let learned = matches!(event,
                                EffectEvent::ProviderAccepted { .. } | EffectEvent::ReconcileFound { .. } | EffectEvent::Resolve { .. });
                            prop_assert!(learned, "success assumed by {:?}", event);
                        }
                        if new_state.is_terminal() { model.settled = Some(new_state); }
                        state = new_state;
                    }
                    Err(err) => {
                        prop_assert_eq!(err.state, state);
                        prop_assert_eq!(expected(state, event), None);
                    }
                }
                // Pending outcome only while dispatching.
                prop_assert_eq!(state.outcome() == Outcome::Pending, state == EffectState::Dispatching);
            }
        }
    }
}
