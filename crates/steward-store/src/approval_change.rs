//! What an approval decision does to the effect it parked, the same in every backend: each
//! backend applies the change in the decision's own transaction.

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::error::{StoreError, StoreResult};
use crate::records::{
    Actor, ApprovalRecord, AttemptChange, DecideOutcome, Decided, DecisionRecord, DecisionRequest,
    EffectChange, FirstAttempt, NewApproval, NewEvidence, ReleaseContext, Submission,
};
use serde_json::json;
use steward_core::{ActionId, EffectId, EnvironmentId, InvocationId, KeyId, Millis};
use steward_core::{ApprovalStatus, EffectEvent, EffectState};
use steward_core::{EvidenceKind, EvidenceSource};

/// Why the system cancels the approvals parked on an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancellation {
    ActionDisabled,
    ActionDeleted,
}

impl Cancellation {
    /// The evidence written on each cancelled effect.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Cancellation::ActionDisabled => {
                "the action was disabled while this invocation awaited approval; nothing was sent"
            }
            Cancellation::ActionDeleted => {
                "the action was deleted while this invocation awaited approval; nothing was sent"
            }
        }
    }

    /// The cancellation an action change implies, if any: disabling an enabled action, or
    /// deleting one. Re-enabling does not revive what was cancelled.
    pub(crate) fn of_update(before_enabled: bool, after_enabled: bool) -> Option<Self> {
        (before_enabled && !after_enabled).then_some(Cancellation::ActionDisabled)
    }
}

/// The parked effect's transition for `event` (`Approve`, `Deny`, `Expire`), with its evidence;
/// `None` for a custom request, which parks no effect.
pub(crate) fn effect_change(
    a: &ApprovalRecord,
    event: EffectEvent,
    message: String,
    actor: &Actor,
) -> StoreResult<Option<EffectChange>> {
    let Some(effect) = &a.effect_id else {
        return Ok(None);
    };
    let evidence = NewEvidence::new(EvidenceKind::Approval, EvidenceSource::Approval, message)
        .with_data(json!({"approvalId": a.id}));
    let mut change = EffectChange::of(
        &a.env_id,
        effect,
        EffectState::AwaitingApproval,
        event,
        evidence,
        actor.clone(),
    )?;
    let to = change.to;
    if to != EffectState::Ready {
        change.error = Some(json!({
            "code": format!("approval_{}", to.invocation_status().as_str()),
            "message": "the approval was not granted; nothing was sent",
        }));
    }
    Ok(Some(change))
}

/// What a ballot on an approval comes to, decided once for every backend from the approval as
/// read in the decision's transaction. The backend writes what it says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DecisionPlan {
    /// The requester tried to decide its own request: refused, nothing written.
    SelfDecision,
    /// Settled already, or this key decided before: nothing written.
    Unchanged,
    /// The approval ran out before the ballot: it expires (and its effect with it) instead.
    Expire,
    /// Record the ballot, then settle the approval and move its effect as given.
    Record {
        /// The wire word of the decision (`approve`, `deny`).
        word: &'static str,
        /// The audit event's `after` of the ballot.
        audit: serde_json::Value,
        /// The approval's status after the ballot; `Pending` leaves it open (N of M).
        status: steward_core::ApprovalStatus,
        /// The parked effect's event and its evidence message, when the approval settled.
        effect: Option<(EffectEvent, String)>,
        /// The approval released its invocation: the deciding replica takes the effect over
        /// and dispatches it.
        releases: bool,
    },
}

