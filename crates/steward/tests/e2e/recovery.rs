//! Unknown is a queue, not a dead end: the reconciler, read-only reconcile, replay under the same
//! provider identity, and manual resolution, each proven by the fixture's write count.

use crate::harness::*;
use serde_json::{json, Value};
use std::time::Duration;
use steward_fixture::{FaultMode, FaultPlan};

async fn effect(api: &Api, inv: &Value) -> Value {
    api.get(&format!(
        "/actions/effects/{}",
        inv["effectId"].as_str().unwrap()
    ))
    .await
    .data()
    .clone()
}

async fn settles(api: &Api, inv: &Value) -> Value {
    let started = std::time::Instant::now();
    loop {
        let e = effect(api, inv).await;
        if e["stage"] == "settled" || started.elapsed() > Duration::from_secs(20) {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Opens `/metrics` on the main listener (it is not served without one).
const METRICS_TOKEN: &str = "metrics-token-for-recovery-tests";

fn refund_ids(w: &World) -> Vec<String> {
    w.fixture.refunds().into_iter().map(|r| r.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_reconciler_settles_lost_answers_as_confirmed() {
    let mut w = world(&[
        "--reconcile-interval-ms",
        "100",
        "--metrics-token",
        METRICS_TOKEN,
    ])
    .await;
    for (n, mode) in [
        (1, FaultMode::DropAfterCommit),
        (2, FaultMode::ErrorAfterCommit),
    ] {
        w.fixture.set_faults(FaultPlan::new(mode));
        let inv = w.agent.invoke("refund", refund_input(n), None, None).await;
        assert_eq!(inv.data()["status"], "unknown", "{mode:?}: {:?}", inv.body);
        let settled = settles(&w.agent, inv.data()).await;
        assert_eq!(settled["outcome"], "succeeded", "{mode:?}: {settled}");
        assert_eq!(settled["grade"], "confirmed");
        let reference = settled["externalReference"].as_str().unwrap().to_string();
        assert!(
            refund_ids(&w).contains(&reference),
            "the fixture's own refund id"
        );
        assert!(settled["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["source"] == "reconciler"));
    }
    assert_eq!(w.fixture.write_count(), 2);

    // Counters are per process: read them before the restart below.
    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", w.server.url))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        "steward_reconcile_total{result=\"found\"}",
        "steward_invocations_total{status=\"unknown\"}",
        "steward_dispatch_attempts_total{outcome=\"unknown\"}",
        "steward_dispatch_duration_seconds_count",
        "steward_store_commit_duration_seconds_bucket{operation=\"submit_and_begin\",le=\"+Inf\"}",
        "steward_unknown_effects 0",
        "steward_dispatch_duration_seconds_count{adapter=\"stripe.refund\"} 2",
        "steward_dispatching_effects 0",
        "steward_reconcile_lag_seconds 0",
    ] {
        assert!(
            metrics.contains(series),
            "{series} missing from:\n{metrics}"
        );
    }

    // A server SIGKILL while the provider holds a committed write.
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::HoldAfterCommit).hold_ms(3_000));
    let agent = w.agent.clone();
    let pending = tokio::spawn(async move {
        agent
            .invoke("refund", refund_input(3), Some("op-3"), None)
            .await
    });
    let fixture = &w.fixture;
    assert!(eventually(Duration::from_secs(10), || fixture.write_count() == 3).await);
    w.server.kill();
    drop(pending);
    w.server.restart();
    let agent = Api::new(&w.server, &w.server.keys("test", "agent"));
    let inv = agent
        .invoke("refund", refund_input(3), Some("op-3"), None)
        .await;
    let settled = settles(&agent, inv.data()).await;
    assert_eq!(settled["grade"], "confirmed", "{settled}");
    let kinds: Vec<&str> = settled["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"accepted"));
    assert!(
        kinds.contains(&"restart") && kinds.last() == Some(&"reconcile"),
        "{kinds:?}"
    );
    assert_eq!(
        w.fixture.write_count(),
        3,
        "one write per effect, never a repeat"
    );
}

#[tokio::test]
async fn not_found_is_conclusive_only_after_the_attempt_deadline_and_settled_effects_never_replay()
{
    let w = world(&["--dispatch-timeout-ms", "300", "--absence-grace-ms", "0"]).await;
    // A 500 without Stripe's "nothing happened" header: Steward cannot know.
    w.fixture.set_faults(FaultPlan {
        should_retry_header: false,
        ..FaultPlan::new(FaultMode::ErrorBeforeCommit)
    });
    let inv = w.agent.invoke("refund", refund_input(1), None, None).await;
    assert_eq!(inv.data()["status"], "unknown");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let id = inv.data()["effectId"].as_str().unwrap();
    let reconciled = w
        .agent
        .call(
            "POST",
            &format!("/actions/effects/{id}/reconcile"),
            None,
            None,
        )
        .await;
    assert_eq!(reconciled.status, 200, "{:?}", reconciled.body);
    assert_eq!(
        reconciled.data()["outcome"],
        "failed",
        "{:?}",
        reconciled.body
    );
    assert_eq!(reconciled.data()["grade"], "failed");
    let replay = w
        .operator
        .call("POST", &format!("/actions/effects/{id}/replay"), None, None)
        .await;
    assert_eq!(replay.status, 409);
    assert_eq!(replay.code(), "effect_not_unknown");
    assert_eq!(w.fixture.write_count(), 0);
}

#[tokio::test]
async fn before_the_deadline_passes_not_found_stays_unknown() {
    let w = world(&["--absence-grace-ms", "60000"]).await;
    w.fixture.set_faults(FaultPlan {
        should_retry_header: false,
        ..FaultPlan::new(FaultMode::ErrorBeforeCommit)
    });
    let inv = w.agent.invoke("refund", refund_input(1), None, None).await;
    let id = inv.data()["effectId"].as_str().unwrap();
    let reconciled = w
        .agent
        .call(
            "POST",
            &format!("/actions/effects/{id}/reconcile"),
            None,
            None,
        )
        .await;
    assert_eq!(
        reconciled.data()["outcome"],
        "unknown",
        "an attempt may still land"
    );
    let last = reconciled.data()["evidence"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["kind"], "reconcile");
    assert!(
        last["message"].as_str().unwrap().contains("may still land"),
        "{last}"
    );
}

#[tokio::test]
async fn a_replay_after_a_dropped_answer_reuses_the_provider_identity_and_writes_nothing_new() {
    let w = world(&[]).await;
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
    let inv = w.agent.invoke("refund", refund_input(1), None, None).await;
    assert_eq!(inv.data()["status"], "unknown");
    let id = inv.data()["effectId"].as_str().unwrap();
    let replayed = w
        .operator
        .call("POST", &format!("/actions/effects/{id}/replay"), None, None)
        .await;
    assert_eq!(replayed.status, 200, "{:?}", replayed.body);
    assert_eq!(
        replayed.data()["outcome"],
        "succeeded",
        "{:?}",
        replayed.body
    );
    assert_eq!(replayed.data()["id"], id, "never a new effect");
    assert_eq!(replayed.data()["attemptCount"], 2);
    assert_eq!(
        w.fixture.write_count(),
        1,
        "the provider's idempotency key made the replay the same refund"
    );
    assert_eq!(
        replayed.data()["externalReference"],
        w.fixture.refunds()[0].id.as_str()
    );
    // Agents cannot replay; template actions without provider idempotency cannot either.
    assert_eq!(
        w.agent
            .call("POST", &format!("/actions/effects/{id}/replay"), None, None)
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn manual_resolution_needs_another_key_and_every_step_is_evidence_in_order() {
    let w = world(&[]).await;
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::ErrorAfterCommit));
    // The operator invokes, so the operator may not resolve it.
    let inv = w
        .operator
        .invoke("refund", refund_input(1), None, None)
        .await;
    let id = inv.data()["effectId"].as_str().unwrap().to_string();
    let body = json!({"outcome": "succeeded", "reason": "Refund found in the dashboard", "externalReference": "re_manual"});
    let own = w
        .operator
        .call(
            "POST",
            &format!("/actions/effects/{id}/resolve"),
            Some(body.clone()),
            None,
        )
        .await;
    assert_eq!(own.status, 403);
    assert_eq!(own.code(), "self_resolution_forbidden");
    assert_eq!(
        w.agent
            .call(
                "POST",
                &format!("/actions/effects/{id}/resolve"),
                Some(body.clone()),
                None
            )
            .await
            .status,
        403,
        "agents lack actions:resolve"
    );

    let resolver = Api::new(&w.server, &w.server.keys("test", "operator"));
    let note = resolver
        .call(
            "POST",
            &format!("/actions/effects/{id}/notes"),
            Some(json!({"note": "checking the dashboard"})),
            None,
        )
        .await;
    assert_eq!(note.status, 200, "{:?}", note.body);
    let resolved = resolver
        .call(
            "POST",
            &format!("/actions/effects/{id}/resolve"),
            Some(body),
            None,
        )
        .await;
    assert_eq!(resolved.status, 200, "{:?}", resolved.body);
    assert_eq!(resolved.data()["outcome"], "succeeded");
    assert_eq!(
        resolved.data()["grade"],
        "acknowledged",
        "a manual success is never `confirmed`"
    );
    assert_eq!(resolved.data()["externalReference"], "re_manual");
    let kinds: Vec<&str> = resolved.data()["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "accepted",
            "attempt",
            "response",
            "note",
            "manual_resolution"
        ]
    );
    let seqs: Vec<u64> = resolved.data()["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    let manual = resolved.data()["evidence"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(manual["data"]["label"], "manual");
    let again = resolver
        .call(
            "POST",
            &format!("/actions/effects/{id}/resolve"),
            Some(json!({"outcome": "failed", "reason": "x"})),
            None,
        )
        .await;
    assert_eq!(again.status, 409, "settled is final");
    assert_eq!(w.fixture.write_count(), 1);

    // The invocation-level resolve works the same way.
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::ErrorAfterCommit));
    let inv = w.agent.invoke("refund", refund_input(2), None, None).await;
    let inv_id = inv.data()["id"].as_str().unwrap();
    let resolved = resolver
        .call(
            "POST",
            &format!("/actions/invocations/{inv_id}/resolve"),
            Some(json!({"outcome": "failed", "evidence": "No refund exists"})),
            None,
        )
        .await;
    assert_eq!(resolved.data()["status"], "failed", "{:?}", resolved.body);
}

#[tokio::test]
async fn retry_of_is_accepted_only_after_a_settled_failure() {
    let w = world(&[]).await;
    let ok = w.agent.invoke("refund", refund_input(1), None, None).await;
    let refused = w
        .agent
        .post(
            "/actions/refund/invoke",
            json!({"input": refund_input(2), "retryOf": ok.data()["id"]}),
        )
        .await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.code(), "retry_of_not_failed");
    w.fixture.set_faults(FaultPlan::new(FaultMode::Reject));
    let failed = w.agent.invoke("refund", refund_input(3), None, None).await;
    assert_eq!(failed.data()["status"], "failed");
    let retry = w
        .agent
        .post(
            "/actions/refund/invoke",
            json!({"input": refund_input(3), "retryOf": failed.data()["id"]}),
        )
        .await;
    assert_eq!(retry.data()["status"], "succeeded", "{:?}", retry.body);
    assert_eq!(retry.data()["retryOf"], failed.data()["id"]);
    assert_eq!(w.fixture.write_count(), 2);
}

#[tokio::test]
async fn a_verify_read_back_grades_confirmed_and_a_mismatch_only_acknowledged() {
    let w = world(&["--dispatch-timeout-ms", "2000"]).await;
    let base = w.fixture.base_url();
    let authority = base.trim_start_matches("http://");
    // The fixture, like Stripe, takes the key as the Basic user name: the read-back can carry it.
    let create = w
        .operator
        .post(
            "/actions",
            json!({
                "name": "refund-verified",
                "method": "POST",
                "urlTemplate": format!("{base}/v1/refunds"),
                "headers": {"Authorization": "Bearer {{secret:STRIPE_TEST_KEY}}"},
                "bodyTemplate": {"payment_intent": "{{input.pi}}", "amount": "{{input.amount}}"},
                "verify": {
                    "url": format!("http://{{{{secret:STRIPE_TEST_KEY}}}}:@{authority}/v1/refunds/{{{{response.id}}}}"),
                    "status": 200,
                    "match": [{"path": "status", "equals": "succeeded"}, {"path": "amount", "equals": "{{input.amount}}"}]
                }
            }),
        )
        .await;
    assert_eq!(create.status, 201, "{:?}", create.body);
    let inv = w
        .agent
        .invoke(
            "refund-verified",
            json!({"pi": "pi_v", "amount": 700}),
            None,
            None,
        )
        .await;
    assert_eq!(inv.data()["status"], "succeeded", "{:?}", inv.body);
    assert_eq!(
        inv.data()["grade"],
        "confirmed",
        "the read-back matched: {:?}",
        inv.body
    );

    // Without a matching read-back a 2xx is only acknowledged.
    let lax = w
        .operator
        .call("PATCH", "/actions/refund-verified", Some(json!({"verify": {
            "url": format!("http://{{{{secret:STRIPE_TEST_KEY}}}}:@{authority}/v1/refunds/{{{{response.id}}}}"),
            "status": 200,
            "match": [{"path": "amount", "equals": 1}]
        }})), None)
        .await;
    assert_eq!(lax.status, 200, "{:?}", lax.body);
    let inv = w
        .agent
        .invoke(
            "refund-verified",
            json!({"pi": "pi_w", "amount": 800}),
            None,
            None,
        )
        .await;
    assert_eq!(inv.data()["grade"], "acknowledged", "{:?}", inv.body);
    assert_eq!(w.fixture.write_count(), 2);
    let echoed = inv.body.to_string();
    assert!(!echoed.contains(STRIPE_SECRET), "no secret in the answer");
}
