//! What one effect change writes, worked out once for every backend: the rows, the settlement
//! and the audit entries of an [`EffectChange`], as plain values a backend binds to its own SQL.
//!
//! The backend reads (the state it compares, the kill switch), applies the plan in the change's
//! transaction, and hands back what only the database knows (how many reservations moved) to
//! [`ChangePlan::settled_entry`]. The single-change path (`change_effect`, both backends) and
//! the PostgreSQL sweep's batch (`postgres/replicas.rs::settle_all`) apply the same plans, so a
//! batch writes what settling its changes one by one would (a conformance test checks it).

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::records::{Actor, AttemptChange, EffectChange, NewEvidence};
use serde_json::{json, Value};
use steward_core::impact::ReservationState;
use steward_core::EffectId;

/// The attempt a change begins: recorded `dispatching`, owned by the replica that sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BegunAttempt<'a> {
    pub number: i64,
    pub deadline_at: i64,
    pub owner: &'a str,
}

/// The attempt a change closes, with what it led to (its status is the change's new state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FinishedAttempt<'a> {
    pub number: i64,
    pub response_status: Option<i64>,
    pub error: Option<&'a str>,
}

/// The change's settlement of the effect's reservations: their new state, and the states it
/// takes them from (success consumes, failure or rejection releases, unknown keeps them as
/// exposure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settlement {
    pub after: ReservationState,
    pub from: &'static [ReservationState],
}

impl Settlement {
    /// The states it takes reservations from, by name.
    pub(crate) fn source_names(&self) -> Vec<&'static str> {
        self.from.iter().map(|s| s.as_str()).collect()
    }
}

/// The invocation's columns as the change leaves them; `None` keeps the stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InvocationUpdate {
    pub response_status: Option<i64>,
    pub response_body: Option<String>,
    pub error: Option<String>,
    /// Set once: when the effect settles or becomes unknown (a stored time is kept).
    pub completed_at: Option<i64>,
}

/// One evidence row, appended at the effect's next `seq` (which the backend reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EvidenceRow<'a> {
    pub effect: &'a str,
    pub at: i64,
    pub kind: &'static str,
    pub source: &'static str,
    pub message: &'a str,
    pub data: Option<String>,
    pub actor: Option<&'a str>,
}

impl<'a> EvidenceRow<'a> {
    /// The row `actor` appends to `effect`'s evidence.
    pub(crate) fn new(effect: &'a EffectId, e: &'a NewEvidence, actor: &'a Actor) -> Self {
        EvidenceRow {
            effect: effect.as_str(),
            at: actor.now.0,
            kind: e.kind.as_str(),
            source: e.source.as_str(),
            message: &e.message,
            data: e.data.as_ref().map(Value::to_string),
            actor: actor.key.as_ref().map(|k| k.as_str()),
        }
    }
}

/// Everything one [`EffectChange`] writes once its compare-and-set moved the effect.
#[derive(Debug, Clone)]
pub(crate) struct ChangePlan<'a> {
    pub change: &'a EffectChange,
    /// The new state's name: the effect's, the invocation's and a closed attempt's status.
    pub to: &'static str,
    /// When: the actor's time, for every row the change writes.
    pub now: i64,
    pub begun: Option<BegunAttempt<'a>>,
    pub finished: Option<FinishedAttempt<'a>>,
    pub settlement: Option<Settlement>,
    pub invocation: InvocationUpdate,
    pub evidence: Option<EvidenceRow<'a>>,
    /// The invoke request's `Idempotency-Key` the change marks answered.
    pub answers: Option<&'a str>,
}

impl<'a> ChangePlan<'a> {
    /// The plan of `c`. Pure: the backend has checked nothing yet (`EffectChange::check_legal`
    /// is its first step).
    pub(crate) fn of(c: &'a EffectChange) -> Self {
        let (begun, finished) = match &c.attempt {
            Some(AttemptChange::Begin {
                number,
                deadline_at,
                owner,
            }) => (
                Some(BegunAttempt {
                    number: i64::from(*number),
                    deadline_at: deadline_at.0,
                    owner: owner.as_str(),
                }),
                None,
            ),
            Some(AttemptChange::Finish {
                number,
                response_status,
                error,
            }) => (
                None,
                Some(FinishedAttempt {
                    number: i64::from(*number),
                    response_status: response_status.map(i64::from),
                    error: error.as_deref(),
                }),
            ),
            None => (None, None),
        };
        ChangePlan {
            change: c,
            to: c.to.name(),
            now: c.actor.now.0,
            begun,
            finished,
            settlement: c.settles.map(|after| Settlement {
                after,
                from: after.settles_from(),
            }),
            invocation: InvocationUpdate {
                response_status: c.response_status.map(i64::from),
                response_body: c.response_body.as_ref().map(Value::to_string),
                error: c.error.as_ref().map(Value::to_string),
                completed_at: c.completed_at().map(|t| t.0),
            },
            evidence: c
                .evidence
                .as_ref()
                .map(|e| EvidenceRow::new(&c.effect_id, e, &c.actor)),
            answers: c.answers_request.as_ref().map(|k| k.as_str()),
        }
    }

