//! Shadow (log-only) policies: a policy saved with `mode: "shadow"` is evaluated on live
//! traffic, and its would-be decision is recorded on each call it matches and counted in
//! `/metrics`, without affecting the call: a call it "would park" runs at once, once.

use crate::harness::*;
use serde_json::json;

const METRICS_TOKEN: &str = "metrics-token-for-the-shadow-tests";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shadow_policy_records_would_require_approval_and_changes_nothing() {
    let w = world(&["--metrics-token", METRICS_TOKEN]).await;
    let created = w
        .operator
        .post(
            "/approval-policies",
            json!({"name": "large refunds (trial)", "matchKind": "action",
                   "matchActionName": "refund", "condition": "input.amount >= 5000",
                   "effect": "require_approval", "requiredApprovals": 2, "mode": "shadow"}),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(created.data()["mode"], "shadow");
    let policy = created.data()["id"].as_str().unwrap().to_string();
    let bad = w
        .operator
        .post(
            "/approval-policies",
            json!({"name": "typo", "matchKind": "any", "effect": "require_approval", "mode": "dry"}),
        )
        .await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    assert_eq!(bad.body["error"]["details"]["field"], "mode");

    // A call the policy matches runs at once (200, not 202), one provider write, and carries
    // what the policy would have decided.
    let matched = w
        .agent
        .invoke(
            "refund",
            json!({"paymentIntent": "pi_big", "amount": 6000}),
            Some("big-1"),
            None,
        )
        .await;
    assert_eq!(matched.status, 200, "{:?}", matched.body);
    assert_eq!(matched.data()["status"], "succeeded");
    assert!(matched.data()["approvalId"].is_null());
    assert!(
        matched.data()["decision"].is_null(),
        "a shadow policy decides nothing"
    );
    let shadow = &matched.data()["shadowDecisions"];
    assert_eq!(shadow.as_array().map(Vec::len), Some(1), "{shadow}");
    assert_eq!(shadow[0]["policyId"], policy.as_str());
    assert_eq!(shadow[0]["decision"], "require_approval");
    assert_eq!(shadow[0]["requiredApprovals"], 2);
    assert_eq!(shadow[0]["version"], 1);
    assert_eq!(w.fixture.write_count(), 1);
    // Read again, the invocation says the same.
    let id = matched.data()["id"].as_str().unwrap();
    let read = w.agent.get(&format!("/actions/invocations/{id}")).await;
    assert_eq!(read.data()["shadowDecisions"], *shadow);

    // A call it does not match carries nothing.
    let small = w
        .agent
        .invoke(
            "refund",
            json!({"paymentIntent": "pi_small", "amount": 10}),
            Some("small-1"),
            None,
        )
        .await;
    assert_eq!(small.status, 200, "{:?}", small.body);
    assert!(
        small.data().get("shadowDecisions").is_none(),
        "{:?}",
        small.body
    );
    assert_eq!(w.fixture.write_count(), 2);

    let scrape = reqwest::Client::new()
        .get(format!("{}/metrics", w.server.url))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!(
        "steward_shadow_policy_decisions_total{{policy=\"{policy}\",decision=\"require_approval\"}} 1"
    );
    assert!(scrape.contains(&series), "{series} in\n{scrape}");
}
