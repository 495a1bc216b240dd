//! Counting: provider writes per business operation (from the fixture), final states (from the
//! worker's journal), notifications and approvals, against what each point allows.

use super::world::World;
use super::{Point, Tally};
use std::collections::HashMap;
use steward_client::{Journal, LocalState, Operation, SqliteJournal};
use steward_core::{ApprovalId, CrashPoint, InvocationStatus};

/// Provider writes expected for one operation as it rests, or `None` when it is not at rest.
fn expected_writes(op: &Operation, point: Point) -> Option<usize> {
    match op.state {
        LocalState::Intended | LocalState::Submitted | LocalState::Running => None,
        LocalState::Unknown => Some(point.unknown_writes()),
        LocalState::PendingApproval
        | LocalState::Failed
        | LocalState::Denied
        | LocalState::Expired => Some(0),
        LocalState::Succeeded | LocalState::Completed | LocalState::Continued => Some(usize::from(
            op.server_status == Some(InvocationStatus::Succeeded),
        )),
    }
}

/// The states an operation may end a run in at `point`: done, or (when Steward itself died
/// mid-dispatch) explicitly unknown and assigned.
fn allowed_end(state: LocalState, point: Point) -> bool {
    let steward_died =
        matches!(point, Point::Crash(p) if p.is_server()) || point == Point::SigkillHold;
    matches!(state, LocalState::Continued | LocalState::Completed)
        || (steward_died && state == LocalState::Unknown)
}

/// Counts provider writes per business operation and checks every promise of the run.
pub(super) async fn audit(
    world: &World,
    point: Point,
    approvals_at_crash: &HashMap<String, Option<ApprovalId>>,
) -> anyhow::Result<Tally> {
    let ops = SqliteJournal::open(&world.journal)?.all().await?;
    let writes = world.fixture.refunds();
    let mut t = Tally::default();
    for pi in &world.payment_intents {
        let seen = writes.iter().filter(|w| &w.payment_intent == pi).count();
        t.seen += seen;
        t.duplicates += seen.saturating_sub(1);
        let Some(op) = ops
            .iter()
            .find(|o| o.input.get("paymentIntent").and_then(|v| v.as_str()) == Some(pi.as_str()))
        else {
            t.lost += 1;
            t.expected += 1;
            t.problems
                .push(format!("no operation in the journal for {pi}"));
            continue;
        };
        t.operations += 1;
        *t.states.entry(op.state.as_str().to_string()).or_default() += 1;
        match expected_writes(op, point) {
            Some(n) => {
                t.expected += n;
                if seen < n {
                    t.lost += 1;
                    t.problems.push(format!(
                        "{}: {} but the provider has no write",
                        op.id, op.state
                    ));
                }
            }
            None => {
                t.expected += 1;
                t.lost += 1;
                t.problems
                    .push(format!("{} was left {} (not at rest)", op.id, op.state));
            }
        }
        if !allowed_end(op.state, point) {
            t.problems
                .push(format!("{} ended {}, not done", op.id, op.state));
        }
        if op.state == LocalState::Unknown && op.assignee.is_none() {
            t.problems.push(format!(
                "{} is unknown but not assigned for reconciliation",
                op.id
            ));
        }
    }
    let orphans = writes
        .iter()
        .filter(|w| !world.payment_intents.contains(&w.payment_intent))
        .count();
    if orphans > 0 {
        t.seen += orphans;
        t.duplicates += orphans;
        t.problems
            .push(format!("{orphans} provider writes belong to no task"));
    }
    if world.worker.is_none() {
        check_notifications(world, &ops, &mut t)?;
    }
    if point == Point::Crash(CrashPoint::AwaitingApproval) {
        check_approvals(world, &ops, approvals_at_crash, &mut t).await?;
    }
    Ok(t)
}

