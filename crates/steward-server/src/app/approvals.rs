//! Deciding an approval: `POST /approvals/{id}/approve|deny` (`api/approvals.rs`) and the
//! the console's approve and deny (`console/decide.rs`) both call [`decide`]. Approving a gated
//! invocation dispatches it exactly once; denying or expiry means it never runs. A decision that
//! changed nothing says why ([`Unchanged`]), once, for every door.

use super::{seam, Error, Principal, Result};
use crate::error::codes;
use crate::state::AppState;
use steward_core::{scopes, ApprovalId, ApprovalStatus, Decision, KeyId, Millis};
use steward_store::{ApprovalRecord, DecideOutcome, DecisionRequest, InvocationRecord, Withdrawal};

/// One decision on an approval, parsed by the front end.
#[derive(Debug, Clone)]
pub struct Decide {
    pub approval: ApprovalId,
    pub decision: Decision,
    pub note: Option<String>,
}

/// What a decision came to.
#[derive(Debug)]
pub struct Decided {
    /// The approval after the decision.
    pub approval: ApprovalRecord,
    /// The invocation the approval gated, as it stands after the decision (dispatched already
    /// when this decision released it); `None` for a custom request.
    pub invocation: Option<InvocationRecord>,
    /// Why the decision changed nothing, when it did not.
    pub unchanged: Option<Unchanged>,
}

/// Why a decision changed nothing: the approval as it stands says which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unchanged {
    /// The approval ran out (before or at this decision); the decision was not counted.
    Expired { expires_at: Option<Millis> },
    /// The approval was settled before this decision.
    AlreadyDecided {
        status: ApprovalStatus,
        decided_at: Option<Millis>,
    },
    /// This key had already decided this approval; each key counts once.
    AlreadyDecidedByThisKey,
}

impl Unchanged {
    /// Why a decision by `key` that came back with `approval` unchanged (`expired`: the decision
    /// found it run out) changed nothing; `None` when the approval does not say.
    pub fn of(approval: &ApprovalRecord, key: &KeyId, expired: bool) -> Option<Unchanged> {
        if expired || approval.status == ApprovalStatus::Expired {
            return Some(Unchanged::Expired {
                expires_at: approval.expires_at,
            });
        }
        if approval.status != ApprovalStatus::Pending {
            return Some(Unchanged::AlreadyDecided {
                status: approval.status,
                decided_at: approval.decided_at,
            });
        }
        approval
            .decisions
            .iter()
            .any(|d| &d.key == key)
            .then_some(Unchanged::AlreadyDecidedByThisKey)
    }

    /// The reason as a coded error (409), as a front end that refuses such a decision shows it.
    pub fn error(&self) -> Error {
        match self {
            Unchanged::Expired { expires_at } => {
                let at = expires_at.map_or_else(|| "its expiry".to_string(), |t| t.to_rfc3339());
                Error::of(
                    codes::APPROVAL_EXPIRED,
                    format!("this approval expired at {at}; your decision was not counted"),
                )
            }
            Unchanged::AlreadyDecided { status, decided_at } => Error::of(
                codes::APPROVAL_ALREADY_DECIDED,
                format!(
                    "this approval was already {} (at {}); your decision changed nothing",
                    status.as_str(),
                    decided_at.map(|t| t.to_rfc3339()).unwrap_or_default()
                ),
            ),
            Unchanged::AlreadyDecidedByThisKey => Error::of(
                codes::ALREADY_DECIDED_BY_THIS_KEY,
                "this key already decided this approval; each key counts once",
            ),
        }
    }
}

/// Casts `principal`'s decision. A key never decides an approval it requested (403).
pub async fn decide(state: &AppState, principal: &Principal, request: Decide) -> Result<Decided> {
    seam::reached(state, seam::UseCase::Decide);
    principal.require(scopes::APPROVALS_DECIDE)?;
    // The `/metrics` label of this decision, once it is recorded.
    let decision = match request.decision {
        Decision::Approve => "approve",
        Decision::Deny => "deny",
    };
    let request = DecisionRequest {
        env_id: principal.env.id.clone(),
        approval_id: request.approval,
        key: principal.key.id.clone(),
        decision: request.decision,
        note: request.note,
        now: state.clock.now(),
        replica: state.replica.clone(),
    };
    // The decision and the dispatch it releases run in their own task: a client that
    // disconnects must not cancel either halfway.
    let task_state = state.clone();
    let decided = tokio::spawn(async move {
        crate::dispatch::release::decide_and_dispatch(&task_state, &request).await
    })
    .await
    .map_err(|e| Error::internal("decision task", &e))??;
    let (approval, unchanged) = match decided.outcome {
        DecideOutcome::SelfDecision => {
            return Err(Error::of(
                codes::SELF_DECISION_FORBIDDEN,
                "a key never decides an approval it requested",
            ))
        }
        DecideOutcome::Unchanged(approval) => {
            let unchanged = Unchanged::of(&approval, &principal.key.id, false);
            (approval, unchanged)
        }
        DecideOutcome::Expired(approval) => {
            state.approval_events.notify_waiters();
            let unchanged = Unchanged::of(&approval, &principal.key.id, true);
            (approval, unchanged)
        }
        DecideOutcome::Recorded { approval, .. } => {
            state.approval_events.notify_waiters();
            state.metrics.approval_decision(decision);
            (approval, None)
        }
    };
    let invocation = match (&approval.invocation_id, decided.answered) {
        (Some(_), Some(answered)) => Some(answered),
        (Some(id), None) => state.store.invocation(&principal.env.id, id).await?,
        (None, _) => None,
    };
    Ok(Decided {
        approval,
        invocation,
        unchanged,
    })
}

