//! Honest outcomes: every fixture fault maps to the right status and grade, and the fixture's
//! write count proves nothing was repeated.

use crate::harness::*;
use steward_fixture::{FaultMode, FaultPlan};

async fn invoke_with(w: &World, fault: Option<FaultPlan>, n: u32) -> (serde_json::Value, u64) {
    let before = w.fixture.write_count();
    if let Some(f) = fault {
        w.fixture.set_faults(f);
    }
    let reply = w
        .agent
        .invoke("refund", refund_input(n), Some(&format!("op-{n}")), None)
        .await;
    assert_eq!(
        reply.status, 200,
        "invoke answers 200 with the recorded invocation: {:?}",
        reply.body
    );
    // Nothing is ever sent twice: wait a moment to catch a stray retry.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    (reply.data().clone(), w.fixture.write_count() - before)
}

#[tokio::test]
async fn each_fault_gives_the_honest_status_grade_and_write_count() {
    // A 400 ms dispatch deadline makes the hold case a Steward-side timeout.
    let w = world(&["--dispatch-timeout-ms", "400"]).await;
    let cases = [
        (None, "succeeded", "confirmed", 1),
        (
            Some(FaultPlan::new(FaultMode::Reject)),
            "failed",
            "failed",
            0,
        ),
        (
            Some(FaultPlan::new(FaultMode::ErrorBeforeCommit)),
            "failed",
            "failed",
            0,
        ),
        (
            Some(FaultPlan::new(FaultMode::DropAfterCommit)),
            "unknown",
            "unknown",
            1,
        ),
        (
            Some(FaultPlan::new(FaultMode::ErrorAfterCommit)),
            "unknown",
            "unknown",
            1,
        ),
        (
            Some(FaultPlan::new(FaultMode::HoldAfterCommit).hold_ms(1200)),
            "unknown",
            "unknown",
            1,
        ),
    ];
    for (n, (fault, status, grade, writes)) in cases.into_iter().enumerate() {
        let label = format!("{fault:?}");
        let (inv, written) = invoke_with(&w, fault, 100 + n as u32).await;
        assert_eq!(inv["status"], status, "{label}: {inv}");
        assert_eq!(inv["grade"], grade, "{label}: {inv}");
        assert_eq!(written, writes, "{label}: provider writes");
        if status == "unknown" {
            assert_eq!(inv["unresolved"], true, "{label}");
            assert_eq!(inv["error"]["code"], "outcome_unknown", "{label}");
        }
    }
    // Unknown effects are a visible queue.
    let unresolved = w.agent.get("/actions/effects?unresolved=true").await;
    assert_eq!(
        unresolved.body["pagination"]["total"], 3,
        "{:?}",
        unresolved.body
    );
}

#[tokio::test]
async fn a_provider_that_is_not_listening_is_failed_and_never_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--allow-insecure-destinations"]);
    let operator = Api::new(&server, &server.keys("test", "operator"));
    // Bind and drop a listener so the port is (almost certainly) closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    refund_action(&operator, &format!("http://127.0.0.1:{port}"), "refund").await;
    let reply = operator.invoke("refund", refund_input(1), None, None).await;
    assert_eq!(reply.data()["status"], "failed", "{:?}", reply.body);
    assert_eq!(reply.data()["error"]["code"], "not_sent");
}

