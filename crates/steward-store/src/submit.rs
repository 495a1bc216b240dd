//! What an invoke submission comes to, the same in every backend (invariants 2 and 3): the
//! backend reads the facts in the submission's transaction, [`verdict`] decides, and the backend
//! writes what the verdict says. The backends keep their SQL and locking; the rules live here.

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::records::{EarlierRequest, InvocationRecord, NewEvidence, Submission, SubmitOutcome};
use serde_json::json;
use steward_core::{EffectId, EffectState, EnvironmentId, Rejection};

/// What the backend read for one submission, in the order the rules look at it.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    /// The request recorded under the submission's `Idempotency-Key` (by the same API key).
    pub earlier: Option<EarlierRequest>,
    /// With `retryOf`: the invocation it names (`None` inside: there is none).
    pub retried: Option<Option<InvocationRecord>>,
    /// With `retryOf`: the retry that failed invocation already has, if any.
    pub existing_retry: Option<InvocationRecord>,
    /// With an operation key: the effect it names and that effect's invocation.
    pub by_operation_key: Option<(EffectId, InvocationRecord)>,
}

impl Facts {
    /// True when the rules are decided by `earlier` alone and nothing else need be read.
    pub fn settled_by_earlier(&self) -> bool {
        self.earlier.is_some()
    }
}

/// What the backend does with a submission.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Answer this; write nothing.
    Answer(SubmitOutcome),
    /// The submission names an operation already recorded with the same input: answer it, and
    /// remember the request's `Idempotency-Key` as answered by it.
    Existing(InvocationRecord),
    /// Record a new invocation and effect.
    Create,
}

/// The rules, in order: a resent `Idempotency-Key` answers as before; a `retryOf` must name a
/// settled failure and holds one retry per failure; an operation key names at most one
/// operation, and other input under it is a conflict.
pub(crate) fn verdict(s: &Submission, facts: Facts) -> Verdict {
    if let Some(earlier) = facts.earlier {
        return Verdict::Answer(earlier.outcome(&s.request_fingerprint));
    }
    if s.retry_of.is_some() {
        match facts.retried.flatten() {
            None => return Verdict::Answer(SubmitOutcome::RetryOfNotFound),
            Some(prior) if !retryable(prior.state) => {
                return Verdict::Answer(SubmitOutcome::RetryOfNotFailed { state: prior.state })
            }
            Some(_) => {}
        }
        if let Some(found) = facts.existing_retry {
            if found.input_fingerprint != s.input_fingerprint || found.action_id != s.action.id {
                return Verdict::Answer(SubmitOutcome::RetryOfTaken {
                    invocation_id: found.id,
                });
            }
            return Verdict::Existing(found);
        }
    }
    if let Some((effect_id, found)) = facts.by_operation_key {
        assert_eq!(
            found.effect_id, effect_id,
            "operation key {:?} names effect {effect_id} but its invocation {} has effect {}",
            s.operation_key, found.id, found.effect_id
        );
        if found.input_fingerprint != s.input_fingerprint {
            return Verdict::Answer(SubmitOutcome::OperationKeyConflict {
                effect_id,
                invocation_id: found.id,
            });
        }
        return Verdict::Existing(found);
    }
    Verdict::Create
}

/// A `retryOf` may name only an invocation settled `failed` (or refused by a limit).
fn retryable(state: EffectState) -> bool {
    matches!(
        state,
        EffectState::Failed
            | EffectState::Rejected {
                reason: Rejection::Refused
            }
    )
}

/// The state a new invocation's `Idempotency-Key` record is written in. A submission that starts
/// `ready` is in progress until its recorded answer marks it done (a resend meanwhile hears
/// `in progress`); one that starts anywhere else (parked for approval, denied) is already its
/// answer, so the record is done in the submission's own commit, with no second commit to mark it.
pub(crate) fn invoke_key_state(s: &Submission) -> &'static str {
    if s.initial == EffectState::Ready {
        "in_progress"
    } else {
        "done"
    }
}

/// The `invocation.created` event of the new invocation a submission `s` writes.
pub(crate) fn created_entry(s: &Submission) -> AuditEntry {
    let op = s.operation_key.as_ref().map(|k| k.as_str());
    AuditEntry::new(
        AuditKind::InvocationCreated,
        s.env_id.as_str(),
        s.invocation_id.as_str(),
    )
    .after(crate::links::audited(
        json!({
            "effectId": s.effect_id, "actionId": s.action.id, "actionVersion": s.action.version,
            "state": s.initial.name(), "inputFingerprint": s.input_fingerprint, "operationKey": op,
            "decision": s.decision,
        }),
        &s.links,
    ))
}

