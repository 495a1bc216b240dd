//! Graceful shutdown: on SIGTERM the server logs it, refuses new connections at once, lets the
//! invoke in flight record its provider's answer, and exits 0; a provider slower than
//! `--shutdown-grace-ms` is cut at the grace, and the next start takes its attempt over as
//! `unknown`. Counted at the fixture: exactly one write either way.

use crate::harness::*;
use std::time::{Duration, Instant};
use steward_fixture::{FaultMode, FaultPlan};

/// How long the fixture holds its answer after committing the refund, in milliseconds: long
/// enough to send SIGTERM and see new connections refused while the call is in flight.
const HOLD_MS: u64 = 3_000;
/// How long the test waits for the signal to close the listener.
const REFUSAL_WAIT: Duration = Duration::from_secs(5);

/// Waits until a new connection to `url` is refused (each probe a fresh client, so no pooled
/// connection answers); false if it still connects after [`REFUSAL_WAIT`].
async fn refuses_new_connections(url: &str) -> bool {
    let started = Instant::now();
    while started.elapsed() < REFUSAL_WAIT {
        let probe = reqwest::Client::builder()
            .timeout(Duration::from_millis(500))
            .build()
            .unwrap()
            .get(format!("{url}/healthz"))
            .send()
            .await;
        if probe.is_err() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Sends SIGTERM to `server` on a blocking thread and waits (bounded) for its exit: whether it
/// exited 0, how long it took, and the server back.
fn terminate(mut server: Server) -> tokio::task::JoinHandle<(bool, Duration, Server)> {
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let ok = server.terminate();
        (ok, started.elapsed(), server)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_lets_the_invoke_in_flight_record_its_answer_and_exits_0() {
    let World {
        server,
        fixture,
        agent,
        _dir,
        ..
    } = world(&[]).await;
    fixture.set_faults(FaultPlan::new(FaultMode::HoldAfterCommit).hold_ms(HOLD_MS));
    let call = tokio::spawn(async move {
        agent
            .invoke(
                "refund",
                refund_input(1),
                Some("in-flight-at-sigterm"),
                None,
            )
            .await
    });
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 1).await,
        "the provider call did not arrive"
    );
    let url = server.url.clone();
    let stopping = terminate(server);
    assert!(
        refuses_new_connections(&url).await,
        "a new connection was still accepted after SIGTERM"
    );
    assert!(!call.is_finished(), "the invoke was still in flight then");

    let (exited_0, took, mut server) = stopping.await.unwrap();
    assert!(exited_0, "no clean exit; log:\n{}", server.log());
    assert!(
        took >= Duration::from_millis(HOLD_MS / 2),
        "it waited for the call ({took:?})"
    );
    let answered = call.await.unwrap();
    assert_eq!(answered.status, 200, "{:?}", answered.body);
    assert_eq!(
        answered.data()["status"],
        "succeeded",
        "{:?}",
        answered.body
    );
    let log = server.log();
    for line in [
        "stop signal received",
        "SIGTERM",
        "shutting down",
        "shutdown complete",
    ] {
        assert!(log.contains(line), "no {line:?} in the log:\n{log}");
    }

    // Recorded settled, as answered: the next start has nothing to take over.
    server.restart();
    let operator = Api::new(&server, &server.keys("test", "operator"));
    let id = answered.data()["id"].as_str().unwrap();
    let stored = operator.get(&format!("/actions/invocations/{id}")).await;
    assert_eq!(stored.status, 200, "{:?}", stored.body);
    assert_eq!(stored.data()["status"], "succeeded", "{:?}", stored.body);
    assert_eq!(fixture.write_count(), 1, "exactly one provider write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_slower_than_the_grace_is_cut_at_it_and_taken_over_as_unknown() {
    const GRACE_MS: u64 = 500;
    let World {
        server,
        fixture,
        agent,
        _dir,
        ..
    } = world(&["--shutdown-grace-ms", &GRACE_MS.to_string()]).await;
    fixture.set_faults(FaultPlan::new(FaultMode::HoldAfterCommit).hold_ms(4 * HOLD_MS));
    let call = tokio::spawn(async move {
        agent
            .invoke(
                "refund",
                refund_input(2),
                Some("slower-than-the-grace"),
                None,
            )
            .await
    });
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 1).await,
        "the provider call did not arrive"
    );
    let (exited_0, took, mut server) = terminate(server).await.unwrap();
    assert!(exited_0, "no clean exit; log:\n{}", server.log());
    assert!(
        took < Duration::from_millis(HOLD_MS),
        "it did not wait past the grace ({took:?})"
    );
    let log = server.log();
    assert!(
        log.contains("shutdown grace ran out") && log.contains("dispatches_left=1"),
        "{log}"
    );
    // The client's connection was cut: it got no answer.
    assert!(call.await.is_err(), "the cut call answered");

    server.restart();
    let operator = Api::new(&server, &server.keys("test", "operator"));
    let listed = operator.get("/actions/invocations").await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    let statuses: Vec<&str> = listed
        .data()
        .as_array()
        .expect("a list of invocations")
        .iter()
        .map(|i| i["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["unknown"], "{:?}", listed.body);
    assert_eq!(fixture.write_count(), 1, "exactly one provider write");
}

/// A SIGTERM sent the moment the server says it is listening still finds the handler: the stop
/// is clean (exit 0), never the default action's kill. Repeated, because the window it guards
/// (ready printed before the shutdown task first ran) is narrow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_the_moment_it_is_ready_is_a_clean_stop() {
    const TRIES: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    for attempt in 0..TRIES {
        let data = dir.path().join(format!("data-{attempt}"));
        let (exited_0, _, server) = terminate(Server::start(&data, &[])).await.unwrap();
        assert!(
            exited_0,
            "try {attempt}: no clean exit; log:\n{}",
            server.log()
        );
    }
}
