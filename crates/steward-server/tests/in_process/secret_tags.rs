//! A secret put is fingerprinted by a keyed tag of its value, not the value. The tag changed
//! (`Vault::tag` is now a versioned HMAC); a request recorded under its `Idempotency-Key` with
//! the earlier tag must still be recognised: a resend replays it, another value is refused.

use crate::harness::{world, TOKEN};
use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};
use std::time::Duration;
use steward_core::{fingerprint, EnvironmentId, IdempotencyKey, KeyId};
use steward_server::app;
use steward_store::{Catalog, Idempotency};
use tower::ServiceExt;

async fn put(state: &steward_server::AppState, value: &str, key: &str) -> (u16, bool, Value) {
    let request = Request::builder()
        .method("PUT")
        .uri("/api/v2/secrets/TAGGED")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(json!({ "value": value }).to_string()))
        .unwrap();
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, replayed, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_secret_put_recorded_with_the_earlier_tag_still_replays() {
    let w = world(Duration::from_secs(5), None).await;
    let (env, sender) = (EnvironmentId::from_unique("test"), KeyId::from_unique("k0"));
    let key = IdempotencyKey::parse("put-before-upgrade").unwrap();
    let value = "sk_test_tagged_value";
    let [current, earlier] = w.state.vault.tags(value);
    assert!(current.starts_with("v2:") && !earlier.starts_with("v2:"));
    // What an earlier Steward recorded for this put.
    let recorded = json!({"op": "secret.put", "name": "TAGGED", "body": {"value": earlier}});
    let answer = json!({"success": true, "data": {"name": "TAGGED", "recordedBy": "earlier"}});
    let now = w.state.clock.now();
    w.store
        .idempotency_begin(
            &env,
            &sender,
            &key,
            &fingerprint(&recorded),
            now,
            &w.state.replica,
        )
        .await
        .unwrap();
    w.store
        .idempotency_finish(&env, &sender, &key, 200, &answer, now)
        .await
        .unwrap();

    let (status, replayed, body) = put(&w.state, value, key.as_str()).await;
    assert_eq!((status, replayed), (200, true), "{body}");
    assert_eq!(body, answer, "the recorded answer, not a second put");
    assert!(w.store.secret(&env, "TAGGED").await.unwrap().is_none());

    let (status, _, body) = put(&w.state, "another_value", key.as_str()).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "idempotency_key_reused");

    // A new put is recorded with the current tag, and replays as such.
    let (status, replayed, _) = put(&w.state, value, "put-after-upgrade").await;
    assert_eq!((status, replayed), (200, false));
    let (status, replayed, _) = put(&w.state, value, "put-after-upgrade").await;
    assert_eq!((status, replayed), (200, true));
}
