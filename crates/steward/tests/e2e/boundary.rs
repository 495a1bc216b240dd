//! The trust boundary around what operators save and agents read: parked invocations of an
//! action that is disabled or deleted never run; agent keys see the tool, not its wiring;
//! hostile conditions and schemas are refused when saved and the server stays up.

use crate::harness::*;
use serde_json::{json, Value};

/// Parks one invocation of `refund` (gated by `approvals::gated_world`); returns (invocation
/// id, approval id).
async fn park_one(w: &World) -> (String, String) {
    let parked = w
        .agent
        .invoke("refund", refund_input(7), Some("order-7"), None)
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    (
        parked.data()["id"].as_str().unwrap().to_string(),
        parked.data()["approvalId"].as_str().unwrap().to_string(),
    )
}

/// Checks that the parked invocation was cancelled by the system, that approving it now
/// changes nothing, and that the provider never saw a write.
async fn assert_cancelled_and_never_runs(w: &World, invocation: &str, approval: &str) {
    let seen = w.operator.get(&format!("/approvals/{approval}")).await;
    assert_eq!(seen.data()["status"], "denied", "{:?}", seen.body);
    assert_eq!(seen.data()["decisionOrigin"], "system", "{:?}", seen.body);

    let approver = Api::new(&w.server, &w.server.keys("test", "operator"));
    let late = approver
        .post(&format!("/approvals/{approval}/approve"), json!({}))
        .await;
    assert_ne!(late.data()["status"], "approved", "{:?}", late.body);

    let inv = w
        .agent
        .get(&format!("/actions/invocations/{invocation}"))
        .await;
    assert_eq!(inv.data()["status"], "denied", "{:?}", inv.body);
    // Give a wrongly released dispatch time to reach the provider before counting.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        w.fixture.write_count(),
        0,
        "a cancelled invocation never writes"
    );
}

/// Probe repro: disabling an action left its parked invocations pending, and approving one
/// later still wrote to the provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disabling_an_action_cancels_its_parked_invocations() {
    let w = crate::approvals::gated_world(&[]).await;
    let (invocation, approval) = park_one(&w).await;
    let disabled = w
        .operator
        .call(
            "PATCH",
            "/actions/refund",
            Some(json!({"enabled": false})),
            None,
        )
        .await;
    assert_eq!(disabled.status, 200, "{:?}", disabled.body);
    assert_cancelled_and_never_runs(&w, &invocation, &approval).await;

    // Enabling it again does not revive the cancelled invocation.
    let enabled = w
        .operator
        .call(
            "PATCH",
            "/actions/refund",
            Some(json!({"enabled": true})),
            None,
        )
        .await;
    assert_eq!(enabled.status, 200, "{:?}", enabled.body);
    assert_cancelled_and_never_runs(&w, &invocation, &approval).await;
}

/// Probe repro: deleting an action did not stop an invocation parked for approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_an_action_cancels_its_parked_invocations() {
    let w = crate::approvals::gated_world(&[]).await;
    let (invocation, approval) = park_one(&w).await;
    let deleted = w
        .operator
        .call("DELETE", "/actions/refund", None, None)
        .await;
    assert_eq!(deleted.status, 200, "{:?}", deleted.body);
    assert_cancelled_and_never_runs(&w, &invocation, &approval).await;
}

fn assert_tool_view(action: &Value) {
    for wiring in [
        "urlTemplate",
        "headers",
        "bodyTemplate",
        "adapter",
        "verify",
        "method",
    ] {
        assert!(action.get(wiring).is_none(), "{wiring} shown: {action}");
    }
    let text = action.to_string();
    assert!(!text.contains("credentialSecret"), "{text}");
    assert!(!text.contains("STRIPE_TEST_KEY"), "{text}");
    assert!(!text.contains("baseUrl"), "{text}");
    for field in [
        "name",
        "inputSchema",
        "impact",
        "requiresApproval",
        "governed",
        "enabled",
        "version",
    ] {
        assert!(action.get(field).is_some(), "{field} missing: {action}");
    }
}

/// Probe repro: an agent key read the action's baseUrl, templates and credentialSecret.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agent_keys_see_the_tool_view_of_an_action() {
    let w = world(&[]).await;
    let one = w.agent.get("/actions/refund").await;
    assert_eq!(one.status, 200, "{:?}", one.body);
    assert_tool_view(one.data());
    let all = w.agent.get("/actions").await;
    assert_tool_view(&all.data()[0]);
    let versions = w.agent.get("/actions/refund/versions").await;
    assert_tool_view(&versions.data()[0]);

    // Keys that may edit the action still see all of it.
    let full = w.operator.get("/actions/refund").await;
    assert_eq!(
        full.data()["adapter"]["credentialSecret"],
        "STRIPE_TEST_KEY"
    );
}

