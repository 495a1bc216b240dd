//! Edit-and-approve end to end: an approver corrects a parked refund's amount, another key
//! approves the edit, and the provider fixture records exactly one refund, of the edited amount;
//! the original amount is never sent, and the agent's retry of its operation key observes the
//! edited invocation.

use crate::approvals::gated_world;
use crate::harness::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_edited_approval_dispatches_the_edit_once_and_the_original_never() {
    let w = gated_world(&[]).await;
    let sent = json!({"paymentIntent": "pi_edit", "amount": 5000});
    let parked = w
        .agent
        .invoke("refund", sent.clone(), Some("order-edit"), None)
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    let approval = parked.data()["approvalId"]
        .as_str()
        .expect("approvalId")
        .to_string();
    let approve = format!("/approvals/{approval}/approve");

    // The edit is checked as an invoke's input is: the field is named.
    let bad = w
        .operator
        .post(
            &approve,
            json!({"input": {"paymentIntent": "pi_edit", "amount": "lots"}}),
        )
        .await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    assert_eq!(bad.code(), "VALIDATION_ERROR");
    // The requester never edits its own request.
    let own = w
        .agent
        .post(
            &approve,
            json!({"input": {"paymentIntent": "pi_edit", "amount": 500}}),
        )
        .await;
    assert_eq!(own.status, 403, "{:?}", own.body);

    // The operator edits the amount: the approval stays pending, nothing is sent.
    let edited_input = json!({"paymentIntent": "pi_edit", "amount": 500});
    let edited = w
        .operator
        .post(
            &approve,
            json!({"input": edited_input, "note": "a tenth is enough"}),
        )
        .await;
    assert_eq!(edited.status, 200, "{:?}", edited.body);
    let answered = edited.data();
    assert_eq!(answered["approval"]["status"], "pending");
    assert_eq!(answered["approval"]["payload"]["input"], edited_input);
    assert_eq!(answered["approval"]["payload"]["originalInput"], sent);
    assert!(
        answered["approval"]["edit"]["editedBy"].is_string(),
        "{answered}"
    );
    assert_eq!(answered["invocation"]["status"], "pending_approval");
    assert_eq!(answered["invocation"]["input"], sent);
    assert_eq!(answered["invocation"]["editedInput"], edited_input);
    assert_eq!(
        answered["invocation"]["inputEdits"],
        json!([{"op": "replace", "path": "/amount", "before": 5000, "after": 500}])
    );
    assert_eq!(w.fixture.write_count(), 0, "an edit sends nothing");

    // The editor's approval counts for nothing on its own edit.
    let own_edit = w.operator.post(&approve, json!({"note": "fine"})).await;
    assert_eq!(own_edit.status, 403, "{:?}", own_edit.body);
    assert_eq!(own_edit.code(), "own_edit_decision_forbidden");
    // An approval bound to the input before the edit is refused.
    let other = Api::new(&w.server, &w.server.keys("test", "operator"));
    let stale = other
        .post(
            &approve,
            json!({"inputFingerprint": answered["approval"]["edit"]["originalInputFingerprint"]}),
        )
        .await;
    assert_eq!(stale.status, 409, "{:?}", stale.body);
    assert_eq!(stale.code(), "approval_input_changed");
    assert_eq!(w.fixture.write_count(), 0);

    // Another key approves the edit: it runs once, with the edited amount.
    let approved = other.post(&approve, json!({"note": "ok"})).await;
    assert_eq!(approved.status, 200, "{:?}", approved.body);
    assert_eq!(approved.data()["approval"]["status"], "approved");
    assert_eq!(approved.data()["invocation"]["status"], "succeeded");
    let refunds = w.fixture.refunds();
    assert_eq!(refunds.len(), 1, "one provider write: {refunds:?}");
    assert_eq!(refunds[0].amount, 500, "the edited amount was sent");
    assert!(
        refunds.iter().all(|r| r.amount != 5000),
        "the original amount is never sent"
    );

    // The agent's retry of its operation key, with the input it sent, observes the edited
    // invocation; nothing more is written.
    let retry = w
        .agent
        .invoke("refund", sent.clone(), Some("order-edit"), None)
        .await;
    assert_eq!(retry.status, 200, "{:?}", retry.body);
    assert_eq!(retry.data()["id"], parked.data()["id"]);
    assert_eq!(retry.data()["status"], "succeeded");
    assert_eq!(retry.data()["editedInput"], edited_input);
    assert_eq!(retry.data()["inputEdits"][0]["path"], "/amount");
    assert_eq!(w.fixture.write_count(), 1);
}
