//! Approval is observed, not duplicated: a gated invocation parks, resubmission returns the same
//! approval, approving runs it exactly once (also concurrently and across a crash), denying never;
//! a crash after the approval recorded its attempt leaves it `unknown`, never sent twice.

use crate::harness::*;
use serde_json::json;
use std::time::Duration;

/// A world whose `refund` action requires approval.
pub(crate) async fn gated_world(args: &[&str]) -> World {
    let w = world(args).await;
    let gated = w
        .operator
        .call(
            "PATCH",
            "/actions/refund",
            Some(json!({"requiresApproval": true})),
            None,
        )
        .await;
    assert_eq!(gated.status, 200, "{:?}", gated.body);
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gated_invocation_parks_is_observed_and_runs_once_after_approval() {
    let w = gated_world(&[]).await;
    let parked = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    assert_eq!(parked.data()["status"], "pending_approval");
    assert_eq!(parked.data()["pendingApproval"], true);
    assert_eq!(parked.data()["grade"], "pending");
    let approval_id = parked.data()["approvalId"]
        .as_str()
        .expect("approvalId")
        .to_string();

    // Resubmitting observes the same approval; it never creates another.
    let again = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(again.status, 202);
    assert_eq!(again.data()["approvalId"], approval_id.as_str());
    assert_eq!(again.data()["id"], parked.data()["id"]);
    let inbox = w.operator.get("/approvals?status=pending").await;
    assert_eq!(inbox.body["pagination"]["total"], 1, "{:?}", inbox.body);
    assert_eq!(w.fixture.write_count(), 0, "nothing runs while parked");

    // A long poll wakes when the decision lands (a missed wake-up would answer `pending`).
    let agent = w.agent.clone();
    let path = format!("/approvals/{approval_id}?waitSeconds=30");
    let poll = tokio::spawn(async move { agent.get(&path).await });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let approver = Api::new(&w.server, &w.server.keys("test", "operator"));
    let approved = approver
        .post(
            &format!("/approvals/{approval_id}/approve"),
            json!({"note": "ok"}),
        )
        .await;
    assert_eq!(approved.status, 200, "{:?}", approved.body);
    assert_eq!(approved.data()["approval"]["status"], "approved");
    assert_eq!(approved.data()["approval"]["decisions"][0]["note"], "ok");
    assert_eq!(approved.data()["approval"]["decisionNote"], "ok");
    assert_eq!(
        approved.data()["invocation"]["status"],
        "succeeded",
        "the answer carries the invocation the approval released, dispatched"
    );
    let polled = poll.await.unwrap();
    assert_eq!(polled.data()["status"], "approved", "{:?}", polled.body);

    let inv = w
        .agent
        .get(&format!(
            "/actions/invocations/{}",
            parked.data()["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(inv.data()["status"], "succeeded", "{:?}", inv.body);
    // A second approval of a settled request changes nothing.
    let late = Api::new(&w.server, &w.server.keys("test", "operator"));
    assert_eq!(
        late.post(&format!("/approvals/{approval_id}/approve"), json!({}))
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(w.fixture.write_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_approvals_dispatch_once() {
    let w = gated_world(&[]).await;
    let parked = w
        .agent
        .invoke("refund", refund_input(2), Some("order-2"), None)
        .await;
    let id = parked.data()["approvalId"].as_str().unwrap().to_string();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let approver = Api::new(&w.server, &w.server.keys("test", "operator"));
        let path = format!("/approvals/{id}/approve");
        tasks.push(tokio::spawn(async move {
            approver.post(&path, json!({})).await
        }));
    }
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        assert_eq!(reply.data()["approval"]["status"], "approved");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        w.fixture.write_count(),
        1,
        "eight concurrent approvals, one provider write"
    );
}

#[tokio::test]
async fn a_requester_never_decides_its_own_approval_and_a_denial_never_runs() {
    let w = gated_world(&[]).await;
    // The operator invokes, so the operator is the requester.
    let parked = w
        .operator
        .invoke("refund", refund_input(3), None, None)
        .await;
    let id = parked.data()["approvalId"].as_str().unwrap().to_string();
    let own = w
        .operator
        .post(&format!("/approvals/{id}/approve"), json!({}))
        .await;
    assert_eq!(own.status, 403);
    assert_eq!(own.code(), "self_decision_forbidden");
    // The agent role cannot decide at all.
    assert_eq!(
        w.agent
            .post(&format!("/approvals/{id}/approve"), json!({}))
            .await
            .status,
        403
    );

    let other = Api::new(&w.server, &w.server.keys("test", "operator"));
    let denied = other
        .post(&format!("/approvals/{id}/deny"), json!({"note": "no"}))
        .await;
    assert_eq!(denied.data()["approval"]["status"], "denied");
    assert_eq!(denied.data()["approval"]["decisionNote"], "no");
    assert_eq!(denied.data()["invocation"]["status"], "denied");
    let inv = w
        .operator
        .get(&format!(
            "/actions/invocations/{}",
            parked.data()["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(inv.data()["status"], "denied");
    assert_eq!(inv.data()["grade"], "denied");
    let again = other
        .post(&format!("/approvals/{id}/approve"), json!({}))
        .await;
    assert_eq!(
        again.data()["approval"]["status"],
        "denied",
        "a denial is final"
    );
    assert_eq!(w.fixture.write_count(), 0);
}

/// A decision that released its invocation without recording its attempt (here: the
/// environment is halted, so the attempt is refused and the work parks), then a crash: the
/// restart takes the released work over, and it runs exactly once, after resume.
#[tokio::test]
async fn a_server_crash_between_decision_and_dispatch_still_writes_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture().await;
    let data = dir.path().join("data");
    let mut server = Server::start_with_env(
        &data,
        &["--allow-insecure-destinations"],
        &[("STEWARD_CRASH_AT", "server_after_approval")],
    );
    let operator = Api::new(&server, &server.keys("test", "operator"));
    let agent = Api::new(&server, &server.keys("test", "agent"));
    refund_action(&operator, &fixture.base_url(), "refund").await;
    operator
        .call(
            "PATCH",
            "/actions/refund",
            Some(json!({"requiresApproval": true})),
            None,
        )
        .await;
    let parked = agent
        .invoke("refund", refund_input(4), Some("order-4"), None)
        .await;
    let id = parked.data()["approvalId"].as_str().unwrap().to_string();
    let halted = operator
        .post("/environment/halt", json!({"reason": "hold"}))
        .await;
    assert_eq!(halted.status, 200, "{:?}", halted.body);
    let approver = Api::new(&server, &server.keys("test", "operator"));
    let call = tokio::spawn(async move {
        approver
            .post(&format!("/approvals/{id}/approve"), json!({}))
            .await
    });
    assert!(
        server.wait_exit(Duration::from_secs(20)).await.is_some(),
        "aborted after the decision"
    );
    drop(call);
    assert_eq!(fixture.write_count(), 0, "the crash came before any send");
    server.restart();
    let operator = Api::new(&server, &server.keys("test", "operator"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fixture.write_count(), 0, "still halted: taken over, parked");
    let resumed = operator.post("/environment/resume", json!({})).await;
    assert_eq!(resumed.status, 200, "{:?}", resumed.body);
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 1).await,
        "the approved work ran after restart and resume"
    );
    let agent = Api::new(&server, &server.keys("test", "agent"));
    let inv = agent
        .invoke("refund", refund_input(4), Some("order-4"), None)
        .await;
    assert_eq!(inv.data()["status"], "succeeded", "{:?}", inv.body);
    server.restart();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fixture.write_count(), 1, "a second restart sends nothing");
}

/// An approval that releases its invocation commits the attempt with the decision; a crash
/// before the send leaves that attempt in flight, and the restart marks it `unknown`: nothing
/// is sent, then or later, and the approval stands.
#[tokio::test]
async fn a_server_crash_after_an_approval_recorded_its_attempt_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture().await;
    let data = dir.path().join("data");
    let mut server = Server::start_with_env(
        &data,
        &["--allow-insecure-destinations"],
        &[("STEWARD_CRASH_AT", "server_after_record")],
    );
    let operator = Api::new(&server, &server.keys("test", "operator"));
    let agent = Api::new(&server, &server.keys("test", "agent"));
    refund_action(&operator, &fixture.base_url(), "refund").await;
    operator
        .call(
            "PATCH",
            "/actions/refund",
            Some(json!({"requiresApproval": true})),
            None,
        )
        .await;
    let parked = agent
        .invoke("refund", refund_input(5), Some("order-5"), None)
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    let id = parked.data()["approvalId"].as_str().unwrap().to_string();
    let approver = Api::new(&server, &server.keys("test", "operator"));
    let path = format!("/approvals/{id}/approve");
    let call = tokio::spawn(async move { approver.post(&path, json!({})).await });
    assert!(
        server.wait_exit(Duration::from_secs(20)).await.is_some(),
        "aborted after the attempt was recorded"
    );
    drop(call);
    server.restart();
    let operator = Api::new(&server, &server.keys("test", "operator"));
    let approval = operator.get(&format!("/approvals/{id}")).await;
    assert_eq!(approval.data()["status"], "approved", "{:?}", approval.body);
    let inv = operator
        .get(&format!(
            "/actions/invocations/{}",
            parked.data()["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(inv.data()["status"], "unknown", "{:?}", inv.body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fixture.write_count(), 0, "nothing was sent, nor sent again");
}

#[tokio::test]
async fn custom_requests_expire_and_the_inbox_filters() {
    let w = world(&[]).await;
    let made = w
        .agent
        .post(
            "/approvals",
            json!({"title": "Ship it?", "payload": {"x": 1}, "expiresInSeconds": 1}),
        )
        .await;
    assert_eq!(made.status, 201, "{:?}", made.body);
    let id = made.data()["id"].as_str().unwrap().to_string();
    let waited = w
        .agent
        .get(&format!("/approvals/{id}?waitSeconds=20"))
        .await;
    assert_eq!(waited.data()["status"], "expired", "{:?}", waited.body);
    assert_eq!(waited.data()["decisionOrigin"], "system");
    let automated = w.agent.get("/approvals?decisionOrigin=automated").await;
    assert_eq!(automated.body["pagination"]["total"], 1);
    let human = w.agent.get("/approvals?decisionOrigin=human").await;
    assert_eq!(human.body["pagination"]["total"], 0);
    let bad = w.agent.post("/approvals", json!({"payload": {}})).await;
    assert_eq!(bad.body["error"]["details"]["field"], "title");
}