/// Probe repros: a 1,500-term condition was saved and then aborted the server when evaluated;
/// a `$ref` cycle in an input schema was saved and then ate memory on every invoke. Both are
/// refused when saved, naming the field, and the server keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_conditions_and_schemas_are_refused_when_saved() {
    let w = world(&[]).await;
    let condition = vec!["1"; 1_500].join("+") + " > 0";
    let policy = w
        .operator
        .post(
            "/approval-policies",
            json!({"name": "deep", "matchKind": "action", "matchActionName": "refund",
                   "condition": condition, "effect": "require_approval"}),
        )
        .await;
    assert_eq!(policy.status, 400, "{:?}", policy.body);
    assert_eq!(policy.body["error"]["details"]["field"], "condition");

    let cyclic = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                        "$ref": "#/$defs/a"});
    let action = w
        .operator
        .call(
            "PATCH",
            "/actions/refund",
            Some(json!({"inputSchema": cyclic})),
            None,
        )
        .await;
    assert_eq!(action.status, 400, "{:?}", action.body);
    assert_eq!(action.body["error"]["details"]["field"], "inputSchema");

    let evaluated = w
        .operator
        .post(
            "/approval-policies/evaluate",
            json!({"kind": "action", "actionName": "refund", "payload": refund_input(1)}),
        )
        .await;
    assert!(evaluated.status < 500, "{:?}", evaluated.body);
    let invoked = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(invoked.data()["status"], "succeeded", "{:?}", invoked.body);
}

/// Probe finding: NUL, U+202E and U+FEFF were stored in names, titles, notes and reasons, where
/// they hide or reorder what an approver reads. Each is refused, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hiding_characters_are_refused_in_names_titles_notes_and_reasons() {
    let w = world(&[]).await;
    let refused = |reply: Reply, field: &str| {
        assert_eq!(reply.status, 400, "{field}: {:?}", reply.body);
        assert_eq!(
            reply.body["error"]["details"]["field"], field,
            "{:?}",
            reply.body
        );
    };
    refused(
        w.operator
            .post(
                "/approvals",
                json!({"title": "refund\u{202E}exe.pdf", "payload": {}}),
            )
            .await,
        "title",
    );
    refused(
        w.operator
            .post(
                "/approval-policies",
                json!({"name": "big\u{0000}", "matchKind": "any", "effect": "require_approval"}),
            )
            .await,
        "name",
    );
    refused(
        w.operator
            .post(
                "/impact-limits",
                json!({"name": "\u{FEFF}daily", "dimension": "money", "currency": "usd",
                       "period": "day", "amount": 100}),
            )
            .await,
        "name",
    );
    refused(
        w.operator
            .post("/environment/halt", json!({"reason": "incident\u{202E}"}))
            .await,
        "reason",
    );
    let custom = w
        .agent
        .post("/approvals", json!({"title": "ship it", "payload": {}}))
        .await;
    assert_eq!(custom.status, 201, "{:?}", custom.body);
    let id = custom.data()["id"].as_str().unwrap();
    refused(
        w.operator
            .post(
                &format!("/approvals/{id}/approve"),
                json!({"note": "ok\u{0000}"}),
            )
            .await,
        "note",
    );
    // Ordinary multi-line prose is still fine.
    let fine = w
        .operator
        .post(
            &format!("/approvals/{id}/approve"),
            json!({"note": "checked the order\nand the customer"}),
        )
        .await;
    assert_eq!(fine.status, 200, "{:?}", fine.body);
}

/// The data directory is the owner's alone (0700) and so are the database files (0600).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_data_directory_and_database_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let w = world(&[]).await;
    let data = w._dir.path().join("data");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "{}", data.display());
    for file in ["steward.db", "steward.db-wal", "master.key"] {
        let path = data.join(file);
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
}

/// A condition an older build saved (or someone wrote into the database) is evaluated under
/// the same bounds: the probe's 1,500-term condition, stored directly, makes the invoke park
/// for a person with the reason instead of aborting the server, on every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostile_condition_in_the_database_is_a_reason_not_an_abort() {
    let database = crate::postgres::TestDatabase::create().await;
    let w = world(&["--database", &database.url]).await;
    let created = w
        .operator
        .post(
            "/approval-policies",
            json!({"name": "stored", "matchKind": "action", "matchActionName": "refund",
                   "condition": "input.amount > 0", "effect": "auto_approve"}),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let deep = vec!["1"; 1_500].join("+") + " > 0";
    let changed = crate::postgres::admin_client(&database.url)
        .await
        .execute(
            "UPDATE policy_versions SET spec = replace(spec, 'input.amount > 0', $1)",
            &[&deep],
        )
        .await
        .expect("rewrite the stored condition");
    assert_eq!(changed, 1, "the stored policy was rewritten");

    for n in 1..=3 {
        let invoked = w
            .agent
            .invoke("refund", refund_input(n), Some(&format!("order-{n}")), None)
            .await;
        assert_eq!(invoked.status, 202, "{:?}", invoked.body);
        assert_eq!(invoked.data()["status"], "pending_approval");
    }
    let evaluated = w
        .operator
        .post(
            "/approval-policies/evaluate",
            json!({"kind": "action", "actionName": "refund", "payload": refund_input(9)}),
        )
        .await;
    assert_eq!(evaluated.status, 200, "{:?}", evaluated.body);
    assert!(
        evaluated
            .body
            .to_string()
            .contains("could not evaluate its condition"),
        "the reason is shown: {:?}",
        evaluated.body
    );
    assert_eq!(w.fixture.write_count(), 0);
}