/// The plan for `key` casting `decision` on `a` at `now` (`steward_core::cast` on the
/// approval's tally and the key's ballot).
pub(crate) fn plan_decision(
    a: &ApprovalRecord,
    key: &steward_core::KeyId,
    decision: steward_core::Decision,
    note: Option<&str>,
    now: steward_core::Millis,
) -> DecisionPlan {
    use steward_core::{cast, Ballot, Decision, Tally, Verdict};
    let tally = Tally {
        status: a.status,
        approvals: a
            .decisions
            .iter()
            .filter(|d| d.decision == Decision::Approve)
            .count() as u32,
        required: a.required_approvals,
        expired: a.expires_at.is_some_and(|t| t <= now),
    };
    let ballot = Ballot {
        decision,
        is_requester: &a.requested_by == key,
        already_voted: a.decisions.iter().any(|d| &d.key == key),
    };
    match cast(tally, ballot) {
        Verdict::SelfDecision => DecisionPlan::SelfDecision,
        Verdict::AlreadySettled | Verdict::AlreadyVoted => DecisionPlan::Unchanged,
        Verdict::Expires => DecisionPlan::Expire,
        Verdict::Recorded { status, effect } => {
            let word = match decision {
                Decision::Approve => "approve",
                Decision::Deny => "deny",
            };
            DecisionPlan::Record {
                word,
                audit: json!({"decision": word, "note": note}),
                status,
                effect: effect.map(|event| (event, format!("{word}d by {key}"))),
                releases: effect == Some(EffectEvent::Approve),
            }
        }
    }
}

/// What a gated invocation's approval is bound to: what the approver sees is what runs.
pub(crate) struct Binding<'a> {
    pub invocation: &'a InvocationId,
    pub effect: &'a EffectId,
    pub action: &'a ActionId,
    pub version: u32,
    pub input_fingerprint: &'a str,
}

impl<'a> Binding<'a> {
    /// The binding of the approval a gated submission `s` requests.
    pub(crate) fn of(s: &'a Submission) -> Self {
        Binding {
            invocation: &s.invocation_id,
            effect: &s.effect_id,
            action: &s.action.id,
            version: s.action.version,
            input_fingerprint: &s.input_fingerprint,
        }
    }
}

/// The `approval.requested` event of `a`, requested in `env` (bound to an invocation or not).
pub(crate) fn requested_entry(
    env: &EnvironmentId,
    a: &NewApproval,
    binding: Option<&Binding<'_>>,
) -> AuditEntry {
    AuditEntry::new(AuditKind::ApprovalRequested, env.as_str(), a.id.as_str()).after(json!({
        "title": a.title,
        "requiredApprovals": a.required_approvals.max(1),
        "invocationId": binding.map(|b| b.invocation.as_str()),
    }))
}

/// The `approval.settled` event of `a`, settled as `status` by `origin` (a person or the
/// system).
pub(crate) fn settled_entry(
    a: &ApprovalRecord,
    status: ApprovalStatus,
    origin: &str,
) -> AuditEntry {
    AuditEntry::new(AuditKind::ApprovalSettled, a.env_id.as_str(), a.id.as_str())
        .before(json!({"status": "pending"}))
        .after(json!({"status": status.as_str(), "origin": origin}))
}

/// A ballot to write: [`DecisionPlan::Record`] with its audit event built.
pub(crate) struct Ballot {
    /// The wire word of the decision (`approve`, `deny`).
    pub word: &'static str,
    /// The `approval.decision` event.
    pub entry: AuditEntry,
    /// The approval's status after the ballot; `Pending` leaves it open (N of M).
    pub status: ApprovalStatus,
    /// The parked effect's event and its evidence message, when the approval settled.
    pub effect: Option<(EffectEvent, String)>,
    /// The approval released its invocation.
    pub releases: bool,
}

/// What a backend does with request `r` on `a` as read in the decision's transaction.
pub(crate) enum DecideStep {
    /// Answer at once; nothing is written.
    Answer(Box<Decided>),
    /// The approval ran out: expire it (and its effect), then answer with it as it is then
    /// ([`expired`]).
    Expire,
    /// Write the ballot, settle and release as it says.
    Record(Ballot),
}

/// The step for `r` on `a` ([`plan_decision`], with the answers that write nothing).
pub(crate) fn decide_step(a: &ApprovalRecord, r: &DecisionRequest) -> DecideStep {
    let answer = |outcome| {
        DecideStep::Answer(Box::new(Decided {
            outcome,
            first: None,
        }))
    };
    match plan_decision(a, &r.key, r.decision, r.note.as_deref(), r.now) {
        DecisionPlan::SelfDecision => answer(DecideOutcome::SelfDecision),
        DecisionPlan::Unchanged => answer(DecideOutcome::Unchanged(a.clone())),
        DecisionPlan::Expire => DecideStep::Expire,
        DecisionPlan::Record {
            word,
            audit,
            status,
            effect,
            releases,
        } => DecideStep::Record(Ballot {
            word,
            entry: AuditEntry::new(
                AuditKind::ApprovalDecision,
                r.env_id.as_str(),
                r.approval_id.as_str(),
            )
            .after(audit),
            status,
            effect,
            releases,
        }),
    }
}

