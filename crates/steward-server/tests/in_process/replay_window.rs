//! A replay is allowed only inside the provider's idempotency window: after it, the same key
//! could create a second refund, so Steward refuses and says so.

use crate::harness::{call, world, SECOND_TOKEN, TOKEN};
use serde_json::json;
use std::time::Duration;
use steward_fixture::{FaultMode, FaultPlan};

#[tokio::test]
async fn a_replay_after_the_providers_idempotency_window_is_refused() {
    let w = world(Duration::from_millis(500), None).await;
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
    let (_, inv) = call(
        &w.state,
        TOKEN,
        "POST",
        "/actions/adapter/invoke",
        Some(json!({"input": {"paymentIntent": "pi_1", "amount": 5}})),
    )
    .await;
    assert_eq!(inv["data"]["status"], "unknown", "{inv}");
    let effect = inv["data"]["effectId"].as_str().unwrap().to_string();

    // 23 hours later: inside Stripe's 24 h window, but within the safety margin of its end.
    w.clock.advance(Duration::from_secs(23 * 3600 + 60));
    let (status, refused) = call(
        &w.state,
        SECOND_TOKEN,
        "POST",
        &format!("/actions/effects/{effect}/replay"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "replay_window_closed");
    assert_eq!(w.fixture.write_count(), 1, "no second refund");
    let (_, e) = call(
        &w.state,
        TOKEN,
        "GET",
        &format!("/actions/effects/{effect}"),
        None,
    )
    .await;
    assert_eq!(
        e["data"]["outcome"], "unknown",
        "still unknown, still visible"
    );
    assert_eq!(e["data"]["attemptCount"], 1);
}
