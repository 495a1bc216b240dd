//! The `http.idempotent` adapter through a real `steward serve` and the fixture's generic
//! provider (`/generic/writes`, deduplicated by `X-Idempotency-Key`, looked up by key):
//! concurrent invokes of one operation key write once, a lost answer is settled by the
//! background reconciler through the lookup, a crash after sending is reconciled after the
//! restart, and a replay under the same key writes nothing new. Every count is the fixture's.

use crate::harness::*;
use serde_json::{json, Value};
use std::time::Duration;
use steward_fixture::{FaultMode, FaultPlan};

/// Creates `name` on the fixture's generic provider, with the credential `refund_action` put.
async fn generic_action(operator: &Api, fixture_url: &str, name: &str) {
    let created = operator
        .post(
            "/actions",
            json!({
                "name": name,
                "adapter": {
                    "type": "http.idempotent",
                    "credentialSecret": "STRIPE_TEST_KEY",
                    "config": {
                        "url": format!("{fixture_url}/generic/writes"),
                        "body": {"order": "{{input.order}}"},
                        "idempotencyHeader": "X-Idempotency-Key",
                        "lookup": {
                            "url": format!("{fixture_url}/generic/writes/{{{{key}}}}"),
                            "match": [{"path": "status", "equals": "succeeded"}]
                        },
                        "referencePath": "id",
                        "replayWindowSeconds": 86400
                    }
                }
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
}

fn order(n: u32) -> Value {
    json!({"order": format!("o-{n}")})
}

async fn settled(api: &Api, effect_id: &str) -> Value {
    let started = std::time::Instant::now();
    loop {
        let e = api.get(&format!("/actions/effects/{effect_id}")).await;
        if e.data()["stage"] == "settled" || started.elapsed() > Duration::from_secs(20) {
            return e.data().clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http_idempotent_writes_once_per_operation_key_and_reconciles_a_lost_answer() {
    let w = world(&["--reconcile-interval-ms", "100"]).await;
    generic_action(&w.operator, &w.fixture.base_url(), "orders").await;

    let mut tasks = Vec::new();
    for i in 0..16 {
        let agent = w.agent.clone();
        tasks.push(tokio::spawn(async move {
            agent
                .invoke(
                    "orders",
                    order(1),
                    Some("order-1"),
                    Some(&format!("idem-{i}")),
                )
                .await
        }));
    }
    let mut invocations = std::collections::BTreeSet::new();
    for task in tasks {
        let reply = task.await.unwrap();
        // A concurrent invoke may find the one invocation still running.
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        invocations.insert(reply.data()["effectId"].as_str().unwrap().to_string());
    }
    assert_eq!(invocations.len(), 1, "one effect: {invocations:?}");
    let first = settled(&w.agent, invocations.first().unwrap()).await;
    assert_eq!(first["outcome"], "succeeded", "{first}");
    assert_eq!(
        w.fixture.write_count(),
        1,
        "one write for one operation key"
    );

    // The answer is lost after the provider committed: `unknown`, then the background
    // reconciler finds the write through the lookup by key. Nothing is sent again.
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
    let lost = w
        .agent
        .invoke("orders", order(2), Some("order-2"), None)
        .await;
    assert_eq!(lost.data()["status"], "unknown", "{:?}", lost.body);
    let e = settled(&w.agent, lost.data()["effectId"].as_str().unwrap()).await;
    assert_eq!(e["outcome"], "succeeded", "{e}");
    assert_eq!(e["grade"], "confirmed", "{e}");
    assert_eq!(e["attemptCount"], 1, "reconciled, not re-sent");
    let written = w.fixture.generic_writes();
    assert_eq!(written.len(), 2);
    assert_eq!(e["externalReference"], json!(written[1].id));
    assert_eq!(e["providerIdempotencyKey"], json!(written[1].key));
    assert_eq!(w.fixture.write_count(), 2);
}

#[tokio::test]
async fn a_crash_after_sending_is_reconciled_through_the_lookup_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture().await;
    let mut server = Server::start_with_env(
        &dir.path().join("data"),
        &["--allow-insecure-destinations"],
        &[("STEWARD_CRASH_AT", "server_after_send")],
    );
    let operator = Api::new(&server, &server.keys("test", "operator"));
    refund_action(&operator, &fixture.base_url(), "refund").await;
    generic_action(&operator, &fixture.base_url(), "orders").await;
    let op = operator.clone();
    let call = tokio::spawn(async move { op.invoke("orders", order(7), Some("op-7"), None).await });
    let exited = server.wait_exit(Duration::from_secs(20)).await;
    assert!(
        exited.is_some_and(|s| !s.success()),
        "aborted at its crash point"
    );
    drop(call);
    assert_eq!(fixture.write_count(), 1, "the provider has the write");

    server.restart();
    let operator = Api::new(&server, &server.keys("test", "operator"));
    let again = operator
        .invoke("orders", order(7), Some("op-7"), None)
        .await;
    assert_eq!(again.data()["status"], "unknown", "{:?}", again.body);
    let id = again.data()["effectId"].as_str().unwrap().to_string();
    let reconciled = operator
        .call(
            "POST",
            &format!("/actions/effects/{id}/reconcile"),
            None,
            None,
        )
        .await;
    assert_eq!(reconciled.status, 200, "{:?}", reconciled.body);
    assert_eq!(
        reconciled.data()["outcome"],
        "succeeded",
        "{:?}",
        reconciled.body
    );
    assert_eq!(fixture.write_count(), 1, "exactly one provider write");
}

#[tokio::test]
async fn a_replay_under_the_same_provider_key_writes_nothing_new() {
    let w = world(&[]).await;
    generic_action(&w.operator, &w.fixture.base_url(), "orders").await;
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
    let lost = w
        .agent
        .invoke("orders", order(3), Some("order-3"), None)
        .await;
    assert_eq!(lost.data()["status"], "unknown", "{:?}", lost.body);
    assert_eq!(w.fixture.write_count(), 1);
    let id = lost.data()["effectId"].as_str().unwrap().to_string();

    // The operator (not the invoking agent) replays it: the same key, the provider's saved
    // answer, no second write.
    let replayed = w
        .operator
        .call("POST", &format!("/actions/effects/{id}/replay"), None, None)
        .await;
    assert_eq!(replayed.status, 200, "{:?}", replayed.body);
    assert_eq!(
        replayed.data()["outcome"],
        "succeeded",
        "{:?}",
        replayed.body
    );
    assert_eq!(replayed.data()["attemptCount"], 2);
    assert_eq!(w.fixture.write_count(), 1, "the replay wrote nothing new");
}
