//! What an operator graphs: a scrape after a known sequence shows the figures it names
//! (approvals pending and decided, dispatch latency by adapter, unknown and dispatching effects,
//! the reconciler's lag, dead letters, the store pool).

use crate::approvals::gated_world;
use crate::harness::*;
use serde_json::json;

/// Opens `/metrics` on the main listener (it is not served without one).
const METRICS_TOKEN: &str = "metrics-token-for-the-metrics-tests";

async fn scrape(w: &World) -> String {
    let answer = reqwest::Client::new()
        .get(format!("{}/metrics", w.server.url))
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.text().await.unwrap()
}

/// The value of the series spelled `series` exactly (name and labels), if the scrape has it.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().expect("a number"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_approvals_pending_and_decided_and_dispatch_latency_by_adapter() {
    let w = gated_world(&["--metrics-token", METRICS_TOKEN]).await;
    approvals_and_dispatches_are_counted(&w, 8.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_the_same_figures_on_postgres() {
    let database = crate::postgres::TestDatabase::create().await;
    let w = gated_world(&[
        "--metrics-token",
        METRICS_TOKEN,
        "--database",
        &database.url,
    ])
    .await;
    approvals_and_dispatches_are_counted(&w, 16.0).await;
}

/// Three gated invokes, one approved (and dispatched once), one denied, one left pending; the
/// pool lends at most `pool_max` connections.
async fn approvals_and_dispatches_are_counted(w: &World, pool_max: f64) {
    let mut approvals = Vec::new();
    for n in 1..=3 {
        let parked = w
            .agent
            .invoke("refund", refund_input(n), Some(&format!("order-{n}")), None)
            .await;
        assert_eq!(parked.status, 202, "{:?}", parked.body);
        approvals.push(parked.data()["approvalId"].as_str().unwrap().to_string());
    }
    let text = scrape(w).await;
    assert_eq!(
        value(&text, "steward_approvals_pending"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "steward_approval_decisions_total{decision=\"approve\"}"
        ),
        None,
        "a counter appears once it counted: {text}"
    );

    let approved = w
        .operator
        .post(&format!("/approvals/{}/approve", approvals[0]), json!({}))
        .await;
    assert_eq!(approved.status, 200, "{:?}", approved.body);
    assert_eq!(approved.data()["invocation"]["status"], "succeeded");
    let denied = w
        .operator
        .post(&format!("/approvals/{}/deny", approvals[1]), json!({}))
        .await;
    assert_eq!(denied.status, 200, "{:?}", denied.body);
    // A decision that changes nothing (the approval is settled) is not counted.
    w.operator
        .post(&format!("/approvals/{}/deny", approvals[1]), json!({}))
        .await;

    let text = scrape(w).await;
    for (series, expected) in [
        ("steward_approvals_pending", 1.0),
        (
            "steward_approval_decisions_total{decision=\"approve\"}",
            1.0,
        ),
        ("steward_approval_decisions_total{decision=\"deny\"}", 1.0),
        (
            "steward_dispatch_duration_seconds_count{adapter=\"stripe.refund\"}",
            1.0,
        ),
        ("steward_unknown_effects", 0.0),
        ("steward_dispatching_effects", 0.0),
        ("steward_reconcile_lag_seconds", 0.0),
        ("steward_webhook_dead_letters", 0.0),
        ("steward_store_pool_connections_max", pool_max),
        ("steward_store_pool_waiting", 0.0),
    ] {
        assert_eq!(value(&text, series), Some(expected), "{series} in:\n{text}");
    }
    let in_use = value(&text, "steward_store_pool_connections_in_use").expect("pool in use");
    assert!((0.0..=pool_max).contains(&in_use), "{in_use}");
    assert_eq!(w.fixture.write_count(), 1, "one approved, one denied");
}