/// The `effect.evidence` event of evidence `e` appended to `effect` at `seq`.
pub(crate) fn evidence_entry(
    env: &EnvironmentId,
    effect: &EffectId,
    seq: u32,
    e: &NewEvidence,
) -> AuditEntry {
    AuditEntry::new(AuditKind::EffectEvidence, env.as_str(), effect.as_str())
        .after(json!({"seq": seq, "kind": e.kind, "source": e.source}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ActionRecord;
    use serde_json::json;
    use steward_core::{
        ActionDefinition, ActionId, EnvironmentId, InvocationId, KeyId, Millis, OperationKey,
        ReplicaId,
    };
    use steward_core::{EvidenceKind, EvidenceSource};

    fn action() -> ActionRecord {
        let definition: ActionDefinition = serde_json::from_value(json!({
            "name": "a", "urlTemplate": "https://example.test/x", "governed": true,
        }))
        .unwrap();
        ActionRecord {
            id: ActionId::from_unique("a"),
            env_id: EnvironmentId::from_unique("e"),
            name: "a".into(),
            version: 1,
            definition,
            created_at: Millis(0),
            updated_at: Millis(0),
        }
    }

    fn submission(retry: bool, key: bool) -> Submission {
        Submission {
            env_id: EnvironmentId::from_unique("e"),
            invocation_id: InvocationId::from_unique("new"),
            effect_id: EffectId::from_unique("new"),
            input_fingerprint: "in-1".into(),
            request_fingerprint: "req-1".into(),
            action: action(),
            input: json!({}),
            operation_key: key.then(|| OperationKey::parse("op").unwrap()),
            idempotency_key: None,
            run_id: None,
            retry_of: retry.then(|| InvocationId::from_unique("old")),
            initial: EffectState::Ready,
            provider_idempotency_key: None,
            approval: None,
            decision: None,
            evidence: crate::records::NewEvidence::new(
                EvidenceKind::Accepted,
                EvidenceSource::Api,
                "recorded",
            ),
            actor: KeyId::from_unique("k"),
            now: Millis(1),
            owner: ReplicaId::from_unique("r"),
            links: Default::default(),
            parent_span_id: None,
            shadow_decisions: None,
        }
    }

    fn recorded(id: &str, state: EffectState, fingerprint: &str) -> InvocationRecord {
        InvocationRecord {
            id: InvocationId::from_unique(id),
            env_id: EnvironmentId::from_unique("e"),
            action_id: ActionId::from_unique("a"),
            action_name: "a".into(),
            action_version: 1,
            effect_id: EffectId::from_unique(id),
            governed: true,
            state,
            input: json!({}),
            input_fingerprint: fingerprint.into(),
            operation_key: None,
            run_id: None,
            retry_of: None,
            response_status: None,
            response_body: None,
            error: None,
            decision: None,
            approval_id: None,
            created_by: KeyId::from_unique("k"),
            created_at: Millis(0),
            completed_at: None,
            parent_span_id: None,
            edit: None,
            shadow_decisions: None,
        }
    }

    #[test]
    fn an_earlier_request_answers_before_anything_else_is_looked_at() {
        let facts = Facts {
            earlier: Some(EarlierRequest {
                fingerprint: "other".into(),
                answered: true,
                invocation: None,
            }),
            by_operation_key: Some((
                EffectId::from_unique("x"),
                recorded("x", EffectState::Succeeded { confirmed: true }, "in-1"),
            )),
            ..Facts::default()
        };
        assert_eq!(
            verdict(&submission(false, true), facts),
            Verdict::Answer(SubmitOutcome::IdempotencyMismatch)
        );
    }

    #[test]
    fn an_operation_key_names_one_operation_and_other_input_under_it_is_a_conflict() {
        let s = submission(false, true);
        let same = recorded("x", EffectState::Unknown, "in-1");
        let facts = |found: InvocationRecord| Facts {
            by_operation_key: Some((found.effect_id.clone(), found)),
            ..Facts::default()
        };
        assert_eq!(verdict(&s, facts(same.clone())), Verdict::Existing(same));
        let other = recorded("y", EffectState::Succeeded { confirmed: true }, "in-2");
        assert_eq!(
            verdict(&s, facts(other.clone())),
            Verdict::Answer(SubmitOutcome::OperationKeyConflict {
                effect_id: other.effect_id.clone(),
                invocation_id: other.id,
            })
        );
        assert_eq!(verdict(&s, Facts::default()), Verdict::Create);
    }

    #[test]
    fn a_retry_needs_a_settled_failure_and_gets_one_retry_per_failure() {
        let s = submission(true, false);
        let retried = |state| Facts {
            retried: Some(Some(recorded("old", state, "in-0"))),
            ..Facts::default()
        };
        assert_eq!(
            verdict(
                &s,
                Facts {
                    retried: Some(None),
                    ..Facts::default()
                }
            ),
            Verdict::Answer(SubmitOutcome::RetryOfNotFound)
        );
        assert_eq!(
            verdict(&s, retried(EffectState::Unknown)),
            Verdict::Answer(SubmitOutcome::RetryOfNotFailed {
                state: EffectState::Unknown
            })
        );
        assert_eq!(verdict(&s, retried(EffectState::Failed)), Verdict::Create);
        let refused = EffectState::Rejected {
            reason: Rejection::Refused,
        };
        assert_eq!(verdict(&s, retried(refused)), Verdict::Create);
        let mut taken = retried(EffectState::Failed);
        taken.existing_retry = Some(recorded(
            "r1",
            EffectState::Succeeded { confirmed: true },
            "in-9",
        ));
        assert!(matches!(
            verdict(&s, taken),
            Verdict::Answer(SubmitOutcome::RetryOfTaken { .. })
        ));
        let mut same = retried(EffectState::Failed);
        let first = recorded("r1", EffectState::Succeeded { confirmed: true }, "in-1");
        same.existing_retry = Some(first.clone());
        assert_eq!(verdict(&s, same), Verdict::Existing(first));
    }
}
