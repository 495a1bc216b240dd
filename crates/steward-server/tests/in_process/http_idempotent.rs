//! The `http.idempotent` adapter against the fixture's generic provider (`/generic/writes`,
//! deduplicated by `X-Idempotency-Key`, looked up by key): one write per operation key, an
//! `unknown` reconciled through the lookup, and a replay under the same key inside the
//! configured window that writes nothing new, refused once the window closes. Every count is
//! the fixture's count of committed writes.

use crate::harness::{call, world, World, SECOND_TOKEN, TOKEN};
use serde_json::{json, Value};
use std::time::Duration;
use steward_fixture::{FaultMode, FaultPlan};

/// Two hours: the shortest window the adapter accepts, so that the margin matters.
const WINDOW_S: i64 = 7200;

/// A world with an `orders` action on the generic provider.
async fn generic_world() -> World {
    let w = world(Duration::from_millis(500), None).await;
    let base = w.fixture.base_url();
    w.ok(
        "PUT",
        "/secrets/PROVIDER_KEY",
        json!({"value": "sk_test_generic"}),
    )
    .await;
    let adapter = json!({
        "type": "http.idempotent",
        "credentialSecret": "PROVIDER_KEY",
        "config": {
            "url": format!("{base}/generic/writes"),
            "body": {"order": "{{input.order}}", "amount": "{{input.amount}}"},
            "idempotencyHeader": "X-Idempotency-Key",
            "keyTemplate": "orders-{{effectId}}",
            "lookup": {
                "url": format!("{base}/generic/writes/{{{{key}}}}"),
                "match": [
                    {"path": "key", "equals": "{{key}}"},
                    {"path": "status", "equals": "succeeded"}
                ]
            },
            "referencePath": "id",
            "replayWindowSeconds": WINDOW_S
        }
    });
    w.ok(
        "POST",
        "/actions",
        json!({"name": "orders", "adapter": adapter}),
    )
    .await;
    w
}

async fn invoke(w: &World, operation_key: &str) -> Value {
    let (status, inv) = call(
        &w.state,
        TOKEN,
        "POST",
        "/actions/orders/invoke",
        Some(json!({"input": {"order": "o-1", "amount": 5}, "operationKey": operation_key})),
    )
    .await;
    assert!(status == 200, "{status} {inv}");
    inv["data"].clone()
}

