//! The driver: observe, ask [`decide`], perform the action, save, and again, until the
//! operation rests. `run` and `recover` both use it, so a first run and a recovery after a
//! crash take the same path through the same pure decision.

use crate::api::{ApiError, ApprovalStatus, Invocation, InvokeRequest, Reconcile};
use crate::clock;
use crate::crash;
use crate::decide::{decide, RecoveryAction, ServerView};
use crate::error::RunError;
use crate::operation::Operation;
use crate::operations::Operations;
use crate::state::LocalState;
use std::time::{Duration, Instant};
use steward_core::{CrashPoint, IdempotencyKey};

/// The most steps one drive takes; each step is one decision. Waits are bounded by time (the
/// config), this bounds the loop itself against a server that keeps changing its mind.
const DRIVE_STEPS_MAX: usize = 10_000;

/// Invoke refusals that are final for this input: nothing was recorded and nothing ever will
/// be, so the operation is settled `failed` locally (with no invocation) and surfaced.
fn refusal_is_final(e: &ApiError) -> bool {
    matches!(
        (e.status(), e.code()),
        (Some(400), _) | (Some(404), Some("NOT_FOUND"))
    )
}

/// When each kind of waiting began, to bound it.
#[derive(Default)]
struct Waits {
    approval: Option<Instant>,
    settle: Option<Instant>,
}

impl Waits {
    fn remaining(started: &mut Option<Instant>, budget: Duration) -> Option<Duration> {
        let since = *started.get_or_insert_with(Instant::now);
        budget.checked_sub(since.elapsed()).filter(|d| !d.is_zero())
    }
}

impl Operations {
    /// Drives `op` until it rests; returns it with the actions taken, in order.
    pub(crate) async fn drive(
        &self,
        mut op: Operation,
    ) -> Result<(Operation, Vec<RecoveryAction>), RunError> {
        let mut steps = Vec::new();
        let mut in_hand: Option<Invocation> = None;
        let mut waits = Waits::default();
        let mut reconciled = false;
        for _ in 0..DRIVE_STEPS_MAX {
            let (view, inv) = match in_hand.take() {
                Some(inv) => (ServerView::Status(inv.status), Some(inv)),
                None => self.observe(&op).await?,
            };
            let action = decide(op.state, view);
            steps.push(action);
            match action {
                RecoveryAction::Dispatch => {
                    let (next, answer) = self.dispatch(op).await?;
                    op = next;
                    match answer {
                        Some(inv) => in_hand = Some(inv),
                        None => return Ok((op, steps)),
                    }
                }
                RecoveryAction::Adopt(_) => {
                    let inv = inv.expect("a status view carries its invocation");
                    op = self.adopt(op, &inv).await?;
                }
                RecoveryAction::ObserveApproval => {
                    let Some(left) =
                        Waits::remaining(&mut waits.approval, self.config.approval_wait)
                    else {
                        return Ok((op, steps));
                    };
                    self.observe_approval(&op, left).await?;
                }
                RecoveryAction::AwaitSettlement => {
                    if Waits::remaining(&mut waits.settle, self.config.settle_wait).is_none() {
                        return Ok((op, steps));
                    }
                    tokio::time::sleep(self.config.poll_interval).await;
                }
                RecoveryAction::AssignReconciliation => {
                    let inv = inv.expect("a status view carries its invocation");
                    let (next, ran) = self.assign_reconciliation(op, &inv, !reconciled).await?;
                    op = next;
                    if !ran || reconciled {
                        return Ok((op, steps));
                    }
                    // The server reconciled: read the invocation once more in case it settled.
                    reconciled = true;
                }
                RecoveryAction::Complete
                | RecoveryAction::Continue
                | RecoveryAction::Surface
                | RecoveryAction::Done => return Ok((op, steps)),
                RecoveryAction::Escalate(reason) => {
                    let message = format!(
                        "the journal says {} but the server says {view:?} ({})",
                        op.state,
                        reason.as_str()
                    );
                    if op.last_error.as_deref() != Some(message.as_str()) {
                        let mut next = op.clone();
                        next.last_error = Some(message);
                        next.updated_at = clock::now();
                        op = self.journal.save(&next).await?;
                    }
                    return Err(RunError::Contradiction {
                        op: op.id,
                        local: op.state,
                        server: view,
                        reason,
                    });
                }
            }
        }
        Ok((op, steps))
    }

    fn api_error(op: &Operation, source: ApiError) -> RunError {
        RunError::Api {
            op: op.id.clone(),
            source,
        }
    }

    /// Reads the invocation the journal names, if it names one.
    async fn observe(&self, op: &Operation) -> Result<(ServerView, Option<Invocation>), RunError> {
        let Some(id) = &op.invocation_id else {
            return Ok((ServerView::NoInvocationKnown, None));
        };
        match self.api.invocation(id).await {
            Ok(Some(inv)) => Ok((ServerView::Status(inv.status), Some(inv))),
            Ok(None) => Ok((ServerView::NotFound, None)),
            Err(e) => Err(Self::api_error(op, e)),
        }
    }

