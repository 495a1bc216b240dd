//! Server crashes: SIGKILL and armed crash points, restart on the same database, count writes.

use crate::harness::*;
use std::time::Duration;
use steward_fixture::{FaultMode, FaultPlan};

async fn effect_of(api: &Api, invocation: &serde_json::Value) -> serde_json::Value {
    let id = invocation["effectId"]
        .as_str()
        .expect("governed invocation has an effect");
    api.get(&format!("/actions/effects/{id}"))
        .await
        .data()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_the_provider_holds_a_committed_write_ends_unknown_and_never_repeats() {
    sigkill_during_a_held_write_ends_unknown(&mut world(&[]).await).await;
}

/// SIGKILL while the provider holds a committed write, restart: the effect is `unknown` with
/// evidence, a re-invoke returns it, and the provider has one write. Shared with PostgreSQL.
pub(crate) async fn sigkill_during_a_held_write_ends_unknown(w: &mut World) {
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::HoldAfterCommit).hold_ms(5_000));
    let agent = w.agent.clone();
    let pending = tokio::spawn(async move {
        agent
            .invoke("refund", refund_input(1), Some("order-1"), None)
            .await
    });
    let fixture = &w.fixture;
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 1).await,
        "the provider committed"
    );
    w.server.kill();
    drop(pending);
    w.server.restart();
    let agent = Api::new(&w.server, &w.server.keys("test", "agent"));

    let invocations = agent.get("/actions/invocations").await;
    let inv = invocations.data()[0].clone();
    assert_eq!(inv["status"], "unknown", "{inv}");
    let effect = effect_of(&agent, &inv).await;
    assert_eq!(effect["outcome"], "unknown");
    assert_eq!(effect["stage"], "reconciling");
    let kinds: Vec<&str> = effect["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["accepted", "attempt", "restart"],
        "evidence says why: {effect}"
    );

    // Re-invoking the same operation returns that effect, and sends nothing.
    let again = agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(again.data()["id"], inv["id"]);
    assert_eq!(again.data()["status"], "unknown");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(w.fixture.write_count(), 1, "exactly one provider write");
}

/// Arms a server crash point, invokes, restarts, and returns the invocation and the write count.
async fn crash_at(point: &str) -> (serde_json::Value, u64) {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture().await;
    let data = dir.path().join("data");
    let mut server = Server::start_with_env(
        &data,
        &["--allow-insecure-destinations"],
        &[("STEWARD_CRASH_AT", point)],
    );
    let operator = Api::new(&server, &server.keys("test", "operator"));
    refund_action(&operator, &fixture.base_url(), "refund").await;
    let op = operator.clone();
    let call = tokio::spawn(async move {
        op.call(
            "POST",
            "/actions/refund/invoke",
            Some(serde_json::json!({"input": refund_input(7), "operationKey": "op-7"})),
            None,
        )
        .await
    });
    let exited = server.wait_exit(Duration::from_secs(20)).await;
    assert!(
        exited.is_some_and(|s| !s.success()),
        "{point}: the server aborted at its crash point"
    );
    drop(call);
    server.restart();
    let operator = Api::new(&server, &server.keys("test", "operator"));
    let again = operator
        .invoke("refund", refund_input(7), Some("op-7"), None)
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    (again.data().clone(), fixture.write_count())
}

#[tokio::test]
async fn crash_after_recording_the_attempt_is_unknown_with_nothing_sent() {
    let (inv, writes) = crash_at("server_after_record").await;
    assert_eq!(
        inv["status"], "unknown",
        "Steward cannot prove it did not send: {inv}"
    );
    assert_eq!(writes, 0);
}

#[tokio::test]
async fn crash_after_sending_is_unknown_with_one_write() {
    let (inv, writes) = crash_at("server_after_send").await;
    assert_eq!(inv["status"], "unknown", "{inv}");
    assert_eq!(writes, 1);
}

#[tokio::test]
async fn crash_after_the_response_is_unknown_with_one_write() {
    let (inv, writes) = crash_at("server_after_response").await;
    assert_eq!(inv["status"], "unknown", "{inv}");
    assert_eq!(writes, 1);
}

#[tokio::test]
async fn sigterm_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("data"), &[]);
    let operator = Api::new(&server, &server.keys("test", "operator"));
    assert_eq!(operator.get("/auth/identity").await.status, 200);
    assert!(server.terminate(), "exit status 0 after SIGTERM");
}