async fn effect(w: &World, id: &str) -> Value {
    let (status, e) = call(
        &w.state,
        TOKEN,
        "GET",
        &format!("/actions/effects/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{e}");
    e["data"].clone()
}

#[tokio::test]
async fn an_action_on_http_idempotent_writes_once_per_operation_key() {
    let w = generic_world().await;
    let first = invoke(&w, "order-o-1").await;
    assert_eq!(first["status"], "succeeded", "{first}");
    for _ in 0..3 {
        let again = invoke(&w, "order-o-1").await;
        assert_eq!(again["id"], first["id"], "the same invocation");
    }
    assert_eq!(
        w.fixture.write_count(),
        1,
        "one write for one operation key"
    );

    let e = effect(&w, first["effectId"].as_str().unwrap()).await;
    assert_eq!(
        e["grade"], "confirmed",
        "the answer passed the match rules: {e}"
    );
    let written = w.fixture.generic_writes();
    assert_eq!(written.len(), 1);
    // The key the provider deduplicated by is the effect's, made from the key template, and
    // it travelled in the configured header (the fixture refuses a request without it).
    assert_eq!(e["providerIdempotencyKey"], json!(written[0].key));
    assert!(
        written[0].key.starts_with("orders-eff_"),
        "{}",
        written[0].key
    );
    assert_eq!(e["externalReference"], json!(written[0].id));
    assert_eq!(written[0].body, json!({"order": "o-1", "amount": 5}));

    let other = invoke(&w, "order-o-2").await;
    assert_eq!(other["status"], "succeeded");
    assert_eq!(
        w.fixture.write_count(),
        2,
        "a second operation key writes once more"
    );
}

#[tokio::test]
async fn an_unknown_write_is_reconciled_through_the_lookup_by_key() {
    let w = generic_world().await;
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
    let inv = invoke(&w, "order-dropped").await;
    assert_eq!(inv["status"], "unknown", "the answer was lost: {inv}");
    assert_eq!(w.fixture.write_count(), 1, "the write committed");
    let id = inv["effectId"].as_str().unwrap();

    let (status, reconciled) = call(
        &w.state,
        TOKEN,
        "POST",
        &format!("/actions/effects/{id}/reconcile"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{reconciled}");
    let e = &reconciled["data"];
    assert_eq!(e["outcome"], "succeeded", "{e}");
    assert_eq!(e["grade"], "confirmed", "{e}");
    assert_eq!(e["attemptCount"], 1, "nothing was sent again");
    assert_eq!(
        e["externalReference"],
        json!(w.fixture.generic_writes()[0].id)
    );
    assert_eq!(w.fixture.write_count(), 1, "a reconcile writes nothing");
}

#[tokio::test]
async fn an_unknown_write_that_never_landed_is_reconciled_failed() {
    let w = generic_world().await;
    // The fixture answers 500 before committing anything: for a provider that says nothing
    // more, a 500 is `unknown`.
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::ErrorBeforeCommit));
    let inv = invoke(&w, "order-not-written").await;
    assert_eq!(inv["status"], "unknown", "a 500 proves nothing: {inv}");
    assert_eq!(w.fixture.write_count(), 0);
    // Past the attempt's deadline (grace is zero here) "not found" is conclusive.
    w.clock.advance(Duration::from_secs(2));
    let id = inv["effectId"].as_str().unwrap();
    let (status, reconciled) = call(
        &w.state,
        TOKEN,
        "POST",
        &format!("/actions/effects/{id}/reconcile"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{reconciled}");
    assert_eq!(reconciled["data"]["outcome"], "failed", "{reconciled}");
    assert_eq!(w.fixture.write_count(), 0);
}

#[tokio::test]
async fn a_replay_under_the_same_key_inside_the_window_writes_nothing_new() {
    let w = generic_world().await;
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
    let inv = invoke(&w, "order-replayed").await;
    assert_eq!(inv["status"], "unknown", "{inv}");
    assert_eq!(w.fixture.write_count(), 1);
    let id = inv["effectId"].as_str().unwrap().to_string();

    // Half an hour on: well inside the configured two hours, outside its last hour.
    w.clock.advance(Duration::from_secs(1800));
    let (status, replayed) = call(
        &w.state,
        SECOND_TOKEN,
        "POST",
        &format!("/actions/effects/{id}/replay"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{replayed}");
    let e = &replayed["data"];
    assert_eq!(
        e["outcome"], "succeeded",
        "the provider answered its saved write: {e}"
    );
    assert_eq!(e["attemptCount"], 2, "a second attempt of the same effect");
    assert_eq!(
        w.fixture.write_count(),
        1,
        "the replay under the same provider key wrote nothing new"
    );
}

#[tokio::test]
async fn a_replay_once_the_configured_window_closes_is_refused() {
    let w = generic_world().await;
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
    let inv = invoke(&w, "order-too-late").await;
    assert_eq!(inv["status"], "unknown", "{inv}");
    let id = inv["effectId"].as_str().unwrap().to_string();

    // One hour and a minute on: inside the provider's two hours, but within the last hour of
    // them, where a replay could land after the provider forgot the key. Stripe's 24 h would
    // still allow it; this action's window does not.
    w.clock.advance(Duration::from_secs(3600 + 60));
    let (status, refused) = call(
        &w.state,
        SECOND_TOKEN,
        "POST",
        &format!("/actions/effects/{id}/replay"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "replay_window_closed");
    assert_eq!(w.fixture.write_count(), 1, "nothing was sent");
    let e = effect(&w, &id).await;
    assert_eq!(e["outcome"], "unknown", "still unknown, still visible");
    assert_eq!(e["attemptCount"], 1);
}

#[tokio::test]
async fn a_config_that_breaks_the_adapters_rules_is_refused_naming_the_field() {
    let w = generic_world().await;
    let (status, refused) = call(
        &w.state,
        TOKEN,
        "POST",
        "/actions",
        Some(json!({"name": "broken", "adapter": {
            "type": "http.idempotent",
            "credentialSecret": "PROVIDER_KEY",
            "config": {
                "url": "https://provider.example/writes",
                "idempotencyHeader": "X-Idempotency-Key",
                "lookup": {"url": "https://provider.example/writes/{{key}}"},
                "replayWindowSeconds": 60
            }
        }})),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["error"]["details"]["field"],
        "adapter.config.replayWindowSeconds"
    );
}
