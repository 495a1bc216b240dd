//! One key, one operation: concurrency and identity behaviour, counted at the provider.

use crate::harness::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_invokes_of_one_operation_key_write_once() {
    sixty_four_concurrent_invokes_write_once(&world(&[]).await).await;
}

/// 64 concurrent invokes of one operation key, each with its own idempotency key: one
/// invocation, one effect, one provider write. Shared with the PostgreSQL tests.
pub(crate) async fn sixty_four_concurrent_invokes_write_once(w: &World) {
    let mut tasks = Vec::new();
    for i in 0..64 {
        let agent = w.agent.clone();
        tasks.push(tokio::spawn(async move {
            agent
                .invoke(
                    "refund",
                    refund_input(1),
                    Some("order-1"),
                    Some(&format!("idem-{i}")),
                )
                .await
        }));
    }
    let mut invocations = std::collections::BTreeSet::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        invocations.insert(reply.data()["id"].as_str().unwrap().to_string());
    }
    assert_eq!(
        invocations.len(),
        1,
        "all 64 answers must name one invocation: {invocations:?}"
    );
    assert_eq!(w.fixture.write_count(), 1, "exactly one provider write");
    let effects = w.agent.get("/actions/effects?action=refund").await;
    assert_eq!(effects.body["pagination"]["total"], 1, "{:?}", effects.body);
}

#[tokio::test]
async fn operation_key_replay_returns_the_effect_and_a_different_input_is_refused() {
    let w = world(&[]).await;
    let first = w
        .agent
        .invoke("refund", refund_input(2), Some("order-2"), None)
        .await;
    assert_eq!(first.data()["status"], "succeeded");
    let again = w
        .agent
        .invoke("refund", refund_input(2), Some("order-2"), None)
        .await;
    assert_eq!(again.data()["id"], first.data()["id"]);
    assert_eq!(again.data()["effectId"], first.data()["effectId"]);
    let conflict = w
        .agent
        .invoke("refund", refund_input(3), Some("order-2"), None)
        .await;
    assert_eq!(conflict.status, 409);
    assert_eq!(conflict.code(), "operation_key_conflict");
    assert_eq!(
        conflict.body["error"]["details"]["effectId"],
        first.data()["effectId"]
    );
    assert_eq!(w.fixture.write_count(), 1);
}

#[tokio::test]
async fn idempotency_keys_replay_and_refuse_reuse() {
    let w = world(&[]).await;
    let first = w
        .agent
        .invoke("refund", refund_input(4), None, Some("req-4"))
        .await;
    assert!(!first.replayed);
    let again = w
        .agent
        .invoke("refund", refund_input(4), None, Some("req-4"))
        .await;
    assert!(again.replayed, "a replay says so");
    assert_eq!(again.data()["id"], first.data()["id"]);
    let reused = w
        .agent
        .invoke("refund", refund_input(5), None, Some("req-4"))
        .await;
    assert_eq!(reused.status, 422);
    assert_eq!(reused.code(), "idempotency_key_reused");
    assert_eq!(w.fixture.write_count(), 1);
    // Generic writes honour the key too.
    let body = json!({"name": "noop", "urlTemplate": "https://example.com/x"});
    let a = w
        .operator
        .call("POST", "/actions", Some(body.clone()), Some("create-1"))
        .await;
    let b = w
        .operator
        .call("POST", "/actions", Some(body), Some("create-1"))
        .await;
    assert_eq!((a.status, b.status), (201, 201));
    assert!(b.replayed);
    assert_eq!(a.data()["id"], b.data()["id"]);
}

#[tokio::test]
async fn a_resend_while_the_original_runs_is_409_in_progress() {
    let w = world(&[]).await;
    w.fixture.set_faults(
        steward_fixture::FaultPlan::new(steward_fixture::FaultMode::HoldAfterCommit).hold_ms(1500),
    );
    let agent = w.agent.clone();
    let original = tokio::spawn(async move {
        agent
            .invoke("refund", refund_input(6), None, Some("slow"))
            .await
    });
    let fixture = &w.fixture;
    assert!(
        eventually(std::time::Duration::from_secs(10), || fixture.write_count()
            == 1)
        .await
    );
    let resend = w
        .agent
        .invoke("refund", refund_input(6), None, Some("slow"))
        .await;
    assert_eq!(resend.status, 409);
    assert_eq!(resend.code(), "idempotency_request_in_progress");
    assert_eq!(
        resend.retry_after.as_deref(),
        Some("1"),
        "the SDK waits Retry-After before resending"
    );
    let done = original.await.unwrap();
    assert_eq!(done.data()["status"], "succeeded");
    let after = w
        .agent
        .invoke("refund", refund_input(6), None, Some("slow"))
        .await;
    assert!(after.replayed);
    assert_eq!(w.fixture.write_count(), 1);
}
