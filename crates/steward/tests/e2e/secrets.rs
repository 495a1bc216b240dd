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

/// Every encoded form of `secret` a provider might echo back (see `steward_core::redact`).
fn echoed_forms(secret: &str) -> Vec<String> {
    let json = serde_json::to_string(secret).unwrap();
    let upper: String = secret
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let lower = upper.to_lowercase();
    let form = upper.replace("%20", "+");
    vec![
        secret.to_string(),
        json.trim_matches('"').to_string(),
        upper,
        lower,
        form,
    ]
}

#[tokio::test]
async fn a_secret_echoed_json_escaped_or_percent_encoded_is_redacted_everywhere() {
    let w = world(&[]).await;
    // Every character that an encoder changes: `"` and `\` (JSON), `+ / =` and a space (URLs).
    let secret = r#"ech"o\tok+en/val=ue x9Q"#;
    let put = w
        .operator
        .call(
            "PUT",
            "/secrets/ECHO_TOKEN",
            Some(json!({"value": secret, "allowedHosts": [host_port(&w.fixture.base_url())]})),
            None,
        )
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    // The fixture echoes refund metadata in its JSON answer (JSON-escaped on the wire) ...
    let in_body = w
        .operator
        .post(
            "/actions",
            json!({
                "name": "echo-json",
                "method": "POST",
                "urlTemplate": format!("{}/v1/refunds", w.fixture.base_url()),
                "headers": {"Authorization": "Bearer {{secret:STRIPE_TEST_KEY}}"},
                "bodyTemplate": {"payment_intent": "{{input.pi}}", "amount": 5,
                                 "metadata": {"echo": "{{secret:ECHO_TOKEN}}"}}
            }),
        )
        .await;
    assert_eq!(in_body.status, 201, "{:?}", in_body.body);
    // ... and an unknown path, percent-encoded as it was sent, in its 404 message.
    let in_url = w
        .operator
        .post(
            "/actions",
            json!({
                "name": "echo-url",
                "method": "POST",
                "urlTemplate": format!("{}/v1/echo/{{{{secret:ECHO_TOKEN}}}}", w.fixture.base_url()),
                "bodyTemplate": {"a": 1}
            }),
        )
        .await;
    assert_eq!(in_url.status, 201, "{:?}", in_url.body);

    let json_echo = w
        .agent
        .invoke("echo-json", json!({"pi": "pi_echo"}), None, None)
        .await;
    assert_eq!(
        json_echo.data()["status"],
        "succeeded",
        "{:?}",
        json_echo.body
    );
    assert_eq!(
        json_echo.data()["body"]["metadata"]["echo"],
        "[REDACTED]",
        "{:?}",
        json_echo.body
    );
    let url_echo = w.agent.invoke("echo-url", json!({}), None, None).await;
    assert_eq!(url_echo.data()["status"], "failed", "{:?}", url_echo.body);
    assert_eq!(url_echo.data()["responseStatus"], 404);
    let message = url_echo.data()["body"]["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{:?}", url_echo.body));
    assert!(
        message.contains("/v1/echo/[REDACTED]"),
        "the 404 quoted the path: {message}"
    );

    // Read everything back, as the operator and the agent.
    for reply in [&json_echo, &url_echo] {
        let id = reply.data()["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{:?}", reply.body));
        w.agent.get(&format!("/actions/invocations/{id}")).await;
        if let Some(effect) = reply.data()["effectId"].as_str() {
            w.operator.get(&format!("/actions/effects/{effect}")).await;
        }
    }
    w.operator.get("/actions/effects").await;
    w.operator.get("/actions/invocations").await;
    let mut bodies = w.operator.seen.lock().unwrap().clone();
    bodies.extend(w.agent.seen.lock().unwrap().iter().cloned());
    let log = w.server.log();
    for form in echoed_forms(secret) {
        for body in &bodies {
            assert!(!body.contains(&form), "a response leaked {form}: {body}");
        }
        assert!(!log.contains(&form), "the server log leaked {form}");
    }
    // Nor is any form stored in clear: every file of the data directory (the database, its
    // journal, the audit chain).
    let mut files = vec![w.server.data.clone()];
    let mut scanned = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let bytes = std::fs::read(&path).unwrap_or_default();
        scanned += 1;
        for form in echoed_forms(secret) {
            assert!(
                !bytes.windows(form.len()).any(|w| w == form.as_bytes()),
                "{} holds {form} in clear",
                path.display()
            );
        }
    }
    assert!(scanned > 0);
}
