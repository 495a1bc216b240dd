//! What a recovery sweep does with one orphaned effect, the same in every backend. Each backend
//! finds the orphans (its own SQL) and applies the answer in the sweep's transaction.

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::records::*;
use serde_json::json;
use steward_core::{EffectEvent, EffectId, EffectState, EnvironmentId, InvocationId};
use steward_core::{EvidenceKind, EvidenceSource};

/// Orphans one PostgreSQL sweep transaction settles at most. Each of its statements carries the
/// whole chunk (arrays of this length), and the transaction holds the write lock for one chunk
/// only, so the hot path gets in between the chunks of a large backlog; 100,000 orphans are 20
/// transactions of about ten statements each. (The embedded store settles a sweep in one
/// transaction: it serves one process, and sweeps before it listens.)
pub const SWEEP_CHUNK_EFFECTS: usize = 5_000;

/// An effect in flight (`ready` or `dispatching`) whose owner is dead for the sweep, or a
/// `dispatching` one whose attempt is overdue (its deadline passed by more than the lease).
#[derive(Debug, Clone)]
pub(crate) struct Orphan {
    pub env: EnvironmentId,
    pub effect: EffectId,
    pub invocation: InvocationId,
    pub state: EffectState,
    /// Attempts recorded so far: for a `dispatching` effect, the number of the one in flight.
    pub attempts: u32,
    /// The dead owner, as stored (`None` for work recorded before replicas were tracked).
    pub owner: Option<String>,
    /// An approval released it, or an operator's hold parks it (`ready` effects only): either
    /// way it is kept to be dispatched once, not settled `failed`.
    pub approved: bool,
    /// Its attempt in flight is overdue (`Sweep::overdue_before`): taken whether or not its owner
    /// is alive.
    pub overdue: bool,
}

/// The sweep's answer for one orphan.
#[derive(Debug, Clone)]
pub(crate) enum Settle {
    /// Settle it now with this compare-and-set change (nothing is sent).
    Change(Box<EffectChange>),
    /// Approved work: it becomes the sweeping replica's, to dispatch once.
    TakeOver,
}

/// What to do with `orphan`: a `dispatching` one becomes `unknown` (its request may have left),
/// an approved `ready` one is taken over, any other `ready` one is `failed` (provably never sent:
/// no attempt was recorded).
pub(crate) fn settle(orphan: &Orphan, sweep: &Sweep) -> Settle {
    let actor = Actor::system(sweep.now);
    let data = json!({"owner": orphan.owner, "recoveredBy": sweep.replica});
    let settle = match orphan.state {
        EffectState::Dispatching => {
            let why = if orphan.overdue {
                "This attempt's deadline passed more than a lease ago with no answer recorded \
                 (its Steward process paused, lost its database, or stopped): the provider may \
                 have acted. Taken over and marked unknown; nothing was re-sent, and a late \
                 answer from the first owner is refused. Reconcile to settle it."
            } else {
                "The Steward process that recorded this attempt stopped while it was in \
                 flight: the provider may have acted. Marked unknown; nothing was re-sent. \
                 Reconcile to settle it."
            };
            let evidence = NewEvidence::new(EvidenceKind::Restart, EvidenceSource::Steward, why)
                .with_data(data);
            let mut change = EffectChange::of(
                &orphan.env,
                &orphan.effect,
                orphan.state,
                EffectEvent::Restarted,
                evidence,
                actor,
            )
            .expect("the sweep reads dispatching, which takes Restarted");
            change.attempt = Some(AttemptChange::Finish {
                number: orphan.attempts,
                response_status: None,
                error: Some("Steward stopped while this attempt was in flight".into()),
            });
            Settle::Change(Box::new(change))
        }
        EffectState::Ready if orphan.approved => Settle::TakeOver,
        EffectState::Ready => {
            let evidence = NewEvidence::new(
                EvidenceKind::Restart,
                EvidenceSource::Steward,
                "Steward stopped after accepting this invocation and before recording any \
                 attempt: nothing was sent. Settled failed; start a new invocation with \
                 retryOf to try again.",
            )
            .with_data(data);
            let mut change = EffectChange::of(
                &orphan.env,
                &orphan.effect,
                orphan.state,
                EffectEvent::Block,
                evidence,
                actor,
            )
            .expect("the sweep reads ready, which takes Block");
            change.error = Some(json!({
                "code": "not_dispatched",
                "message": "Steward stopped before dispatch; nothing was sent",
            }));
            Settle::Change(Box::new(change))
        }
        other => panic!(
            "recovery selected effect {} in state {}: only ready and dispatching effects are in \
             flight",
            orphan.effect,
            other.name()
        ),
    };
    // Every change a sweep makes is a takeover: the effect's epoch moves on, so whatever the
    // previous owner still writes for it is refused (`StoreError::Fenced`).
    match settle {
        Settle::Change(mut change) => {
            change.fence = Some(Fence::TakeOver(sweep.replica.clone()));
            Settle::Change(change)
        }
        Settle::TakeOver => Settle::TakeOver,
    }
}

/// One orphan's step in a sweep, in the order the orphans were found.
#[derive(Debug, Clone)]
pub(crate) enum Step<'a> {
    /// Apply this change, as `change_effect` would.
    Change(Box<EffectChange>),
    /// Make this approved orphan the sweeping replica's: its owner becomes the sweeper, with
    /// this audit entry.
    TakeOver(&'a Orphan, AuditEntry),
}

/// What a sweep does with its orphans: the steps, and the report it answers once they are
/// written. The same for every backend; each applies the steps with its own SQL.
pub(crate) fn plan<'a>(orphans: &'a [Orphan], sweep: &Sweep) -> (Vec<Step<'a>>, RecoveryReport) {
    let mut report = RecoveryReport::default();
    let mut steps = Vec::with_capacity(orphans.len());
    for orphan in orphans {
        match settle(orphan, sweep) {
            Settle::Change(change) => {
                match orphan.state {
                    EffectState::Dispatching => {
                        report.dispatching_to_unknown.push(orphan.effect.clone())
                    }
                    _ => report.ready_to_failed.push(orphan.effect.clone()),
                }
                steps.push(Step::Change(change));
            }
            Settle::TakeOver => {
                report
                    .approved_to_dispatch
                    .push((orphan.env.clone(), orphan.invocation.clone()));
                steps.push(Step::TakeOver(orphan, taken_over(orphan, sweep)));
            }
        }
    }
    (steps, report)
}

/// The audit entry of an approved orphan taken over by the sweeping replica.
fn taken_over(orphan: &Orphan, sweep: &Sweep) -> AuditEntry {
    AuditEntry::new(
        AuditKind::EffectTakenOver,
        orphan.env.as_str(),
        orphan.effect.as_str(),
    )
    .before(json!({"owner": orphan.owner}))
    .after(json!({"owner": sweep.replica}))
}
