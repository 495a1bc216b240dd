//! The kill switch: while an environment is halted nothing is sent, whatever is invoked or
//! approved (also across a restart); approvals can still be decided; resume runs the approved
//! work exactly once. Counts are the fixture's committed writes.

use crate::harness::*;
use serde_json::json;
use std::time::Duration;

/// Long enough for a dispatch that should not happen to have happened.
const QUIET_WAIT: Duration = Duration::from_millis(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn while_halted_nothing_is_sent_and_resume_runs_approved_work_once() {
    let mut w = world(&[]).await;
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
    let parked = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    let approval = parked.data()["approvalId"].as_str().unwrap().to_string();
    let inv_path = format!(
        "/actions/invocations/{}",
        parked.data()["id"].as_str().unwrap()
    );

    // Only environments:halt may pull the switch.
    let refused = w
        .agent
        .post("/environment/halt", json!({"reason": "agent"}))
        .await;
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.body["error"]["details"]["requiredScope"],
        "environments:halt"
    );
    let halted = w
        .operator
        .post("/environment/halt", json!({"reason": "incident 42"}))
        .await;
    assert_eq!(halted.status, 200, "{:?}", halted.body);
    assert_eq!(halted.data()["halted"], true);
    let env = w.agent.get("/environment").await;
    assert_eq!(env.data()["halted"], true);
    assert_eq!(env.data()["haltReason"], "incident 42");

    // Invokes are refused before anything is recorded.
    let invoked = w
        .agent
        .invoke("refund", refund_input(2), Some("order-2"), None)
        .await;
    assert_eq!(invoked.status, 409, "{:?}", invoked.body);
    assert_eq!(invoked.code(), "environment_halted");

    // Approvals can still be decided; the approved work parks.
    let approver = Api::new(&w.server, &w.server.keys("test", "operator"));
    let approved = approver
        .post(&format!("/approvals/{approval}/approve"), json!({}))
        .await;
    assert_eq!(approved.status, 200, "{:?}", approved.body);
    assert_eq!(approved.data()["approval"]["status"], "approved");
    tokio::time::sleep(QUIET_WAIT).await;
    assert_eq!(w.fixture.write_count(), 0, "nothing is sent while halted");
    let inv = w.agent.get(&inv_path).await;
    assert_eq!(inv.data()["status"], "running", "{:?}", inv.body);
    let effect = w
        .agent
        .get(&format!(
            "/actions/effects/{}",
            inv.data()["effectId"].as_str().unwrap()
        ))
        .await;
    let kinds: Vec<&str> = effect.data()["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"parked"), "{kinds:?}");

    // A restart while halted sends nothing either: the halt and the approval both stand.
    w.server.restart();
    let operator = Api::new(&w.server, &w.server.keys("test", "operator"));
    let agent = Api::new(&w.server, &w.server.keys("test", "agent"));
    tokio::time::sleep(QUIET_WAIT).await;
    assert_eq!(
        w.fixture.write_count(),
        0,
        "nothing is sent after a restart while halted"
    );
    assert_eq!(agent.get("/environment").await.data()["halted"], true);

    // Resume releases the approved work, which runs exactly once.
    let resumed = operator.post("/environment/resume", json!({})).await;
    assert_eq!(resumed.status, 200, "{:?}", resumed.body);
    assert_eq!(resumed.data()["halted"], false);
    assert_eq!(resumed.data()["released"], 1);
    let fixture = &w.fixture;
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 1).await,
        "the approved refund runs after resume"
    );
    let again = operator.post("/environment/resume", json!({})).await;
    assert_eq!(again.data()["released"], 0);
    tokio::time::sleep(QUIET_WAIT).await;
    assert_eq!(w.fixture.write_count(), 1, "exactly once");
    assert_eq!(agent.get(&inv_path).await.data()["status"], "succeeded");

    // And the agent acts again.
    let ungated = operator
        .call(
            "PATCH",
            "/actions/refund",
            Some(json!({"requiresApproval": false})),
            None,
        )
        .await;
    assert_eq!(ungated.status, 200);
    let after = agent
        .invoke("refund", refund_input(3), Some("order-3"), None)
        .await;
    assert_eq!(after.data()["status"], "succeeded", "{:?}", after.body);
    assert_eq!(w.fixture.write_count(), 2);

    // Both switches are in the audit log with the acting key.
    let audit = audit_kinds(&w.server.data);
    assert!(audit.contains("('environment.halted', 'key_"), "{audit}");
    assert!(audit.contains("('environment.resumed', 'key_"), "{audit}");
}

/// The audit log's kinds and actors, read with python's sqlite3 (no rusqlite in this test).
pub fn audit_kinds(data: &std::path::Path) -> String {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print([r for r in c.execute('SELECT kind, actor FROM audit')])")
        .arg(data.join("steward.db"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}
