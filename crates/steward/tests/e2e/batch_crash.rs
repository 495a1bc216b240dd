//! Group commit on both stores: the process dies between a batch's commit and the dispatches it
//! releases. One body, [`crash_between_a_batch_commit_and_its_dispatches`], runs against the
//! embedded store here and against PostgreSQL in `postgres.rs`.

use crate::harness::*;
use std::time::Duration;

/// Sixteen invokes at once share batches; the first to pass `server_after_record` (its attempt
/// committed, nothing sent) aborts the process, while the others of its batch have their
/// attempts committed too and nothing sent. After a restart, every operation whose attempt was
/// committed is `unknown` and sends nothing when invoked again, and every other one runs once:
/// at most one provider write per operation, counted at the provider. `store_args` picks the
/// store (none: the embedded one in the data directory).
pub(crate) async fn crash_between_a_batch_commit_and_its_dispatches(store_args: &[&str]) {
    const OPERATIONS: u32 = 16;
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture().await;
    let mut args = vec!["--allow-insecure-destinations"];
    args.extend_from_slice(store_args);
    let mut server = Server::start_with_env(
        &dir.path().join("data"),
        &args,
        &[("STEWARD_CRASH_AT", "server_after_record")],
    );
    let operator = Api::new(&server, &server.keys("test", "operator"));
    refund_action(&operator, &fixture.base_url(), "refund").await;
    let calls: Vec<_> = (0..OPERATIONS)
        .map(|n| {
            let op = operator.clone();
            tokio::spawn(async move {
                op.invoke("refund", refund_input(n), Some(&format!("op-{n}")), None)
                    .await
            })
        })
        .collect();
    let exited = server.wait_exit(Duration::from_secs(20)).await;
    assert!(
        exited.is_some_and(|s| !s.success()),
        "the server aborted at its crash point"
    );
    for call in calls {
        call.abort();
    }
    server.restart();
    let operator = Api::new(&server, &server.keys("test", "operator"));
    let (mut unknown, mut ran) = (0u64, 0u64);
    for n in 0..OPERATIONS {
        let before = fixture.write_count();
        let again = operator
            .invoke("refund", refund_input(n), Some(&format!("op-{n}")), None)
            .await;
        let status = again.data()["status"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let writes = fixture.write_count() - before;
        match status.as_str() {
            "unknown" => {
                unknown += 1;
                assert_eq!(writes, 0, "op-{n}: its committed attempt is not sent again");
            }
            "succeeded" => {
                ran += 1;
                assert_eq!(
                    writes, 1,
                    "op-{n}: never attempted before the crash, runs once"
                );
            }
            other => panic!("op-{n}: {other}: {}", again.data()),
        }
    }
    assert!(unknown >= 1, "the crashed request's attempt was committed");
    assert_eq!(unknown + ran, u64::from(OPERATIONS));
    assert_eq!(
        fixture.write_count(),
        ran,
        "one write per operation that ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_between_a_batch_commit_and_its_dispatches_writes_at_most_once_embedded() {
    crash_between_a_batch_commit_and_its_dispatches(&[]).await;
}