/// The answer to a ballot that found the approval run out: `a` as expiring left it.
pub(crate) fn expired(a: ApprovalRecord) -> Decided {
    Decided {
        outcome: DecideOutcome::Expired(a),
        first: None,
    }
}

impl ReleaseContext {
    /// Whether `request`, cast on the approval as this context read it, would release its
    /// parked invocation: what the decider prepares the released attempt for. A decision cast
    /// in between may change the answer; `Approvals::decide_and_begin` decides on the approval
    /// as it finds it, and ignores a first attempt it does not release.
    pub fn releases(&self, request: &DecisionRequest) -> bool {
        self.parked.is_some()
            && matches!(
                plan_decision(
                    &self.approval,
                    &request.key,
                    request.decision,
                    request.note.as_deref(),
                    request.now,
                ),
                DecisionPlan::Record { releases: true, .. }
            )
    }
}

/// Refuses a first attempt given with decision `r` on `a` that is not the attempt of the effect
/// `a` parks (`ready -> dispatching` with `AttemptChange::Begin` owned by the deciding replica,
/// its reservation for the same effect): a bug in the caller, refused before anything is
/// written.
pub(crate) fn check_first(
    a: &ApprovalRecord,
    r: &DecisionRequest,
    first: &FirstAttempt,
) -> StoreResult<()> {
    let begin = &first.begin;
    let refuse = |step: String| {
        Err(StoreError::IllegalTransition {
            env: begin.env_id.clone(),
            effect: begin.effect_id.clone(),
            from: begin.from,
            step,
        })
    };
    if a.effect_id.as_ref() != Some(&begin.effect_id)
        || begin.env_id != a.env_id
        || first.impact.effect_id != begin.effect_id
        || first.impact.env_id != begin.env_id
    {
        return refuse(format!(
            "an attempt begun with a decision on approval {}, which parks another effect",
            a.id
        ));
    }
    if begin.from != EffectState::Ready
        || begin.to != EffectState::Dispatching
        || !matches!(&begin.attempt, Some(AttemptChange::Begin { owner, .. }) if owner == &r.replica)
    {
        return refuse(
            "a first attempt that is not `ready -> dispatching`, begun by the deciding replica"
                .into(),
        );
    }
    Ok(())
}

/// The approval as a recorded ballot leaves it: `a` as read (locked) in the decision's
/// transaction, with the ballot among its decisions (in the order a read returns them: by time,
/// then key) and, when it settled the approval, the settlement a human decision writes. What a
/// read in the same transaction would return, without the read.
pub(crate) fn after_ballot(
    mut a: ApprovalRecord,
    r: &DecisionRequest,
    status: ApprovalStatus,
) -> ApprovalRecord {
    a.decisions.push(DecisionRecord {
        key: r.key.clone(),
        decision: r.decision,
        note: r.note.clone(),
        at: r.now,
    });
    a.decisions
        .sort_by(|x, y| (x.at, x.key.as_str()).cmp(&(y.at, y.key.as_str())));
    if status != ApprovalStatus::Pending {
        a.status = status;
        a.decision_origin = Some(HUMAN_ORIGIN.to_string());
        a.decided_at = Some(r.now);
    }
    a
}

/// The `decision_origin` of an approval a key's ballot settled.
pub(crate) const HUMAN_ORIGIN: &str = "human";

/// The `decision_origin` of an approval its requester withdrew before anyone decided.
pub const WITHDRAWN_ORIGIN: &str = "withdrawn";

/// The evidence written on the effect of a withdrawn approval.
pub(crate) const WITHDRAWN_MESSAGE: &str =
    "the requester withdrew this invocation before anyone approved it; nothing was sent";

/// What a backend does when `requester` withdraws `a` (as read, locked, in the transaction) at
/// `now`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WithdrawStep {
    /// Deny it with [`WITHDRAWN_ORIGIN`] and reject its effect.
    Withdraw,
    /// It ran out: expire it (and its effect) as a decision would, then answer `Unchanged`.
    Expire,
    /// Settled already, or another key asks: nothing is written.
    Answer(WithdrawAnswer),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WithdrawAnswer {
    Unchanged,
    NotRequester,
}