#[tokio::test]
async fn without_the_insecure_option_a_loopback_destination_is_refused_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture().await;
    let server = Server::start(&dir.path().join("data"), &[]);
    let operator = Api::new(&server, &server.keys("test", "operator"));
    refund_action(&operator, &fixture.base_url(), "refund").await;
    let reply = operator.invoke("refund", refund_input(1), None, None).await;
    assert_eq!(reply.data()["status"], "failed", "{:?}", reply.body);
    assert_eq!(reply.data()["error"]["code"], "destination_refused");
    let effect = operator
        .get(&format!(
            "/actions/effects/{}",
            reply.data()["effectId"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        effect.data()["attempts"].as_array().unwrap().len(),
        0,
        "no attempt was recorded"
    );
    assert_eq!(fixture.write_count(), 0);
}

#[tokio::test]
async fn a_secret_is_only_sent_to_its_allowed_hosts() {
    let w = world(&[]).await;
    // Narrow the key to another host: the fixture's 127.0.0.1 is no longer allowed.
    let narrowed = w
        .operator
        .call(
            "PUT",
            "/secrets/STRIPE_TEST_KEY",
            Some(serde_json::json!({"value": STRIPE_SECRET, "allowedHosts": []})),
            None,
        )
        .await;
    assert_eq!(narrowed.status, 200, "{:?}", narrowed.body);
    let reply = w.agent.invoke("refund", refund_input(9), None, None).await;
    assert_eq!(reply.data()["status"], "failed");
    assert_eq!(reply.data()["error"]["code"], "secret_host_not_allowed");
    assert_eq!(w.fixture.write_count(), 0);
    // And a rotation can never widen it back.
    let widened = w
        .operator
        .call(
            "PUT",
            "/secrets/STRIPE_TEST_KEY",
            Some(serde_json::json!({"value": STRIPE_SECRET, "allowedHosts": [host_port(&w.fixture.base_url())]})),
            None,
        )
        .await;
    assert_eq!(widened.status, 400);
    assert_eq!(widened.body["error"]["details"]["field"], "allowedHosts");
}

/// Accepts connections on 127.0.0.1 and counts them: another service on the fixture's host.
async fn counting_listener() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(conn);
        }
    });
    (port, accepted)
}

