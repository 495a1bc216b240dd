//! Credentials stay inside: no response body and no log line carries a secret value.

use crate::harness::*;
use serde_json::json;
use steward_fixture::{FaultMode, FaultPlan};

#[tokio::test]
async fn no_response_or_log_line_contains_a_secret_value() {
    let w = world(&[]).await;
    let template_secret = "tmpl-SECRET-9f8e7d6c5b4a";
    let put = w
        .operator
        .call(
            "PUT",
            "/secrets/API_TOKEN",
            Some(
                json!({"value": template_secret, "allowedHosts": [host_port(&w.fixture.base_url())]}),
            ),
            None,
        )
        .await;
    assert_eq!(put.status, 200);
    // A template action whose provider echoes the secret back in the query string and body.
    let echo = w
        .operator
        .post(
            "/actions",
            json!({
                "name": "echo",
                "method": "POST",
                "urlTemplate": format!("{}/v1/refunds?token={{{{secret:API_TOKEN}}}}", w.fixture.base_url()),
                "headers": {"Authorization": "Bearer {{secret:STRIPE_TEST_KEY}}", "X-Token": "{{secret:API_TOKEN}}"},
                "bodyTemplate": {"payment_intent": "{{input.pi}}", "amount": "{{input.amount}}", "metadata": {"echo": "{{secret:API_TOKEN}}"}}
            }),
        )
        .await;
    assert_eq!(echo.status, 201, "{:?}", echo.body);
    for n in 0..3 {
        w.agent.invoke("refund", refund_input(n), None, None).await;
    }
    let echoed = w
        .agent
        .invoke("echo", json!({"pi": "pi_echo", "amount": 5}), None, None)
        .await;
    assert_eq!(echoed.data()["status"], "succeeded", "{:?}", echoed.body);
    assert!(
        echoed.body.to_string().contains("[REDACTED]"),
        "the echoed value is scrubbed: {}",
        echoed.body
    );
    w.fixture.set_faults(FaultPlan::new(FaultMode::Reject));
    w.agent.invoke("refund", refund_input(9), None, None).await;
    let missing = w
        .operator
        .call(
            "PUT",
            "/secrets/STRIPE_TEST_KEY",
            Some(json!({"value": ""})),
            None,
        )
        .await;
    assert_eq!(missing.status, 400);
    // Read everything back.
    for path in [
        "/secrets",
        "/secrets/STRIPE_TEST_KEY",
        "/actions",
        "/actions/invocations",
        "/actions/effects",
    ] {
        w.operator.get(path).await;
    }
    let effects = w.operator.get("/actions/effects").await;
    for effect in effects.data().as_array().unwrap() {
        w.operator
            .get(&format!(
                "/actions/effects/{}",
                effect["id"].as_str().unwrap()
            ))
            .await;
    }
    let invocations = w.operator.get("/actions/invocations").await;
    for inv in invocations.data().as_array().unwrap() {
        w.operator
            .get(&format!(
                "/actions/invocations/{}",
                inv["id"].as_str().unwrap()
            ))
            .await;
    }
    let mut bodies = w.operator.seen.lock().unwrap().clone();
    bodies.extend(w.agent.seen.lock().unwrap().iter().cloned());
    assert!(bodies.len() > 15);
    for secret in [STRIPE_SECRET, template_secret] {
        for body in &bodies {
            assert!(!body.contains(secret), "a response leaked a secret: {body}");
        }
        assert!(
            !w.server.log().contains(secret),
            "the server log leaked a secret"
        );
    }
    assert!(w.server.log().contains("request"), "the log was captured");
}
