//! Each fault mode: what the client sees and what was written.

use std::time::{Duration, Instant};

use serde_json::json;
use steward_fixture::{FaultMode, FaultPlan};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

#[tokio::test]
async fn drop_after_commit_closes_without_response_but_commits_once() {
    let fx = start().await;
    arm(&fx, json!({"mode": "drop_after_commit"})).await;
    let started = Instant::now();
    let err = post_form(&fx, BASIC, Some("key-drop"))
        .await
        .expect_err("client must see a transport error, not a response");
    assert!(!err.is_timeout(), "{err}");
    assert!(err.status().is_none(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(fx.write_count(), 1);

    // Resending with the same key replays the committed refund.
    let resend = post_form(&fx, BASIC, Some("key-drop")).await.unwrap();
    assert_eq!(resend.status(), 200);
    assert!(replayed(&resend));
    assert_eq!(body(resend).await["id"], fx.refunds()[0].id.as_str());
    assert_eq!(fx.write_count(), 1);
}

#[tokio::test]
async fn drop_after_commit_writes_zero_response_bytes() {
    let fx = start().await;
    fx.set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
    let mut sock = tokio::net::TcpStream::connect(fx.addr()).await.unwrap();
    let request = format!(
        "POST /v1/refunds HTTP/1.1\r\nHost: fixture\r\nAuthorization: Bearer {API_KEY}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{BASIC}",
        BASIC.len()
    );
    sock.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), sock.read_to_end(&mut received))
        .await
        .expect("the fixture closes the connection");
    // EOF or reset, but never a byte of HTTP response.
    if read.is_ok() {
        assert!(
            received.is_empty(),
            "got {:?}",
            String::from_utf8_lossy(&received)
        );
    }
    assert_eq!(fx.write_count(), 1);
}

#[tokio::test]
async fn error_after_commit_is_an_ambiguous_500_and_resend_replays() {
    let fx = start().await;
    arm(&fx, json!({"mode": "error_after_commit"})).await;
    let resp = post_form(&fx, BASIC, Some("key-eac")).await.unwrap();
    assert_eq!(resp.status(), 500);
    assert!(resp.headers().get("stripe-should-retry").is_none());
    assert_eq!(body(resp).await["error"]["type"], "api_error");
    assert_eq!(fx.write_count(), 1);
    let committed = fx.refunds()[0].id.clone();

    let resend = post_form(&fx, BASIC, Some("key-eac")).await.unwrap();
    assert_eq!(resend.status(), 200);
    assert!(replayed(&resend));
    assert_eq!(body(resend).await["id"], committed.as_str());
    assert_eq!(fx.write_count(), 1);
}

#[tokio::test]
async fn error_before_commit_says_retry_and_commits_nothing() {
    let fx = start().await;
    arm(&fx, json!({"mode": "error_before_commit"})).await;
    let resp = post_form(&fx, BASIC, Some("key-ebc")).await.unwrap();
    assert_eq!(resp.status(), 500);
    assert_eq!(resp.headers()["stripe-should-retry"], "true");
    assert_eq!(body(resp).await["error"]["type"], "api_error");
    assert_eq!(fx.write_count(), 0);

    // The key was not saved: the retry really executes (once).
    let retry = post_form(&fx, BASIC, Some("key-ebc")).await.unwrap();
    assert_eq!(retry.status(), 200);
    assert!(!replayed(&retry));
    assert_eq!(fx.write_count(), 1);

    // Without the header when asked.
    arm(
        &fx,
        json!({"mode": "error_before_commit", "should_retry_header": false}),
    )
    .await;
    let resp = post_form(&fx, BASIC, None).await.unwrap();
    assert_eq!(resp.status(), 500);
    assert!(resp.headers().get("stripe-should-retry").is_none());
    assert_eq!(fx.write_count(), 1);
}

#[tokio::test]
async fn reject_is_a_definitive_402_saved_under_the_key() {
    let fx = start().await;
    arm(&fx, json!({"mode": "reject"})).await;
    let resp = post_form(&fx, BASIC, Some("key-rej")).await.unwrap();
    assert_eq!(resp.status(), 402);
    let e = body(resp).await;
    assert_eq!(e["error"]["type"], "card_error");
    assert_eq!(e["error"]["code"], "charge_already_refunded");
    assert_eq!(fx.write_count(), 0);

    let resend = post_form(&fx, BASIC, Some("key-rej")).await.unwrap();
    assert_eq!(resend.status(), 402);
    assert!(replayed(&resend));
    assert_eq!(body(resend).await, e);
    assert_eq!(fx.write_count(), 0);
}

#[tokio::test]
async fn hold_after_commit_delays_a_normal_200() {
    let fx = start().await;
    arm(&fx, json!({"mode": "hold_after_commit", "ms": 250})).await;
    let started = Instant::now();
    let resp = post_form(&fx, BASIC, None).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(resp.status(), 200);
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert_eq!(body(resp).await["id"], fx.refunds()[0].id.as_str());
    assert_eq!(fx.write_count(), 1);

    // Consumed: the next write is immediate.
    let started = Instant::now();
    post_form(&fx, BASIC, None).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(250));
}

#[tokio::test]
async fn fault_applies_to_count_writes_then_back_to_none() {
    let fx = start().await;
    arm(&fx, json!({"mode": "error_before_commit", "count": 2})).await;
    // Rejected requests and replays do not consume the fault.
    let invalid = post_form(&fx, "payment_intent=pi_1", None).await.unwrap();
    assert_eq!(invalid.status(), 400);

    let statuses = [
        post_form(&fx, BASIC, None).await.unwrap().status(),
        post_form(&fx, BASIC, None).await.unwrap().status(),
        post_form(&fx, BASIC, None).await.unwrap().status(),
    ];
    assert_eq!(statuses, [500, 500, 200]);
    assert_eq!(fx.write_count(), 1);

    let status = body(
        client()
            .get(format!("{}/_fixture/faults", fx.base_url()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status["mode"], "none");
}

#[tokio::test]
async fn replays_do_not_consume_the_fault() {
    let fx = start().await;
    let first = body(post_form(&fx, BASIC, Some("key-r")).await.unwrap()).await;
    fx.set_faults(FaultPlan::new(FaultMode::Reject));
    let replay = post_form(&fx, BASIC, Some("key-r")).await.unwrap();
    assert_eq!(replay.status(), 200);
    assert_eq!(body(replay).await["id"], first["id"]);
    let next = post_form(&fx, BASIC, None).await.unwrap();
    assert_eq!(next.status(), 402, "the armed fault must still apply");
    assert_eq!(fx.write_count(), 1);
}

#[tokio::test]
async fn bad_fault_plans_are_refused() {
    let fx = start().await;
    let resp = client()
        .post(format!("{}/_fixture/faults", fx.base_url()))
        .body(r#"{"mode": "explode"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(body(resp).await["error"]["type"], "invalid_request_error");
    let ok = post_form(&fx, BASIC, None).await.unwrap();
    assert_eq!(ok.status(), 200);
}