    /// Marks the operation submitted (durably), then sends the invoke with its saved keys.
    /// Returns the invocation the server answered with, or `None` when the server refused for
    /// good (the operation is then settled `failed` locally).
    async fn dispatch(&self, op: Operation) -> Result<(Operation, Option<Invocation>), RunError> {
        let mut submitted = op;
        submitted.state = LocalState::Submitted;
        submitted.attempt_count += 1;
        submitted.last_error = None;
        submitted.updated_at = clock::now();
        let op = self.journal.save(&submitted).await?;
        crash::reach(CrashPoint::BeforeDispatch);
        let request = InvokeRequest {
            input: &op.input,
            operation_key: Some(&op.operation_key),
            retry_of: op.retry_of.as_ref(),
        };
        match self
            .api
            .invoke(&op.action, &request, &op.idempotency_key)
            .await
        {
            Ok(inv) => {
                crash::reach(CrashPoint::AfterResponse);
                Ok((op, Some(inv)))
            }
            Err(e) if refusal_is_final(&e) => {
                let mut failed = op;
                failed.state = LocalState::Failed;
                failed.last_error = Some(e.to_string());
                failed.updated_at = clock::now();
                Ok((self.journal.save(&failed).await?, None))
            }
            Err(e) => {
                // Nothing is known beyond "may have been sent": the operation stays submitted
                // with its keys, and the next run resends the identical request.
                let mut kept = op.clone();
                kept.last_error = Some(e.to_string());
                kept.updated_at = clock::now();
                self.journal.save(&kept).await?;
                Err(Self::api_error(&op, e))
            }
        }
    }

    /// Copies the server's view of the invocation into the journal.
    fn record(op: &Operation, inv: &Invocation, state: LocalState) -> Operation {
        assert!(
            op.invocation_id.as_ref().is_none_or(|id| *id == inv.id),
            "{}: the server answered with {} but the journal names {:?}",
            op.id,
            inv.id,
            op.invocation_id
        );
        let mut next = op.clone();
        next.state = state;
        next.invocation_id = Some(inv.id.clone());
        next.effect_id = inv.effect_id.clone().or(next.effect_id);
        next.approval_id = inv.approval_id.clone().or(next.approval_id);
        next.server_status = Some(inv.status);
        next.server_record = Some(inv.raw.clone());
        next.last_error = None;
        next.updated_at = clock::now();
        next
    }

    async fn adopt(&self, op: Operation, inv: &Invocation) -> Result<Operation, RunError> {
        let state = LocalState::from_server(inv.status);
        let saved = self.journal.save(&Self::record(&op, inv, state)).await?;
        if state == LocalState::PendingApproval {
            crash::reach(CrashPoint::AwaitingApproval);
        }
        Ok(saved)
    }

    /// Long-polls the operation's existing approval (never creates one). Returns when a
    /// decision lands or the wait ends; the caller reads the invocation again.
    async fn observe_approval(&self, op: &Operation, left: Duration) -> Result<(), RunError> {
        let Some(id) = &op.approval_id else {
            tokio::time::sleep(self.config.poll_interval).await;
            return Ok(());
        };
        match self.api.approval(id, left).await {
            Ok(Some(approval)) if approval.status != ApprovalStatus::Pending => {
                // Decided: give the server a moment to move the invocation on.
                tokio::time::sleep(self.config.poll_interval).await;
                Ok(())
            }
            Ok(Some(_)) => Ok(()),
            // No long poll on this server: fall back to reading the invocation.
            Ok(None) => {
                tokio::time::sleep(self.config.poll_interval).await;
                Ok(())
            }
            Err(e) => Err(Self::api_error(op, e)),
        }
    }

    /// Saves the operation `unknown` with an assignee, and asks the server to reconcile when it
    /// can (`try_server`). Returns whether the server ran a reconcile. Never resends.
    async fn assign_reconciliation(
        &self,
        op: Operation,
        inv: &Invocation,
        try_server: bool,
    ) -> Result<(Operation, bool), RunError> {
        let mut next = Self::record(&op, inv, LocalState::Unknown);
        next.assignee = next.assignee.or_else(|| Some(self.config.assignee.clone()));
        let op = if next.state == op.state
            && next.assignee == op.assignee
            && next.server_status == op.server_status
            && next.server_record == op.server_record
        {
            op
        } else {
            self.journal.save(&next).await?
        };
        let Some(effect) = op.effect_id.clone().filter(|_| try_server) else {
            return Ok((op, false));
        };
        let key = IdempotencyKey::parse(&format!("{}:reconcile-{}", op.id, op.version))
            .expect("a printable key under the length limit");
        match self.api.reconcile(&effect, &key).await {
            Ok(Reconcile::Ran(_)) => Ok((op, true)),
            Ok(Reconcile::NotAvailable) => Ok((op, false)),
            Err(e) => {
                // The local assignment stands; the server-side reconcile can be asked again.
                tracing::warn!(op = %op.id, error = %e, "reconcile request failed; the operation stays assigned");
                Ok((op, false))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_validation_and_unknown_action_refusals_are_final() {
        let refused = |status: u16, code: &str| ApiError::Refused {
            status,
            code: code.into(),
            message: String::new(),
            details: None,
        };
        assert!(refusal_is_final(&refused(400, "VALIDATION_ERROR")));
        assert!(refusal_is_final(&refused(404, "NOT_FOUND")));
        for (status, code) in [
            (401, "AUTHENTICATION_FAILED"),
            (403, "FORBIDDEN"),
            (409, "operation_key_conflict"),
            (409, "environment_halted"),
            (422, "idempotency_key_reused"),
        ] {
            assert!(!refusal_is_final(&refused(status, code)), "{status} {code}");
        }
        let exhausted = ApiError::Exhausted {
            attempts: 8,
            last: "timeout".into(),
        };
        assert!(!refusal_is_final(&exhausted));
    }

    #[test]
    fn waits_are_bounded() {
        let mut started = None;
        assert!(Waits::remaining(&mut started, Duration::from_secs(5)).is_some());
        assert!(Waits::remaining(&mut started, Duration::ZERO).is_none());
    }
}
