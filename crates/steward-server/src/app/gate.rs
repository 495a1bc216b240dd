//! What governance says about one invocation before it is recorded: the environment's approval
//! policies, then the action's own `requiresApproval`.
//!
//! Precedence (docs/DECISIONS.md): the first matching policy decides. `auto_deny` records the
//! invocation already denied (never dispatched); `require_approval` parks it with the policy's
//! `requiredApprovals`; `auto_approve` lets it run, and lifts the action's own
//! `requiresApproval` only when the policy names that action (a broad auto-approve never
//! un-gates an action that asks for a human). With no matching policy, `requiresApproval` parks.

use crate::adapters::money_amount;
use crate::auth::Caller;
use crate::error::ApiResult;
use serde_json::{json, Value};
use steward_core::policy::{
    decide, shadow, Facts, PolicyDecision, PolicyEffect, PolicyScope, RequestKind,
};
use steward_core::{ApprovalId, EffectState, Millis, OperationKey, Rejection, RunId};
use steward_core::{EvidenceKind, EvidenceSource};
use steward_store::{ActionRecord, NewApproval, NewEvidence, PolicyRecord, RunRecord};

/// How an invocation starts.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    pub initial: EffectState,
    pub approval: Option<NewApproval>,
    pub decision: Option<Value>,
    pub evidence: NewEvidence,
    /// What the shadow (log-only) policies that matched would have decided
    /// ([`shadow_json`]); `None` when none matched. Never changes the rest of the gate.
    pub shadow: Option<Value>,
}

/// The shadow decisions as recorded on the invocation (`shadowDecisions`): each names the
/// policy version and what it would have decided.
pub(crate) fn shadow_json(shadow: &[PolicyDecision]) -> Option<Value> {
    (!shadow.is_empty()).then(|| {
        Value::Array(
            shadow
                .iter()
                .map(|d| {
                    json!({
                        "policyId": d.policy.id,
                        "policyName": d.policy.name,
                        "version": d.policy.version,
                        "decision": d.effect.as_str(),
                        "requiredApprovals": (d.effect == PolicyEffect::RequireApproval)
                            .then_some(d.required_approvals),
                        "undecidable": d.undecidable,
                        "explanation": d.explanation,
                    })
                })
                .collect(),
        )
    })
}

/// The decision as recorded on the invocation. It names the policy version that decided, so a
/// later edit or deletion of the policy never rewrites it.
pub(crate) fn decision_json(d: &PolicyDecision) -> Value {
    json!({
        "source": "policy",
        "code": d.effect.decision_code(),
        "effect": d.effect.decision_effect(),
        "explanation": d.explanation,
        "policy": {"id": d.policy.id, "name": d.policy.name, "version": d.policy.version},
    })
}

/// The policy decision for an invocation of `action` with `input` by `caller`, if any of the
/// environment's policies (`records`) applies. The user and tags the policies match on are the
/// run's, when the invocation names one (`runId`); without a run there are none, so a policy
/// with `matchUserId` or `matchTags` does not apply.
///
/// Also what the shadow policies that match would have decided (`steward_core::policy::shadow`),
/// judged on the same facts.
fn policy_decision(
    records: &[PolicyRecord],
    caller: &Caller,
    action: &ActionRecord,
    input: &Value,
    run: Option<&RunRecord>,
) -> (Option<(PolicyDecision, PolicyScope)>, Vec<PolicyDecision>) {
    let policies: Vec<_> = records.iter().map(|r| r.policy()).collect();
    let facts = Facts {
        kind: RequestKind::Action,
        action_name: Some(&action.name),
        agent_id: Some(caller.key.id.as_str()),
        user_id: run.and_then(|r| r.user_id.as_deref()),
        tags: run.map_or(&[], |r| r.body.tags.as_slice()),
        amount: money_amount(&action.definition, input).map(|a| a as f64),
        input,
    };
    let decided = decide(&policies, &facts).map(|d| {
        let scope = records
            .iter()
            .find(|r| r.id == d.policy.id)
            .map(|r| r.spec.scope())
            .unwrap_or(PolicyScope::AllRequests);
        (d, scope)
    });
    (decided, shadow(&policies, &facts))
}

