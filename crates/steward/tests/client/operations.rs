//! The library's operation lifecycle against a real server: resubmission after a lost answer,
//! approvals observed (never re-requested), denial, refusal, failure and `retryOf`.

use crate::harness::*;
use serde_json::json;
use std::time::Duration;
use steward_client::{JournalError, LocalState, RecoveryAction, RunError};
use steward_core::{InvocationStatus, OperationKey};
use steward_fixture::{FaultMode, FaultPlan};

fn op_key(text: &str) -> OperationKey {
    OperationKey::parse(text).unwrap()
}

fn refund(n: u32) -> serde_json::Value {
    json!({"paymentIntent": format!("pi_{n}"), "amount": 1000 + n})
}

#[tokio::test]
async fn a_lost_answer_is_recovered_by_resending_the_same_keys() {
    let w = world().await;
    let ops = w.operations("app.db", Duration::from_secs(5));
    let op = ops
        .begin("refund", &op_key("order-1"), refund(1))
        .await
        .unwrap();
    let done = ops.run(&op).await.unwrap();
    assert_eq!(done.state, LocalState::Succeeded);
    assert_eq!(w.fixture.write_count(), 1);

    // As if the process died after sending and before saving the answer: submitted, no
    // invocation id in the journal.
    let mut lost = done.clone();
    lost.state = LocalState::Submitted;
    lost.invocation_id = None;
    lost.effect_id = None;
    lost.server_status = None;
    lost.server_record = None;
    ops.journal().save(&lost).await.unwrap();

    let report = ops.recover().await.unwrap();
    let recovered = &report.operations[0];
    assert_eq!(recovered.state_before, LocalState::Submitted);
    assert_eq!(
        recovered.steps,
        [
            RecoveryAction::Dispatch,
            RecoveryAction::Adopt(InvocationStatus::Succeeded),
            RecoveryAction::Complete
        ]
    );
    assert_eq!(recovered.operation.state, LocalState::Succeeded);
    assert_eq!(
        recovered.operation.invocation_id, done.invocation_id,
        "the original"
    );
    assert_eq!(
        recovered.operation.attempt_count, 2,
        "sent twice, same keys"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(w.fixture.write_count(), 1, "one provider write");
    assert_eq!(report.to_complete().len(), 1);
}

#[tokio::test]
async fn a_pending_approval_is_observed_never_requested_again_and_runs_once_when_approved() {
    let w = world().await;
    let ops = w.operations("app.db", Duration::from_secs(1));
    let op = ops
        .begin("refund-gated", &op_key("order-2"), refund(2))
        .await
        .unwrap();
    let pending = ops.run(&op).await.unwrap();
    assert_eq!(
        pending.state,
        LocalState::PendingApproval,
        "rests pending after the wait"
    );
    let approval = pending
        .approval_id
        .clone()
        .expect("the approval id is saved");

    // A restart observes the same approval.
    let report = ops.recover().await.unwrap();
    assert_eq!(report.pending_approval().len(), 1);
    assert_eq!(
        report.operations[0].operation.approval_id,
        Some(approval.clone())
    );
    assert!(!report.operations[0]
        .steps
        .contains(&RecoveryAction::Dispatch));
    let inv = pending.invocation_id.clone().unwrap();
    let approvals = w.operator.approvals(None).await.unwrap();
    assert_eq!(
        approvals
            .iter()
            .filter(|a| a.invocation_id.as_ref() == Some(&inv))
            .count(),
        1,
        "one approval on the server"
    );
    assert_eq!(w.fixture.write_count(), 0);

    w.operator
        .approve(&approval, "fine", &key("approve-1"))
        .await
        .unwrap();
    let done = ops.run(&pending).await.unwrap();
    assert_eq!(done.state, LocalState::Succeeded);
    assert_eq!(done.approval_id, Some(approval));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(w.fixture.write_count(), 1);
}

#[tokio::test]
async fn a_denied_approval_never_runs_and_is_surfaced() {
    let w = world().await;
    let ops = w.operations("app.db", Duration::from_secs(20));
    let op = ops
        .begin("refund-gated", &op_key("order-3"), refund(3))
        .await
        .unwrap();
    let operator = w.operator.clone();
    let denier = tokio::spawn(async move {
        for _ in 0..200 {
            let pending = operator
                .invocations(Some(InvocationStatus::PendingApproval))
                .await
                .unwrap();
            if let Some(id) = pending.first().and_then(|i| i.approval_id.clone()) {
                operator.deny(&id, "no", &key("deny-1")).await.unwrap();
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the approval never appeared");
    });
    let denied = ops.run(&op).await.unwrap();
    denier.await.unwrap();
    assert_eq!(denied.state, LocalState::Denied);
    assert_eq!(denied.server_status, Some(InvocationStatus::Denied));
    let report = ops.recover().await.unwrap();
    assert_eq!(report.operations[0].steps, [RecoveryAction::Surface]);
    let completed = ops
        .complete(&denied, json!({"refunded": false}))
        .await
        .unwrap();
    ops.mark_continued(&completed).await.unwrap();
    assert!(ops.recover().await.unwrap().operations.is_empty());
    assert_eq!(w.fixture.write_count(), 0);
}

#[tokio::test]
async fn a_failed_refund_is_surfaced_and_retried_with_retry_of() {
    let w = world().await;
    let ops = w.operations("app.db", Duration::from_secs(5));
    w.fixture.set_faults(FaultPlan::new(FaultMode::Reject));
    let op = ops
        .begin("refund", &op_key("order-4"), refund(4))
        .await
        .unwrap();
    let failed = ops.run(&op).await.unwrap();
    assert_eq!(failed.state, LocalState::Failed);
    assert_eq!(ops.recover().await.unwrap().to_complete().len(), 1);

    let retry = ops
        .begin_retry(&failed, &op_key("order-4:retry-1"), refund(4))
        .await
        .unwrap();
    assert_eq!(retry.retry_of, failed.invocation_id);
    let done = ops.run(&retry).await.unwrap();
    assert_eq!(done.state, LocalState::Succeeded);
    assert_eq!(
        done.server_record.as_ref().unwrap()["retryOf"],
        json!(failed.invocation_id)
    );
    assert_eq!(w.fixture.write_count(), 1);
    // Only a failed operation can be retried.
    assert!(matches!(
        ops.begin_retry(&done, &op_key("order-4:retry-2"), refund(4))
            .await,
        Err(RunError::WrongState { .. })
    ));
}

#[tokio::test]
async fn a_refused_input_fails_without_an_invocation_and_a_changed_input_is_refused() {
    let w = world().await;
    let ops = w.operations("app.db", Duration::from_secs(5));
    let op = ops
        .begin("refund", &op_key("order-5"), json!({"amount": 5}))
        .await
        .unwrap();
    let refused = ops.run(&op).await.unwrap();
    assert_eq!(refused.state, LocalState::Failed);
    assert_eq!(refused.invocation_id, None);
    assert!(refused.last_error.unwrap().contains("VALIDATION_ERROR"));
    let report = ops.recover().await.unwrap();
    assert_eq!(report.operations[0].steps, [RecoveryAction::Surface]);

    let again = ops
        .begin("refund", &op_key("order-5"), json!({"amount": 5}))
        .await
        .unwrap();
    assert_eq!(again.id, op.id, "same key and input: the same operation");
    assert!(matches!(
        ops.begin("refund", &op_key("order-5"), json!({"amount": 6}))
            .await,
        Err(RunError::Journal(JournalError::KeyConflict { .. }))
    ));
    assert_eq!(w.fixture.write_count(), 0);
}