/// Withdraws the approval parking an invocation `principal` made, before anyone decided (the
/// MCP `tasks/cancel` of a call awaiting approval): the invocation is denied and never runs.
/// Only the requesting key withdraws (`NOT_FOUND` for another, as for a missing one: a key
/// learns nothing of approvals it did not request). `Unchanged` when the approval was
/// settled first: a decision and a withdrawal never both count.
pub async fn withdraw(
    state: &AppState,
    principal: &Principal,
    approval: &ApprovalId,
) -> Result<Withdrawal> {
    principal.require(scopes::ACTIONS_INVOKE)?;
    let now = state.clock.now();
    let withdrawn = state
        .store
        .withdraw_approval(&principal.env.id, approval, &principal.key.id, now)
        .await;
    match withdrawn {
        Ok(Withdrawal::NotRequester) | Err(steward_store::StoreError::NotFound { .. }) => {
            Err(Error::not_found("approval"))
        }
        Ok(withdrawal) => {
            // Long polls on this approval wake and read it settled.
            state.approval_events.notify_waiters();
            Ok(withdrawal)
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::{ApprovalId, EnvironmentId};
    use steward_store::DecisionRecord;

    fn approval(status: ApprovalStatus, decided_by: Option<&KeyId>) -> ApprovalRecord {
        let at = Millis(1_767_225_600_000); // 2026-01-01T00:00:00.000Z
        ApprovalRecord {
            id: ApprovalId::from_unique("a"),
            env_id: EnvironmentId::from_unique("e"),
            status,
            title: "t".into(),
            description: None,
            payload: serde_json::json!({}),
            invocation_id: None,
            effect_id: None,
            action_id: None,
            action_version: None,
            input_fingerprint: None,
            requested_by: KeyId::from_unique("requester"),
            required_approvals: 2,
            decision_origin: None,
            decided_at: (status != ApprovalStatus::Pending).then_some(at),
            expires_at: Some(at),
            run_id: None,
            created_at: at,
            decisions: decided_by
                .map(|key| DecisionRecord {
                    key: key.clone(),
                    decision: Decision::Approve,
                    note: None,
                    at,
                })
                .into_iter()
                .collect(),
        }
    }

    /// The cases the console told apart from the approval before and after (the test moved
    /// here with the rule): the codes are the same.
    #[test]
    fn a_decision_that_changed_nothing_says_why() {
        let me = KeyId::from_unique("me");
        let other = KeyId::from_unique("other");
        let code = |a: &ApprovalRecord, expired: bool| {
            Unchanged::of(a, &me, expired).map(|u| u.error().code)
        };
        let pending = approval(ApprovalStatus::Pending, None);
        let mine = approval(ApprovalStatus::Pending, Some(&me));
        let theirs = approval(ApprovalStatus::Pending, Some(&other));
        let decided = approval(ApprovalStatus::Denied, None);
        let expired = approval(ApprovalStatus::Expired, None);
        assert_eq!(code(&pending, false), None);
        assert_eq!(code(&theirs, false), None);
        assert_eq!(code(&pending, true), Some("approval_expired"));
        assert_eq!(code(&expired, false), Some("approval_expired"));
        assert_eq!(code(&decided, false), Some("approval_already_decided"));
        assert_eq!(code(&mine, false), Some("already_decided_by_this_key"));
        let message = Unchanged::of(&decided, &me, false).unwrap().error().message;
        assert!(
            message.contains("already denied (at 2026-01-01T00:00:00.000Z)"),
            "{message}"
        );
        let message = Unchanged::of(&expired, &me, false).unwrap().error().message;
        assert!(
            message.contains("expired at 2026-01-01T00:00:00.000Z"),
            "{message}"
        );
    }
}