#[tokio::test]
async fn a_secret_allowed_on_one_port_is_refused_for_another_port_on_the_same_host() {
    let w = world(&[]).await;
    let (other_port, accepted) = counting_listener().await;
    let get_secret = w.operator.get("/secrets/STRIPE_TEST_KEY").await;
    assert_eq!(
        get_secret.data()["allowedHosts"],
        serde_json::json!([host_port(&w.fixture.base_url())]),
        "the world's secret names the fixture's port"
    );
    let created = w
        .operator
        .post(
            "/actions",
            serde_json::json!({
                "name": "elsewhere",
                "adapter": {
                    "type": "stripe.refund",
                    "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                               "baseUrl": format!("http://127.0.0.1:{other_port}")},
                    "credentialSecret": "STRIPE_TEST_KEY"
                }
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let refused = w
        .agent
        .invoke("elsewhere", refund_input(1), None, None)
        .await;
    assert_eq!(refused.data()["status"], "failed", "{:?}", refused.body);
    assert_eq!(refused.data()["grade"], "failed");
    assert_eq!(refused.data()["error"]["code"], "secret_host_not_allowed");
    let effect = w
        .operator
        .get(&format!(
            "/actions/effects/{}",
            refused.data()["effectId"].as_str().unwrap()
        ))
        .await;
    assert_eq!(effect.data()["attempts"].as_array().unwrap().len(), 0);
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the other service on the same host received no request"
    );
    // The named port still works.
    let allowed = w.agent.invoke("refund", refund_input(2), None, None).await;
    assert_eq!(allowed.data()["status"], "succeeded", "{:?}", allowed.body);
    assert_eq!(w.fixture.write_count(), 1);

    // Entries are checked when the secret is saved.
    for bad in [
        "127.0.0.1/x",
        "127.0.0.1:0",
        "ftp://127.0.0.1",
        "[::1",
        "a b",
    ] {
        let put = w
            .operator
            .call(
                "PUT",
                "/secrets/OTHER_KEY",
                Some(serde_json::json!({"value": "v", "allowedHosts": [bad]})),
                None,
            )
            .await;
        assert_eq!(put.status, 400, "{bad}: {:?}", put.body);
        assert_eq!(put.body["error"]["details"]["field"], "allowedHosts");
    }
    let put = w
        .operator
        .call(
            "PUT",
            "/secrets/OTHER_KEY",
            Some(serde_json::json!({"value": "v",
                "allowedHosts": ["HTTPS://API.example.com:443/", "[0::1]:8080", ".example.org"]})),
            None,
        )
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    assert_eq!(
        put.data()["allowedHosts"],
        serde_json::json!(["https://api.example.com:443", "[::1]:8080", ".example.org"])
    );
}

#[tokio::test]
async fn validation_errors_name_the_field_and_record_nothing() {
    let w = world(&[]).await;
    let reply = w
        .agent
        .invoke(
            "refund",
            serde_json::json!({"paymentIntent": "pi_1"}),
            None,
            None,
        )
        .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.code(), "VALIDATION_ERROR");
    assert_eq!(reply.body["error"]["details"]["field"], "input.amount");
    let listed = w.agent.get("/actions/invocations").await;
    assert_eq!(listed.body["pagination"]["total"], 0);
    let bad_json = w
        .agent
        .call(
            "POST",
            "/actions/refund/invoke",
            Some(serde_json::json!([1])),
            None,
        )
        .await;
    assert_eq!(bad_json.status, 400);
    assert!(
        bad_json.request_id.is_some(),
        "every response has x-request-id"
    );
}

#[tokio::test]
async fn a_request_http_cannot_carry_is_failed_unsent_and_holds_no_impact_reservation() {
    let w = world(&[]).await;
    let fixture_host = host_port(&w.fixture.base_url());
    let limit = w
        .operator
        .post(
            "/impact-limits",
            serde_json::json!({"name": "five mutations", "dimension": "resource_mutations",
                               "period": "total", "amount": 5}),
        )
        .await;
    assert_eq!(limit.status, 201, "{:?}", limit.body);
    let limit_id = limit.data()["id"].as_str().unwrap().to_string();
    // A template action that puts part of the input into a header.
    let created = w
        .operator
        .post(
            "/actions",
            serde_json::json!({
                "name": "noted",
                "method": "POST",
                "urlTemplate": format!("{}/v1/refunds", w.fixture.base_url()),
                "headers": {"Authorization": "Bearer {{secret:STRIPE_TEST_KEY}}",
                            "X-Note": "{{input.note}}"},
                "bodyTemplate": {"payment_intent": "{{input.pi}}", "amount": "{{input.amount}}"},
                "impact": {"dimension": "resource_mutations", "amount": "1", "bound": "exact"}
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    // An adapter whose credential holds a line break (a header injection from the vault).
    let bad_secret = "sk_test_badKey\r\nX-Injected: 1";
    let put = w
        .operator
        .call(
            "PUT",
            "/secrets/BROKEN_KEY",
            Some(serde_json::json!({"value": bad_secret, "allowedHosts": [fixture_host]})),
            None,
        )
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let created = w
        .operator
        .post(
            "/actions",
            serde_json::json!({
                "name": "broken-key",
                "adapter": {
                    "type": "stripe.refund",
                    "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                               "baseUrl": w.fixture.base_url()},
                    "credentialSecret": "BROKEN_KEY"
                }
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);

    let mut bad = Vec::new();
    for (n, note) in [
        "a\r\nX-Evil: 1",
        "line\nbreak",
        "carriage\rreturn",
        "nul\u{0}byte",
    ]
    .into_iter()
    .enumerate()
    {
        let input = serde_json::json!({"pi": format!("pi_bad_{n}"), "amount": 10, "note": note});
        bad.push(w.agent.invoke("noted", input, None, None).await);
    }
    bad.push(
        w.agent
            .invoke("broken-key", refund_input(7), None, None)
            .await,
    );
    for reply in &bad {
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        assert_eq!(reply.data()["status"], "failed", "{:?}", reply.body);
        assert_eq!(reply.data()["grade"], "failed", "{:?}", reply.body);
        assert_eq!(reply.data()["error"]["code"], "request_invalid");
        let effect = w
            .operator
            .get(&format!(
                "/actions/effects/{}",
                reply.data()["effectId"].as_str().unwrap()
            ))
            .await;
        assert_eq!(effect.data()["outcome"], "failed", "{:?}", effect.body);
        assert_eq!(
            effect.data()["attempts"].as_array().unwrap().len(),
            0,
            "no attempt was recorded: {:?}",
            effect.body
        );
    }
    assert_eq!(w.fixture.write_count(), 0, "nothing was sent");
    let unresolved = w.operator.get("/actions/effects?unresolved=true").await;
    assert_eq!(unresolved.data().as_array().unwrap().len(), 0);

    // None of the five holds any of the limit: a legitimate sixth goes through.
    let good = w
        .agent
        .invoke(
            "noted",
            serde_json::json!({"pi": "pi_good", "amount": 10, "note": "fine"}),
            None,
            None,
        )
        .await;
    assert_eq!(good.data()["status"], "succeeded", "{:?}", good.body);
    assert_eq!(w.fixture.write_count(), 1);
    let after = w.operator.get(&format!("/impact-limits/{limit_id}")).await;
    assert_eq!(after.data()["consumed"], 1, "{:?}", after.body);
    assert_eq!(after.data()["reserved"], 0);
    assert_eq!(after.data()["unknownExposure"], 0);
    for body in w.agent.seen.lock().unwrap().iter() {
        assert!(!body.contains("sk_test_badKey"), "{body}");
    }
}