/// The bundled worker's continuation queues exactly one notification per refunded order.
fn check_notifications(world: &World, ops: &[Operation], t: &mut Tally) -> anyhow::Result<()> {
    let orders = steward_refund_worker::Orders::open(&world.journal)?;
    for op in ops {
        let Some(order) = steward_refund_worker::order_of(&op.operation_key) else {
            continue;
        };
        let want = u64::from(
            op.state == LocalState::Continued
                && op.server_status == Some(InvocationStatus::Succeeded),
        );
        let got = orders.notifications(order)?;
        if got > want {
            t.duplicates += (got - want) as usize;
        } else if got < want {
            t.lost += 1;
        }
        if got != want {
            t.problems.push(format!(
                "order {order}: {got} notifications, expected {want}"
            ));
        }
    }
    Ok(())
}

/// The approval window: the restarted worker observed the same approval, the server holds one
/// approval per operation, and it was decided once.
async fn check_approvals(
    world: &World,
    ops: &[Operation],
    at_crash: &HashMap<String, Option<ApprovalId>>,
    t: &mut Tally,
) -> anyhow::Result<()> {
    let approvals = world.operator.approvals(None).await?;
    for op in ops {
        if let Some(Some(before)) = at_crash.get(op.id.as_str()) {
            if op.approval_id.as_ref() != Some(before) {
                t.problems.push(format!(
                    "{}: approval {before} before the crash, {:?} after",
                    op.id, op.approval_id
                ));
            }
        }
        let Some(inv) = &op.invocation_id else {
            continue;
        };
        let mine: Vec<_> = approvals
            .iter()
            .filter(|a| a.invocation_id.as_ref() == Some(inv))
            .collect();
        if mine.len() != 1 {
            t.problems.push(format!(
                "{}: the server holds {} approvals for {inv}",
                op.id,
                mine.len()
            ));
        }
        if let Some(a) = mine.first() {
            if a.decisions.len() != 1 {
                t.problems.push(format!(
                    "{}: approval {} has {} decisions",
                    op.id,
                    a.id,
                    a.decisions.len()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use steward_client::OperationId;
    use steward_core::{Millis, OperationKey};

    fn op(state: LocalState, server: Option<InvocationStatus>) -> Operation {
        let mut op = Operation::intended(
            OperationId::from_unique("t"),
            "test",
            "refund-order",
            OperationKey::parse("refund:o-1").unwrap(),
            json!({"paymentIntent": "pi_1", "amount": 5}),
            None,
            Millis(0),
        );
        op.state = state;
        op.server_status = server;
        op
    }

    #[test]
    fn expected_writes_follow_the_outcome_and_the_point() {
        let any = Point::Crash(CrashPoint::AfterSave);
        let record = Point::Crash(CrashPoint::ServerAfterRecord);
        let ok = Some(InvocationStatus::Succeeded);
        let failed = Some(InvocationStatus::Failed);
        assert_eq!(
            expected_writes(&op(LocalState::Continued, ok), any),
            Some(1)
        );
        assert_eq!(
            expected_writes(&op(LocalState::Continued, failed), any),
            Some(0)
        );
        assert_eq!(
            expected_writes(&op(LocalState::Unknown, None), record),
            Some(0)
        );
        assert_eq!(
            expected_writes(&op(LocalState::Unknown, None), Point::SigkillHold),
            Some(1)
        );
        assert_eq!(
            expected_writes(&op(LocalState::PendingApproval, None), any),
            Some(0)
        );
        assert_eq!(expected_writes(&op(LocalState::Submitted, None), any), None);
        assert_eq!(expected_writes(&op(LocalState::Running, None), any), None);
    }

    #[test]
    fn unknown_is_an_acceptable_end_only_when_steward_died() {
        assert!(allowed_end(LocalState::Continued, Point::SigkillWorker));
        assert!(allowed_end(LocalState::Unknown, Point::SigkillHold));
        assert!(allowed_end(
            LocalState::Unknown,
            Point::Crash(CrashPoint::ServerAfterSend)
        ));
        assert!(!allowed_end(
            LocalState::Unknown,
            Point::Crash(CrashPoint::AfterDispatch)
        ));
        assert!(!allowed_end(
            LocalState::PendingApproval,
            Point::Crash(CrashPoint::AwaitingApproval)
        ));
        assert!(!allowed_end(LocalState::Submitted, Point::SigkillWorker));
    }
}
