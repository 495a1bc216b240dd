//! Defaults that protect: a governed invoke with neither an `operationKey` nor an
//! `Idempotency-Key` is answered with a warning, or refused where the environment says so
//! (`unkeyedInvokes`); saving an action whose credential cannot reach where it calls warns.

use crate::harness::*;
use serde_json::{json, Value};

fn warning_codes(body: &Value) -> Vec<&str> {
    body["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| w["code"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unkeyed_governed_invoke_is_warned_or_refused_as_the_environment_says() {
    let w = world(&[]).await;
    let env = w.operator.get("/environment").await;
    assert_eq!(env.data()["unkeyedInvokes"], "accept", "{:?}", env.body);

    // Accepted by default, with a warning naming the field; keyed invokes carry none.
    let unkeyed = w.agent.invoke("refund", refund_input(1), None, None).await;
    assert_eq!(unkeyed.status, 200, "{:?}", unkeyed.body);
    assert_eq!(unkeyed.data()["status"], "succeeded");
    assert_eq!(warning_codes(&unkeyed.body), ["no_request_key"]);
    assert_eq!(unkeyed.body["warnings"][0]["field"], "operationKey");
    let keyed = w
        .agent
        .invoke("refund", refund_input(2), Some("order-2"), None)
        .await;
    assert_eq!(keyed.status, 200, "{:?}", keyed.body);
    assert!(keyed.body.get("warnings").is_none(), "{:?}", keyed.body);
    let idempotent = w
        .agent
        .invoke("refund", refund_input(3), None, Some("request-3"))
        .await;
    assert_eq!(idempotent.status, 200, "{:?}", idempotent.body);
    assert!(idempotent.body.get("warnings").is_none());
    assert_eq!(w.fixture.write_count(), 3);

    // Only a key with `environments:halt` changes the setting; a wrong value names the field.
    let setting = |value: &str| json!({ "unkeyedInvokes": value });
    let by_agent = w
        .agent
        .call("PATCH", "/environment", Some(setting("refuse")), None)
        .await;
    assert_eq!(by_agent.status, 403, "{:?}", by_agent.body);
    let wrong = w
        .operator
        .call("PATCH", "/environment", Some(setting("sometimes")), None)
        .await;
    assert_eq!(wrong.status, 400, "{:?}", wrong.body);
    assert_eq!(wrong.code(), "VALIDATION_ERROR");
    let refused = w
        .operator
        .call("PATCH", "/environment", Some(setting("refuse")), None)
        .await;
    assert_eq!(refused.status, 200, "{:?}", refused.body);
    assert_eq!(refused.data()["unkeyedInvokes"], "refuse");
    assert_eq!(
        w.agent.get("/environment").await.data()["unkeyedInvokes"],
        "refuse"
    );

    // Now refused with its own code, and nothing recorded or sent; a keyed invoke still runs.
    let before = w.operator.get("/actions/invocations").await;
    let unkeyed = w.agent.invoke("refund", refund_input(4), None, None).await;
    assert_eq!(unkeyed.status, 400, "{:?}", unkeyed.body);
    assert_eq!(unkeyed.code(), "operation_key_required");
    assert_eq!(unkeyed.body["error"]["details"]["field"], "operationKey");
    let after = w.operator.get("/actions/invocations").await;
    assert_eq!(
        before.body["pagination"]["total"], after.body["pagination"]["total"],
        "nothing recorded"
    );
    assert_eq!(w.fixture.write_count(), 3, "nothing sent");
    let keyed = w
        .agent
        .invoke("refund", refund_input(4), Some("order-4"), None)
        .await;
    assert_eq!(keyed.status, 200, "{:?}", keyed.body);
    let idempotent = w
        .agent
        .invoke("refund", refund_input(5), None, Some("request-5"))
        .await;
    assert_eq!(idempotent.status, 200, "{:?}", idempotent.body);
    assert_eq!(w.fixture.write_count(), 5);

    // Back to accept: the warning again.
    let accepted = w
        .operator
        .call("PATCH", "/environment", Some(setting("accept")), None)
        .await;
    assert_eq!(accepted.data()["unkeyedInvokes"], "accept");
    let unkeyed = w.agent.invoke("refund", refund_input(6), None, None).await;
    assert_eq!(unkeyed.status, 200, "{:?}", unkeyed.body);
    assert_eq!(warning_codes(&unkeyed.body), ["no_request_key"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saving_an_action_whose_credential_cannot_reach_its_url_warns() {
    let w = world(&[]).await;
    let put = w
        .operator
        .call(
            "PUT",
            "/secrets/ELSEWHERE_KEY",
            Some(json!({"value": "sk_test_elsewhere0123456789", "allowedHosts": ["api.example.com"]})),
            None,
        )
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let refund = |name: &str, secret: &str| {
        json!({
            "name": name,
            "adapter": {
                "type": "stripe.refund",
                "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                           "baseUrl": w.fixture.base_url()},
                "credentialSecret": secret
            }
        })
    };

    // The secret may go only to api.example.com; the action calls the fixture.
    let created = w
        .operator
        .post("/actions", refund("refund-elsewhere", "ELSEWHERE_KEY"))
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(
        warning_codes(&created.body),
        ["credential_host_not_allowed"]
    );
    let warning = &created.body["warnings"][0];
    assert_eq!(warning["field"], "adapter.config.baseUrl");
    let message = warning["message"].as_str().unwrap();
    assert!(message.contains("ELSEWHERE_KEY"), "{message}");
    assert!(!created.body.to_string().contains("sk_test_elsewhere"));
    // The warning was true: an invoke is failed before anything is sent.
    let invoked = w
        .agent
        .invoke("refund-elsewhere", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(invoked.data()["status"], "failed", "{:?}", invoked.body);
    assert_eq!(w.fixture.write_count(), 0);

    // A credential that does not exist yet.
    let missing = w
        .operator
        .post("/actions", refund("refund-missing", "NOT_YET_KEY"))
        .await;
    assert_eq!(missing.status, 201, "{:?}", missing.body);
    assert_eq!(warning_codes(&missing.body), ["credential_missing"]);
    assert_eq!(
        missing.body["warnings"][0]["field"],
        "adapter.credentialSecret"
    );

    // The world's own action reaches its URL: saving it warns of nothing.
    let edited = w
        .operator
        .call(
            "PATCH",
            "/actions/refund",
            Some(json!({"description": "refunds an order"})),
            None,
        )
        .await;
    assert_eq!(edited.status, 200, "{:?}", edited.body);
    assert!(edited.body.get("warnings").is_none(), "{:?}", edited.body);
}

/// Runs `steward ARGS` against `server` with `key`; (succeeded, stdout, stderr).
async fn cli(server: &Server, key: &str, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(steward_bin())
        .args(args)
        .env("STEWARD_SERVER", &server.url)
        .env("STEWARD_API_KEY", key)
        .env_remove("STEWARD_DATA")
        .output()
        .await
        .expect("the CLI runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sets_unkeyed_invokes_from_the_cli() {
    let w = world(&[]).await;
    let operator_key = w.server.keys("test", "operator");
    let (ok, stdout, stderr) = cli(
        &w.server,
        &operator_key,
        &[
            "environment",
            "set",
            "--unkeyed-invokes",
            "refuse",
            "--json",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    let set: Value = serde_json::from_str(&stdout).expect("--json parses");
    assert_eq!(set["unkeyedInvokes"], "refuse");
    let (ok, stdout, _) = cli(&w.server, &operator_key, &["environment", "show"]).await;
    assert!(
        ok && stdout.contains("unkeyed invokes") && stdout.contains("refuse"),
        "{stdout}"
    );
    let refused = w.agent.invoke("refund", refund_input(1), None, None).await;
    assert_eq!(
        refused.code(),
        "operation_key_required",
        "{:?}",
        refused.body
    );
    assert_eq!(w.fixture.write_count(), 0);

    // A value the setting does not know is refused before anything is sent.
    let (ok, _, stderr) = cli(
        &w.server,
        &operator_key,
        &["environment", "set", "--unkeyed-invokes", "sometimes"],
    )
    .await;
    assert!(!ok && stderr.contains("sometimes"), "{stderr}");
    // An agent key may not change it.
    let agent_key = w.server.keys("test", "agent");
    let (ok, _, stderr) = cli(
        &w.server,
        &agent_key,
        &["environment", "set", "--unkeyed-invokes", "accept"],
    )
    .await;
    assert!(!ok && stderr.contains("environments:halt"), "{stderr}");
}