/// The step for `requester` withdrawing `a` at `now`.
pub(crate) fn withdraw_step(a: &ApprovalRecord, requester: &KeyId, now: Millis) -> WithdrawStep {
    if &a.requested_by != requester {
        return WithdrawStep::Answer(WithdrawAnswer::NotRequester);
    }
    match a.status {
        ApprovalStatus::Pending if a.expires_at.is_some_and(|at| at <= now) => WithdrawStep::Expire,
        ApprovalStatus::Pending => WithdrawStep::Withdraw,
        ApprovalStatus::Approved | ApprovalStatus::Denied | ApprovalStatus::Expired => {
            WithdrawStep::Answer(WithdrawAnswer::Unchanged)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::{
        ApprovalId, ApprovalStatus, Decision, EffectId, EnvironmentId, KeyId, Millis,
    };

    fn approval(required: u32, approvals: &[&str], expires_at: Option<i64>) -> ApprovalRecord {
        ApprovalRecord {
            id: ApprovalId::from_unique("a"),
            env_id: EnvironmentId::from_unique("e"),
            status: ApprovalStatus::Pending,
            title: "t".into(),
            description: None,
            payload: json!({}),
            invocation_id: None,
            effect_id: Some(EffectId::from_unique("f")),
            action_id: None,
            action_version: None,
            input_fingerprint: None,
            requested_by: KeyId::from_unique("requester"),
            required_approvals: required,
            decisions: approvals
                .iter()
                .map(|k| crate::records::DecisionRecord {
                    key: KeyId::from_unique(k),
                    decision: Decision::Approve,
                    note: None,
                    at: Millis(1),
                })
                .collect(),
            decision_origin: None,
            decided_at: None,
            expires_at: expires_at.map(Millis),
            run_id: None,
            created_at: Millis(0),
        }
    }

    #[test]
    fn the_last_approver_needed_releases_the_invocation_and_an_earlier_one_does_not() {
        let key = KeyId::from_unique("b");
        let first = plan_decision(
            &approval(2, &[], None),
            &key,
            Decision::Approve,
            None,
            Millis(5),
        );
        assert!(matches!(
            first,
            DecisionPlan::Record {
                status: ApprovalStatus::Pending,
                effect: None,
                releases: false,
                ..
            }
        ));
        let last = plan_decision(
            &approval(2, &["a"], None),
            &key,
            Decision::Approve,
            Some("ok"),
            Millis(5),
        );
        let DecisionPlan::Record {
            word,
            audit,
            status,
            effect,
            releases,
        } = last
        else {
            panic!("{last:?}")
        };
        assert_eq!(
            (word, status, releases),
            ("approve", ApprovalStatus::Approved, true)
        );
        assert_eq!(audit, json!({"decision": "approve", "note": "ok"}));
        let (event, message) = effect.unwrap();
        assert_eq!(event, EffectEvent::Approve);
        assert!(message.starts_with("approved by key_"), "{message}");
    }

    #[test]
    fn the_requester_a_repeat_voter_and_a_late_ballot_change_nothing_they_should_not() {
        let a = approval(2, &["b"], Some(10));
        let requester = KeyId::from_unique("requester");
        assert_eq!(
            plan_decision(&a, &requester, Decision::Approve, None, Millis(5)),
            DecisionPlan::SelfDecision
        );
        let b = KeyId::from_unique("b");
        assert_eq!(
            plan_decision(&a, &b, Decision::Deny, None, Millis(5)),
            DecisionPlan::Unchanged
        );
        let c = KeyId::from_unique("c");
        assert_eq!(
            plan_decision(&a, &c, Decision::Approve, None, Millis(10)),
            DecisionPlan::Expire
        );
        let denied = plan_decision(&a, &c, Decision::Deny, None, Millis(5));
        assert!(matches!(
            denied,
            DecisionPlan::Record {
                status: ApprovalStatus::Denied,
                effect: Some((EffectEvent::Deny, _)),
                releases: false,
                ..
            }
        ));
    }
}
