//! Approval policies decide before anything is recorded or sent: auto_deny records a denied
//! invocation whose decision is never rewritten, require_approval parks it with the policy's
//! approver count, auto_approve lets it run. Policies are privileged and walled per environment.

use crate::halt::audit_kinds;
use crate::harness::*;
use serde_json::{json, Value};

async fn create_policy(operator: &Api, body: Value) -> Value {
    let created = operator.post("/approval-policies", body).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    created.data().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_auto_deny_decision_is_recorded_and_never_rewritten() {
    let w = world(&[]).await;
    let policy = create_policy(
        &w.operator,
        json!({"name": "no refunds", "matchKind": "action", "matchActionName": "refund",
               "effect": "auto_deny", "changeNote": "freeze"}),
    )
    .await;
    assert_eq!(policy["scope"], "specific_action");
    assert_eq!(policy["needsScopeReview"], false);
    assert_eq!(policy["version"], 1);
    let id = policy["id"].as_str().unwrap().to_string();

    let denied = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(denied.status, 200, "{:?}", denied.body);
    let inv = denied.data().clone();
    assert_eq!(inv["status"], "denied");
    assert_eq!(inv["grade"], "denied");
    assert_eq!(inv["responseStatus"], Value::Null);
    assert_eq!(inv["body"], Value::Null);
    let decision = inv["decision"].clone();
    assert_eq!(decision["source"], "policy");
    assert_eq!(decision["code"], "POLICY_DENIED");
    assert_eq!(decision["effect"], "denied");
    assert_eq!(
        decision["policy"],
        json!({"id": id, "name": "no refunds", "version": 1})
    );
    assert_eq!(
        w.fixture.write_count(),
        0,
        "a denied invocation is never sent"
    );
    // The same operation is observed, not denied again into a second record.
    let again = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(again.data()["id"], inv["id"]);

    // Edits and deletion do not rewrite history.
    let edited = w
        .operator
        .call(
            "PATCH",
            &format!("/approval-policies/{id}"),
            Some(json!({"priority": 9})),
            None,
        )
        .await;
    assert_eq!(edited.data()["version"], 2, "{:?}", edited.body);
    let deleted = w
        .operator
        .call("DELETE", &format!("/approval-policies/{id}"), None, None)
        .await;
    assert_eq!(deleted.status, 200, "{:?}", deleted.body);
    let read = w
        .agent
        .get(&format!(
            "/actions/invocations/{}",
            inv["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(read.data()["decision"], decision);
    assert_eq!(read.data()["status"], "denied");

    // Every version stays readable, newest first, with a tombstone after deletion.
    let versions = w
        .operator
        .get(&format!("/approval-policies/{id}/versions"))
        .await;
    assert_eq!(versions.status, 200, "{:?}", versions.body);
    let list: Vec<(i64, bool)> = versions
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_i64().unwrap(),
                v["deleted"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(list, vec![(3, true), (2, false), (1, false)]);
    let first = w
        .operator
        .get(&format!("/approval-policies/{id}/versions/1"))
        .await;
    assert_eq!(first.data()["policy"]["effect"], "auto_deny");
    assert_eq!(first.data()["changeNote"], "freeze");
    assert_eq!(
        w.operator
            .get(&format!("/approval-policies/{id}"))
            .await
            .status,
        404
    );

    // With the policy gone the action runs again.
    let ran = w.agent.invoke("refund", refund_input(2), None, None).await;
    assert_eq!(ran.data()["status"], "succeeded", "{:?}", ran.body);

    let audit = audit_kinds(&w.server.data);
    for kind in ["policy.created", "policy.updated", "policy.deleted"] {
        assert!(
            audit.contains(&format!("('{kind}', 'key_")),
            "{kind}: {audit}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn policies_are_privileged_and_walled_per_environment() {
    let w = world(&[]).await;
    let policy = create_policy(
        &w.operator,
        json!({"name": "guard", "matchKind": "custom", "effect": "require_approval"}),
    )
    .await;
    let id = policy["id"].as_str().unwrap().to_string();
    let path = format!("/approval-policies/{id}");

    // An agent key can neither read nor change policy.
    for (method, p, body) in [
        ("GET", "/approval-policies".to_string(), None),
        ("GET", path.clone(), None),
        (
            "POST",
            "/approval-policies".to_string(),
            Some(json!({"name": "mine", "matchKind": "custom", "effect": "auto_approve"})),
        ),
        ("PATCH", path.clone(), Some(json!({"enabled": false}))),
        ("DELETE", path.clone(), None),
        (
            "POST",
            "/approval-policies/evaluate".to_string(),
            Some(json!({"kind": "custom"})),
        ),
        ("GET", format!("{path}/versions"), None),
    ] {
        let reply = w.agent.call(method, &p, body, None).await;
        assert_eq!(reply.status, 403, "{method} {p}: {:?}", reply.body);
    }
    assert_eq!(w.operator.get(&path).await.data()["enabled"], true);

    // Another environment's operator finds nothing.
    let other = Api::new(&w.server, &w.server.keys("other", "operator"));
    assert_eq!(other.get(&path).await.status, 404);
    assert_eq!(
        other
            .call("PATCH", &path, Some(json!({"enabled": false})), None)
            .await
            .status,
        404
    );
    assert_eq!(other.call("DELETE", &path, None, None).await.status, 404);
    assert_eq!(other.get(&format!("{path}/versions")).await.status, 404);
    assert_eq!(other.get("/approval-policies").await.data(), &json!([]));
    // ... and cannot target an action of this environment.
    let cross = other
        .post(
            "/approval-policies",
            json!({"name": "cross", "matchKind": "action", "matchActionName": "refund", "effect": "auto_deny"}),
        )
        .await;
    assert_eq!(cross.status, 400, "{:?}", cross.body);
    assert_eq!(cross.body["error"]["details"]["field"], "matchActionName");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn require_approval_needs_the_policy_count_of_other_keys_and_runs_once() {
    let w = world(&[]).await;
    let policy = create_policy(
        &w.operator,
        json!({"name": "big refunds", "matchKind": "action", "matchActionName": "refund",
               "condition": "input.amount >= 1500", "requiredApprovals": 2}),
    )
    .await;
    assert_eq!(policy["effect"], "require_approval");

    // Below the condition the policy does not match.
    let small = w
        .operator
        .invoke("refund", refund_input(1), None, None)
        .await;
    assert_eq!(small.data()["status"], "succeeded", "{:?}", small.body);

    let big = w
        .operator
        .invoke(
            "refund",
            json!({"paymentIntent": "pi_big", "amount": 2000}),
            None,
            None,
        )
        .await;
    assert_eq!(big.status, 202, "{:?}", big.body);
    assert_eq!(big.data()["decision"]["code"], "POLICY_REQUIRES_APPROVAL");
    let approval = big.data()["approvalId"].as_str().unwrap().to_string();
    let shown = w.operator.get(&format!("/approvals/{approval}")).await;
    assert_eq!(shown.data()["requiredApprovals"], 2);

    // The key that asked never decides; two other keys must.
    let own = w
        .operator
        .post(&format!("/approvals/{approval}/approve"), json!({}))
        .await;
    assert_eq!(own.status, 403, "{:?}", own.body);
    let first = Api::new(&w.server, &w.server.keys("test", "operator"));
    let second = Api::new(&w.server, &w.server.keys("test", "operator"));
    let one = first
        .post(&format!("/approvals/{approval}/approve"), json!({}))
        .await;
    assert_eq!(
        one.data()["approval"]["status"],
        "pending",
        "{:?}",
        one.body
    );
    assert_eq!(
        one.data()["invocation"]["status"],
        "pending_approval",
        "one of two approvals releases nothing"
    );
    assert_eq!(w.fixture.write_count(), 1);
    let two = second
        .post(&format!("/approvals/{approval}/approve"), json!({}))
        .await;
    assert_eq!(
        two.data()["approval"]["status"],
        "approved",
        "{:?}",
        two.body
    );
    assert_eq!(
        w.fixture.write_count(),
        2,
        "runs once after the second approval"
    );

    // A condition that cannot be evaluated requires approval.
    let odd = create_policy(
        &w.operator,
        json!({"name": "notes", "matchKind": "action", "matchActionName": "refund",
               "condition": "input.note == 'vip'", "effect": "auto_deny", "priority": 5}),
    )
    .await;
    let parked = w.agent.invoke("refund", refund_input(3), None, None).await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    assert!(
        parked.data()["decision"]["explanation"]
            .as_str()
            .unwrap()
            .contains("could not evaluate"),
        "{:?}",
        parked.body
    );
    assert_eq!(parked.data()["decision"]["policy"]["id"], odd["id"]);

    // Evaluate is read-only and says what would happen.
    let evaluated = w
        .operator
        .post(
            "/approval-policies/evaluate",
            json!({"kind": "action", "actionName": "refund", "payload": {"paymentIntent": "pi", "amount": 10, "note": "vip"}}),
        )
        .await;
    assert_eq!(evaluated.data()["evaluation"], "policy_only");
    assert_eq!(
        evaluated.data()["effect"],
        "auto_deny",
        "{:?}",
        evaluated.body
    );
    assert_eq!(w.fixture.write_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn auto_approve_lifts_the_gate_only_when_it_names_the_action() {
    let w = world(&[]).await;
    let gated = w
        .operator
        .call(
            "PATCH",
            "/actions/refund",
            Some(json!({"requiresApproval": true})),
            None,
        )
        .await;
    assert_eq!(gated.status, 200);
    // A broad auto-approve does not un-gate an action that asks for a human.
    create_policy(
        &w.operator,
        json!({"name": "all", "matchKind": "action", "effect": "auto_approve"}),
    )
    .await;
    let parked = w.agent.invoke("refund", refund_input(1), None, None).await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    assert_eq!(w.fixture.write_count(), 0);
    // One that names the action does, and the decision says so.
    create_policy(
        &w.operator,
        json!({"name": "refunds ok", "matchKind": "action", "matchActionName": "refund",
               "effect": "auto_approve", "priority": 1}),
    )
    .await;
    let ran = w.agent.invoke("refund", refund_input(2), None, None).await;
    assert_eq!(ran.data()["status"], "succeeded", "{:?}", ran.body);
    assert_eq!(ran.data()["decision"]["code"], "POLICY_APPROVED");
    assert_eq!(w.fixture.write_count(), 1);
}
