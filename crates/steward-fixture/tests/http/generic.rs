//! The generic idempotent endpoint: one write per `X-Idempotency-Key`, a lookup by key, and the
//! same faults as refunds.

use serde_json::{json, Value};

use crate::common::*;

async fn write(
    fx: &steward_fixture::FixtureHandle,
    body: &Value,
    key: Option<&str>,
) -> reqwest::Response {
    let mut request = client()
        .post(format!("{}/generic/writes", fx.base_url()))
        .bearer_auth(API_KEY)
        .json(body);
    if let Some(key) = key {
        request = request.header("X-Idempotency-Key", key);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn one_key_writes_once_and_is_found_by_its_key() {
    let fx = start().await;
    let first = write(&fx, &json!({"order": "o-1"}), Some("k-1")).await;
    assert_eq!(first.status(), 200);
    let first = body(first).await;
    assert_eq!(first["key"], "k-1");
    assert_eq!(first["status"], "succeeded");

    let again = write(&fx, &json!({"order": "o-1"}), Some("k-1")).await;
    assert!(replayed(&again), "the same key and body replay");
    assert_eq!(body(again).await["id"], first["id"]);
    assert_eq!(fx.write_count(), 1);

    let other_body = write(&fx, &json!({"order": "o-2"}), Some("k-1")).await;
    assert_eq!(other_body.status(), 422);
    let unkeyed = write(&fx, &json!({"order": "o-1"}), None).await;
    assert_eq!(
        unkeyed.status(),
        400,
        "this provider deduplicates everything"
    );
    assert_eq!(fx.write_count(), 1);

    let found = get(&fx, "/generic/writes/k-1").await;
    assert_eq!(found.status(), 200);
    assert_eq!(body(found).await["id"], first["id"]);
    assert_eq!(get(&fx, "/generic/writes/k-2").await.status(), 404);
}

#[tokio::test]
async fn a_dropped_answer_is_committed_and_replayed_under_its_key() {
    let fx = start().await;
    arm(&fx, json!({"mode": "drop_after_commit"})).await;
    let dropped = client()
        .post(format!("{}/generic/writes", fx.base_url()))
        .bearer_auth(API_KEY)
        .header("X-Idempotency-Key", "k-drop")
        .json(&json!({"order": "o-1"}))
        .send()
        .await;
    assert!(dropped.is_err(), "no answer: {dropped:?}");
    assert_eq!(fx.write_count(), 1, "but the write committed");
    let replay = write(&fx, &json!({"order": "o-1"}), Some("k-drop")).await;
    assert!(replayed(&replay));
    assert_eq!(fx.write_count(), 1);
    assert_eq!(fx.generic_writes()[0].key, "k-drop");
}
