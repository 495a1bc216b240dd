//! Environments are walls, and scopes are enforced.

use crate::harness::*;
use serde_json::json;

#[tokio::test]
async fn another_environment_sees_404_and_scopes_are_enforced() {
    let w = world(&[]).await;
    let inv = w.agent.invoke("refund", refund_input(1), None, None).await;
    let other = Api::new(&w.server, &w.server.keys("live", "operator"));
    let id = inv.data()["id"].as_str().unwrap();
    let effect = inv.data()["effectId"].as_str().unwrap();
    let action = w.agent.get("/actions/refund").await.data()["id"]
        .as_str()
        .unwrap()
        .to_string();
    for path in [
        format!("/actions/invocations/{id}"),
        format!("/actions/effects/{effect}"),
        format!("/actions/{action}"),
        "/actions/refund".into(),
        "/secrets/STRIPE_TEST_KEY".into(),
    ] {
        let reply = other.get(&path).await;
        assert_eq!(reply.status, 404, "{path}: {:?}", reply.body);
        assert_eq!(reply.code(), "NOT_FOUND");
    }
    assert_eq!(
        other.get("/actions/invocations").await.body["pagination"]["total"],
        0
    );
    assert_eq!(
        other
            .invoke(&action, refund_input(2), None, None)
            .await
            .status,
        404
    );

    // The agent role cannot change actions or secrets; a read-only key cannot invoke.
    let created = w
        .agent
        .post(
            "/actions",
            json!({"name": "x", "urlTemplate": "https://example.com"}),
        )
        .await;
    assert_eq!(created.status, 403);
    assert_eq!(created.code(), "FORBIDDEN");
    let put = w
        .agent
        .call("PUT", "/secrets/X", Some(json!({"value": "v"})), None)
        .await;
    assert_eq!(put.status, 403);
    let reader = Api::new(
        &w.server,
        &create_key(&w.server.data, "test", &["--scopes", "actions:read"]),
    );
    let refused = reader.invoke("refund", refund_input(3), None, None).await;
    assert_eq!(refused.status, 403);
    assert_eq!(w.fixture.write_count(), 1);

    let nobody = Api::new(&w.server, "stw_not_a_real_key");
    assert_eq!(nobody.get("/auth/identity").await.status, 401);
    let identity = reader.get("/auth/identity").await;
    assert_eq!(identity.data()["credentialType"], "api_key");
    assert_eq!(identity.data()["scopes"], json!(["actions:read"]));
}
