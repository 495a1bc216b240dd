//! Holds: an operator holds one operation key or one action; new invokes under it park (202,
//! `held`) and send nothing, a retry of a held key answers the same parked invocation, an
//! unrelated key runs, and release runs each parked invocation exactly once. Counts are the
//! fixture's committed writes.

use crate::halt::audit_kinds;
use crate::harness::*;
use serde_json::json;
use std::time::Duration;

/// Long enough for a dispatch that should not happen to have happened.
const QUIET_WAIT: Duration = Duration::from_millis(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_operation_key_parks_and_runs_exactly_once_after_release() {
    let w = world(&[]).await;

    // Only environments:halt may hold; a hold names what it holds, and names it well.
    let refused = w
        .agent
        .post("/holds", json!({"operationKey": "order-1"}))
        .await;
    assert_eq!(refused.status, 403, "{:?}", refused.body);
    let empty = w.operator.post("/holds", json!({})).await;
    assert_eq!(empty.status, 400, "{:?}", empty.body);
    assert_eq!(empty.body["error"]["details"]["field"], "actionName");
    let unknown = w
        .operator
        .post("/holds", json!({"actionName": "no-such-action"}))
        .await;
    assert_eq!(unknown.status, 400, "{:?}", unknown.body);
    assert_eq!(unknown.body["error"]["details"]["field"], "actionName");
    let long = w
        .operator
        .post("/holds", json!({"operationKey": "k".repeat(256)}))
        .await;
    assert_eq!(long.status, 400, "{:?}", long.body);
    assert_eq!(long.body["error"]["details"]["field"], "operationKey");

    let held = w
        .operator
        .post(
            "/holds",
            json!({"operationKey": "order-1", "reason": "incident 7"}),
        )
        .await;
    assert_eq!(held.status, 201, "{:?}", held.body);
    let hold_id = held.data()["id"].as_str().unwrap().to_string();

    let parked = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    assert_eq!(parked.data()["status"], "running");
    assert_eq!(parked.data()["stage"], "ready");
    assert_eq!(parked.data()["held"]["holdId"], hold_id.as_str());
    assert_eq!(parked.data()["held"]["reason"], "incident 7");
    let inv_id = parked.data()["id"].as_str().unwrap().to_string();

    // A retry of the held key sees the same parked invocation, not a new one.
    let retried = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(retried.status, 202, "{:?}", retried.body);
    assert_eq!(retried.data()["id"], inv_id.as_str());
    assert_eq!(retried.data()["held"]["holdId"], hold_id.as_str());

    // An unrelated key runs while the other is held.
    let other = w
        .agent
        .invoke("refund", refund_input(2), Some("order-2"), None)
        .await;
    assert_eq!(other.data()["status"], "succeeded", "{:?}", other.body);
    tokio::time::sleep(QUIET_WAIT).await;
    assert_eq!(
        w.fixture.write_count(),
        1,
        "only the unrelated key was sent"
    );

    // A restart keeps the hold and the parked call: it is neither sent nor settled failed.
    let mut w = w;
    w.server.restart();
    w.operator = Api::new(&w.server, &w.server.keys("test", "operator"));
    w.agent = Api::new(&w.server, &w.server.keys("test", "agent"));
    tokio::time::sleep(QUIET_WAIT).await;
    assert_eq!(
        w.fixture.write_count(),
        1,
        "nothing is sent after a restart"
    );
    let kept = w.agent.get(&format!("/actions/invocations/{inv_id}")).await;
    assert_eq!(kept.data()["status"], "running", "{:?}", kept.body);
    assert_eq!(kept.data()["held"]["holdId"], hold_id.as_str());

    let listed = w.operator.get("/holds").await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    assert_eq!(listed.body["data"].as_array().unwrap().len(), 1);

    let released = w
        .operator
        .post(&format!("/holds/{hold_id}/release"), json!({}))
        .await;
    assert_eq!(released.status, 200, "{:?}", released.body);
    assert_eq!(released.data()["released"], 1);
    let fixture = &w.fixture;
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 2).await,
        "the held refund runs after release"
    );
    let again = w
        .operator
        .post(&format!("/holds/{hold_id}/release"), json!({}))
        .await;
    assert_eq!(again.status, 404, "{:?}", again.body);
    // A retry after release answers the settled invocation and sends nothing more.
    let after = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(after.data()["id"], inv_id.as_str());
    tokio::time::sleep(QUIET_WAIT).await;
    assert_eq!(w.fixture.write_count(), 2, "exactly once");
    let inv = w.agent.get(&format!("/actions/invocations/{inv_id}")).await;
    assert_eq!(inv.data()["status"], "succeeded", "{:?}", inv.body);
    assert!(inv.data().get("held").is_none(), "{:?}", inv.body);

    let audit = audit_kinds(&w.server.data);
    assert!(audit.contains("('hold.created', 'key_"), "{audit}");
    assert!(audit.contains("('hold.released', 'key_"), "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_action_parks_every_key_and_release_runs_each_once() {
    let w = world(&[]).await;
    let held = w
        .operator
        .post("/holds", json!({"actionName": "refund"}))
        .await;
    assert_eq!(held.status, 201, "{:?}", held.body);
    let hold_id = held.data()["id"].as_str().unwrap().to_string();
    let mut parked = Vec::new();
    for (n, key) in [(1, "a-1"), (2, "a-2")] {
        let inv = w
            .agent
            .invoke("refund", refund_input(n), Some(key), None)
            .await;
        assert_eq!(inv.status, 202, "{:?}", inv.body);
        assert_eq!(inv.data()["held"]["holdId"], hold_id.as_str());
        parked.push(inv.data()["id"].as_str().unwrap().to_string());
    }
    tokio::time::sleep(QUIET_WAIT).await;
    assert_eq!(w.fixture.write_count(), 0, "nothing is sent while held");

    let released = w
        .operator
        .post(&format!("/holds/{hold_id}/release"), json!({}))
        .await;
    assert_eq!(released.status, 200, "{:?}", released.body);
    assert_eq!(released.data()["released"], 2);
    let fixture = &w.fixture;
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 2).await,
        "both held refunds run after release"
    );
    tokio::time::sleep(QUIET_WAIT).await;
    assert_eq!(w.fixture.write_count(), 2, "each exactly once");
    for id in parked {
        let inv = w.agent.get(&format!("/actions/invocations/{id}")).await;
        assert_eq!(inv.data()["status"], "succeeded", "{:?}", inv.body);
    }
}
