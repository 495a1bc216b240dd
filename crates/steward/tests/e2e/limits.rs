//! Impact limits: every applicable limit is reserved atomically just before dispatch; success
//! consumes, failure releases, unknown stays as exposure; an exhausted limit or a missing
//! quantity refuses the effect with nothing sent. Counts are the fixture's committed writes.

use crate::harness::*;
use serde_json::{json, Value};
use steward_fixture::{FaultMode, FaultPlan};

async fn create_limit(operator: &Api, body: Value) -> Value {
    let created = operator.post("/impact-limits", body).await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    created.data().clone()
}

async fn limit(api: &Api, id: &str) -> Value {
    let read = api.get(&format!("/impact-limits/{id}")).await;
    assert_eq!(read.status, 200, "{:?}", read.body);
    read.data().clone()
}

fn numbers(l: &Value) -> (i64, i64, i64, i64) {
    let n = |k: &str| l[k].as_i64().unwrap_or_else(|| panic!("{k} in {l}"));
    (
        n("consumed"),
        n("reserved"),
        n("unknownExposure"),
        n("available"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limit_of_ten_lets_exactly_ten_of_a_hundred_concurrent_invokes_through() {
    let w = world(&[]).await;
    let lim = create_limit(
        &w.operator,
        json!({"name": "ten refunds", "dimension": "resource_mutations", "period": "total",
               "amount": 10, "actionName": "refund"}),
    )
    .await;
    assert_eq!(lim["unit"], "resource_mutations");
    assert_eq!(numbers(&lim), (0, 0, 0, 10));
    let id = lim["id"].as_str().unwrap().to_string();

    let tasks: Vec<_> = (0..100u32)
        .map(|n| {
            let agent = w.agent.clone();
            tokio::spawn(async move {
                agent
                    .invoke("refund", refund_input(n), Some(&format!("order-{n}")), None)
                    .await
            })
        })
        .collect();
    let mut succeeded = 0;
    let mut refused = Vec::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        match (
            reply.data()["status"].as_str(),
            reply.data()["grade"].as_str(),
        ) {
            (Some("succeeded"), Some("confirmed")) => succeeded += 1,
            (Some("failed"), Some("refused")) => refused.push(reply.data().clone()),
            other => panic!("unexpected answer {other:?}: {:?}", reply.body),
        }
    }
    assert_eq!(succeeded, 10);
    assert_eq!(refused.len(), 90);
    assert_eq!(w.fixture.write_count(), 10, "exactly ten provider writes");

    // The numbers add up: ten consumed, nothing held, nothing left.
    let after = limit(&w.agent, &id).await;
    assert_eq!(numbers(&after), (10, 0, 0, 0), "{after}");
    let listed = w.operator.get("/impact-limits").await;
    assert_eq!(numbers(&listed.data()[0]), (10, 0, 0, 0));

    // A refused effect was never attempted and says why.
    let one = &refused[0];
    assert_eq!(one["responseStatus"], Value::Null);
    assert_eq!(one["outcome"], "not_dispatched");
    assert_eq!(one["error"]["code"], "impact_limit_exhausted", "{one}");
    let effect = w
        .agent
        .get(&format!(
            "/actions/effects/{}",
            one["effectId"].as_str().unwrap()
        ))
        .await;
    assert_eq!(effect.data()["attempts"], json!([]));
    assert_eq!(effect.data()["grade"], "refused");
    let kinds: Vec<&str> = effect.data()["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"refused"), "{kinds:?}");
    let unresolved = w
        .agent
        .get("/actions/effects?grade=refused&limit=200")
        .await;
    assert_eq!(unresolved.body["pagination"]["total"], 90);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn success_consumes_failure_releases_unknown_is_exposure() {
    let w = world(&["--dispatch-timeout-ms", "3000"]).await;
    let lim = create_limit(
        &w.operator,
        json!({"name": "daily refunds", "dimension": "money", "currency": "USD", "period": "day",
               "amount": 5000}),
    )
    .await;
    assert_eq!(
        (lim["unit"].as_str(), lim["currency"].as_str()),
        (Some("usd"), Some("usd"))
    );
    let id = lim["id"].as_str().unwrap().to_string();
    let pay = |n: u32, amount: i64| json!({"paymentIntent": format!("pi_m{n}"), "amount": amount});

    let ok = w.agent.invoke("refund", pay(1, 1000), None, None).await;
    assert_eq!(ok.data()["status"], "succeeded", "{:?}", ok.body);
    assert_eq!(numbers(&limit(&w.agent, &id).await), (1000, 0, 0, 4000));

    // A definitive rejection releases its reservation.
    w.fixture.set_faults(FaultPlan::new(FaultMode::Reject));
    let rejected = w.agent.invoke("refund", pay(2, 700), None, None).await;
    assert_eq!(rejected.data()["status"], "failed", "{:?}", rejected.body);
    assert_eq!(numbers(&limit(&w.agent, &id).await), (1000, 0, 0, 4000));

    // An ambiguous answer keeps it as exposure: it may have happened.
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::ErrorAfterCommit));
    let unknown = w.agent.invoke("refund", pay(3, 1500), None, None).await;
    assert_eq!(unknown.data()["status"], "unknown", "{:?}", unknown.body);
    assert_eq!(numbers(&limit(&w.agent, &id).await), (1000, 0, 1500, 2500));
    let writes = w.fixture.write_count();

    // Each effect's detail shows its hold on the limit, as the limit counts it.
    for (invoked, state, amount) in [
        (&ok, "consumed", 1000),
        (&rejected, "released", 700),
        (&unknown, "exposure", 1500),
    ] {
        let effect = invoked.data()["effectId"].as_str().unwrap();
        let detail = w.operator.get(&format!("/actions/effects/{effect}")).await;
        let holds = detail.data()["reservations"].as_array().unwrap().clone();
        assert_eq!(holds.len(), 1, "{:?}", detail.body);
        assert_eq!(holds[0]["limitId"], id.as_str());
        assert_eq!(
            (holds[0]["state"].as_str(), holds[0]["amount"].as_i64()),
            (Some(state), Some(amount))
        );
        assert!(detail.data()["preview"].is_null());
    }

    // More than is available is refused, nothing sent; what fits still runs.
    let too_much = w.agent.invoke("refund", pay(4, 2600), None, None).await;
    assert_eq!(too_much.data()["grade"], "refused", "{:?}", too_much.body);
    assert_eq!(w.fixture.write_count(), writes);
    let fits = w.agent.invoke("refund", pay(5, 2500), None, None).await;
    assert_eq!(fits.data()["status"], "succeeded", "{:?}", fits.body);
    assert_eq!(numbers(&limit(&w.agent, &id).await), (3500, 0, 1500, 0));

    // Lowering the limit releases nothing and never goes negative.
    let lowered = w
        .operator
        .call(
            "PATCH",
            &format!("/impact-limits/{id}"),
            Some(json!({"amount": 100})),
            None,
        )
        .await;
    assert_eq!(lowered.status, 200, "{:?}", lowered.body);
    assert_eq!(numbers(lowered.data()), (3500, 0, 1500, 0));

    // Another currency is not capped by a usd limit.
    let eur = w
        .agent
        .invoke(
            "refund",
            json!({"paymentIntent": "pi_eur", "amount": 9000, "currency": "eur"}),
            None,
            None,
        )
        .await;
    assert_eq!(eur.data()["status"], "succeeded", "{:?}", eur.body);

    // Archived, it stops applying to new effects and still reports what it holds.
    let archived = w
        .operator
        .call("DELETE", &format!("/impact-limits/{id}"), None, None)
        .await;
    assert_eq!(archived.status, 200, "{:?}", archived.body);
    assert_eq!(archived.data()["archived"], true);
    let big = w.agent.invoke("refund", pay(6, 4000), None, None).await;
    assert_eq!(big.data()["status"], "succeeded", "{:?}", big.body);
    assert_eq!(w.operator.get("/impact-limits").await.data(), &json!([]));
    let all = w.operator.get("/impact-limits?includeArchived=true").await;
    assert_eq!(numbers(&all.data()[0]), (3500, 0, 1500, 0));

    // Only impact-limits:write changes limits; the agent may read them.
    let denied = w
        .agent
        .post(
            "/impact-limits",
            json!({"name": "x", "dimension": "emails", "period": "day", "amount": 1}),
        )
        .await;
    assert_eq!(denied.status, 403);
    assert_eq!(
        denied.body["error"]["details"]["requiredScope"],
        "impact-limits:write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_declared_quantity_the_input_lacks_is_refused_unsent() {
    let w = world(&[]).await;
    let created = w
        .operator
        .post(
            "/actions",
            json!({
                "name": "send-email",
                "method": "POST",
                "urlTemplate": format!("{}/v1/refunds", w.fixture.base_url()),
                "bodyTemplate": {"payment_intent": "{{input.pi}}", "amount": 1},
                "impact": {"dimension": "emails", "amount": "count(input.to)", "bound": "exact"},
            }),
        )
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(
        created.data()["impact"],
        json!({"dimension": "emails", "unit": "emails", "amount": "count(input.to)", "bound": "exact"})
    );
    assert_eq!(created.data()["governed"], true);
    let lim = create_limit(
        &w.operator,
        json!({"name": "emails", "dimension": "emails", "period": "day", "amount": 3}),
    )
    .await;
    let before = w.fixture.write_count();
    let missing = w
        .agent
        .invoke("send-email", json!({"pi": "pi_e1"}), None, None)
        .await;
    assert_eq!(missing.data()["grade"], "refused", "{:?}", missing.body);
    assert_eq!(missing.data()["error"]["code"], "impact_quantity_missing");
    let too_many = w
        .agent
        .invoke(
            "send-email",
            json!({"pi": "pi_e2", "to": ["a", "b", "c", "d"]}),
            None,
            None,
        )
        .await;
    assert_eq!(too_many.data()["grade"], "refused", "{:?}", too_many.body);
    assert_eq!(w.fixture.write_count(), before, "nothing was sent");
    assert_eq!(
        numbers(&limit(&w.operator, lim["id"].as_str().unwrap()).await),
        (0, 0, 0, 3)
    );
}