    /// The audit entry of the settlement, once the backend knows how many reservations it moved:
    /// none when the change settles nothing or no reservation was open.
    pub(crate) fn settled_entry(&self, count: u64) -> Option<AuditEntry> {
        let c = self.change;
        let settlement = self.settlement.filter(|_| count > 0)?;
        Some(AuditEntry::impact_settled(
            c.env_id.as_str(),
            c.effect_id.as_str(),
            settlement.after,
            count,
        ))
    }

    /// The audit entry of the move itself, with the attempt it begins.
    pub(crate) fn transition_entry(&self) -> AuditEntry {
        let c = self.change;
        AuditEntry::new(
            AuditKind::EffectTransition,
            c.env_id.as_str(),
            c.effect_id.as_str(),
        )
        .before(json!({"state": c.from.name()}))
        .after(json!({
            "state": self.to,
            "attempt": self.begun.map(|b| b.number),
            "responseStatus": c.response_status,
        }))
    }

    /// The audit entries a change appends after its rows, in order: the settlement (given how
    /// many reservations moved), then the move.
    pub(crate) fn audit(&self, settled: u64) -> Vec<AuditEntry> {
        let mut entries: Vec<AuditEntry> = self.settled_entry(settled).into_iter().collect();
        entries.push(self.transition_entry());
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::EffectChange;
    use steward_core::{
        EffectEvent, EffectState, EnvironmentId, EvidenceKind, EvidenceSource, Millis, ReplicaId,
    };

    fn change(from: EffectState, event: EffectEvent) -> EffectChange {
        EffectChange::of(
            &EnvironmentId::from_unique("01hx0000000000000000000000"),
            &EffectId::from_unique("01hx0000000000000000000001"),
            from,
            event,
            NewEvidence::new(EvidenceKind::Restart, EvidenceSource::Steward, "why"),
            Actor::system(Millis(9)),
        )
        .unwrap()
    }

    #[test]
    fn a_begun_attempt_is_planned_and_audited_with_its_number() {
        let mut c = change(EffectState::Ready, EffectEvent::BeginAttempt);
        c.attempt = Some(AttemptChange::Begin {
            number: 3,
            deadline_at: Millis(100),
            owner: ReplicaId::from_unique("01hx0000000000000000000002"),
        });
        let plan = ChangePlan::of(&c);
        assert_eq!(
            plan.begun.map(|b| (b.number, b.deadline_at)),
            Some((3, 100))
        );
        assert_eq!(plan.finished, None);
        assert_eq!(plan.invocation.completed_at, None);
        let audit = plan.audit(0);
        assert_eq!(audit.len(), 1);
        assert_eq!(audit[0].kind, AuditKind::EffectTransition);
        assert_eq!(audit[0].after.as_ref().unwrap()["attempt"], 3);
    }

    #[test]
    fn a_settlement_is_audited_only_when_reservations_moved() {
        let mut c = change(EffectState::Dispatching, EffectEvent::Restarted);
        c.attempt = Some(AttemptChange::Finish {
            number: 1,
            response_status: None,
            error: Some("stopped".into()),
        });
        let plan = ChangePlan::of(&c);
        let settlement = plan
            .settlement
            .expect("unknown keeps reservations as exposure");
        assert_eq!(plan.finished.map(|f| f.error), Some(Some("stopped")));
        assert_eq!(plan.invocation.completed_at, Some(9));
        assert_eq!(plan.audit(0).len(), 1);
        let audit = plan.audit(2);
        assert_eq!(audit[0].kind, AuditKind::ImpactSettled);
        assert_eq!(
            audit[0].after,
            Some(json!({"reservations": settlement.after.as_str(), "count": 2}))
        );
        assert_eq!(audit[1].after.as_ref().unwrap()["attempt"], Value::Null);
    }
}