fn approval(
    action: &ActionRecord,
    input: &Value,
    operation_key: Option<&OperationKey>,
    run_id: Option<&RunId>,
    required: u32,
    now: Millis,
) -> NewApproval {
    NewApproval {
        id: ApprovalId::from_unique(&crate::clock::unique()),
        title: format!("Approve {}", action.name),
        description: action.definition.description.clone(),
        payload: json!({
            "action": action.name,
            "actionVersion": action.version,
            "input": input,
            "operationKey": operation_key,
        }),
        required_approvals: required,
        expires_at: action
            .definition
            .approval_expires_in_seconds
            .map(|s| now.plus_ms(i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX))),
        run_id: run_id.map(|r| r.to_string()),
    }
}

pub(crate) fn gate(
    caller: &Caller,
    policies: &[PolicyRecord],
    action: &ActionRecord,
    input: &Value,
    operation_key: Option<&OperationKey>,
    run: Option<&RunRecord>,
    now: Millis,
) -> ApiResult<Gate> {
    let (decided, shadow) = policy_decision(policies, caller, action, input, run);
    let mut gate = enforced(decided, action, input, operation_key, run, now);
    gate.shadow = shadow_json(&shadow);
    Ok(gate)
}

/// The gate the enforced policies' decision (`decided`) and the action's own
/// `requiresApproval` make, without shadow decisions.
fn enforced(
    decided: Option<(PolicyDecision, PolicyScope)>,
    action: &ActionRecord,
    input: &Value,
    operation_key: Option<&OperationKey>,
    run: Option<&RunRecord>,
    now: Millis,
) -> Gate {
    let run_id = run.map(|r| &r.id);
    let accepted = NewEvidence::new(
        EvidenceKind::Accepted,
        EvidenceSource::Steward,
        "invocation accepted and recorded",
    );
    let own_gate = action.definition.requires_approval;
    let parked = |required: u32, decision: Option<Value>, evidence: NewEvidence| Gate {
        initial: EffectState::AwaitingApproval,
        approval: Some(approval(
            action,
            input,
            operation_key,
            run_id,
            required,
            now,
        )),
        decision,
        evidence,
        shadow: None,
    };
    let Some((d, scope)) = decided else {
        return if own_gate {
            parked(1, None, accepted)
        } else {
            Gate {
                initial: EffectState::Ready,
                approval: None,
                decision: None,
                evidence: accepted,
                shadow: None,
            }
        };
    };
    let recorded = decision_json(&d);
    let evidence = |kind: EvidenceKind| {
        NewEvidence::new(kind, EvidenceSource::Policy, d.explanation.clone()).with_data(json!({
            "policyId": d.policy.id, "policyVersion": d.policy.version, "effect": d.effect.as_str(),
        }))
    };
    match d.effect {
        PolicyEffect::AutoDeny => Gate {
            initial: EffectState::Rejected {
                reason: Rejection::Denied,
            },
            approval: None,
            decision: Some(recorded),
            evidence: evidence(EvidenceKind::Denied),
            shadow: None,
        },
        PolicyEffect::RequireApproval => parked(
            d.required_approvals,
            Some(recorded),
            evidence(EvidenceKind::Accepted),
        ),
        PolicyEffect::AutoApprove if own_gate && scope != PolicyScope::SpecificAction => {
            let note = format!(
                "{}; a broad auto_approve does not lift the action's own requiresApproval",
                d.explanation
            );
            parked(
                1,
                None,
                NewEvidence::new(EvidenceKind::Accepted, EvidenceSource::Policy, note),
            )
        }
        PolicyEffect::AutoApprove => Gate {
            initial: EffectState::Ready,
            approval: None,
            decision: Some(recorded),
            evidence: evidence(EvidenceKind::Accepted),
            shadow: None,
        },
    }
}
