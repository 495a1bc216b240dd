//! Stripe-style `Idempotency-Key` semantics.

use std::time::Duration;

use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn same_key_same_params_replays_without_a_second_write() {
    let fx = start().await;
    let first = post_form(&fx, BASIC, Some("key-1")).await.unwrap();
    assert_eq!(first.status(), 200);
    assert!(!replayed(&first));
    let first = body(first).await;

    let second = post_form(&fx, BASIC, Some("key-1")).await.unwrap();
    assert_eq!(second.status(), 200);
    assert!(
        replayed(&second),
        "replay must say Idempotent-Replayed: true"
    );
    assert_eq!(body(second).await, first);
    assert_eq!(fx.write_count(), 1);

    // The same parameters sent as JSON are the same request.
    let as_json = post_json(
        &fx,
        &json!({"payment_intent": "pi_basic", "amount": 500}),
        Some("key-1"),
    )
    .await;
    assert!(replayed(&as_json));
    assert_eq!(body(as_json).await["id"], first["id"]);

    // A different key is a different refund.
    let other = body(post_form(&fx, BASIC, Some("key-2")).await.unwrap()).await;
    assert_ne!(other["id"], first["id"]);
    assert_eq!(fx.write_count(), 2);
}

#[tokio::test]
async fn same_key_different_params_is_an_idempotency_error() {
    let fx = start().await;
    post_form(&fx, BASIC, Some("key-x")).await.unwrap();
    let resp = post_form(&fx, "payment_intent=pi_basic&amount=501", Some("key-x"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(!replayed(&resp));
    let e = body(resp).await;
    assert_eq!(e["error"]["type"], "idempotency_error");
    assert_eq!(fx.write_count(), 1);
}

#[tokio::test]
async fn same_key_while_first_is_in_flight_is_409() {
    let fx = start().await;
    fx.set_faults(
        steward_fixture::FaultPlan::new(steward_fixture::FaultMode::HoldAfterCommit).hold_ms(300),
    );
    let base = fx.base_url();
    let first = tokio::spawn(async move {
        let resp = client()
            .post(format!("{base}/v1/refunds"))
            .header("authorization", format!("Bearer {API_KEY}"))
            .header("idempotency-key", "key-hold")
            .body(BASIC)
            .send()
            .await
            .unwrap();
        (
            resp.status(),
            resp.json::<serde_json::Value>().await.unwrap(),
        )
    });
    // Wait until the first request has committed and is holding.
    for _ in 0..100 {
        if fx.write_count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(fx.write_count(), 1);

    let second = post_form(&fx, BASIC, Some("key-hold")).await.unwrap();
    assert_eq!(second.status(), 409);
    let e = body(second).await;
    assert_eq!(e["error"]["type"], "idempotency_error");
    assert_eq!(e["error"]["code"], "idempotency_key_in_use");

    let (status, first_body) = first.await.unwrap();
    assert_eq!(status, 200);

    // Once the first is done, the key replays it.
    let third = post_form(&fx, BASIC, Some("key-hold")).await.unwrap();
    assert!(replayed(&third));
    assert_eq!(body(third).await["id"], first_body["id"]);
    assert_eq!(fx.write_count(), 1);
}

#[tokio::test]
async fn validation_errors_are_saved_under_the_key() {
    let fx = start().await;
    let first = post_form(&fx, "payment_intent=pi_v", Some("key-v"))
        .await
        .unwrap();
    assert_eq!(first.status(), 400);
    assert!(!replayed(&first));
    let first = body(first).await;
    let second = post_form(&fx, "payment_intent=pi_v", Some("key-v"))
        .await
        .unwrap();
    assert_eq!(second.status(), 400);
    assert!(replayed(&second));
    assert_eq!(body(second).await, first);
    // Fixing the parameters under the same key is a parameter mismatch.
    let fixed = post_form(&fx, "payment_intent=pi_v&amount=5", Some("key-v"))
        .await
        .unwrap();
    assert_eq!(body(fixed).await["error"]["type"], "idempotency_error");
    assert_eq!(fx.write_count(), 0);
}
