//! The database goes away between the provider call and the commit of its answer (issue #26):
//! the invoke's answer says the outcome is unknown (never "nothing was sent"), the replica keeps
//! the answer and records it once the database is back, a resend of the same keys never writes
//! twice and sees the settled outcome, and the effect does not stay `dispatching` without a
//! restart.
//!
//! The embedded store fails its writes through the test-only fault file
//! (`STEWARD_FAIL_WRITES_WHILE_FILE`: while the file exists, every write transaction fails as a
//! failed disk write would, committing nothing). PostgreSQL loses every connection: the test
//! forbids new ones (`ALLOW_CONNECTIONS false`) and terminates the ones Steward holds, as a
//! failover does, then lets them back.

use crate::harness::*;
use crate::postgres::{admin_client, TestDatabase};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use steward_fixture::{FaultMode, FaultPlan};

/// How long the fixture holds the refund's answer after committing it, in milliseconds: time
/// for the test to take the database away before Steward records the answer.
const HOLD_MS: u64 = 1_500;
/// How long the database stays away after the invoke answered, in milliseconds: long enough
/// for the kept answer's first retries to fail.
const OUTAGE_MS: u64 = 1_000;
/// The longest a kept answer may take to land once the database is back (its retries back off
/// to 2 s; generous for a loaded test machine).
const SETTLE_WAIT: Duration = Duration::from_secs(20);

/// Takes the database away and brings it back.
trait Outage {
    async fn start(&self);
    async fn end(&self);
}

/// The embedded store: the fault file fails every write.
struct FailingDisk(PathBuf);

impl Outage for FailingDisk {
    async fn start(&self) {
        std::fs::write(&self.0, b"fail").unwrap();
    }
    async fn end(&self) {
        std::fs::remove_file(&self.0).unwrap();
    }
}

/// PostgreSQL: no new connections, and every open one terminated.
struct LostDatabase {
    admin_url: String,
    name: String,
}

impl Outage for LostDatabase {
    async fn start(&self) {
        let admin = admin_client(&self.admin_url).await;
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {} ALLOW_CONNECTIONS false",
                self.name
            ))
            .await
            .unwrap();
        terminate_backends(&admin, &self.name).await;
    }
    async fn end(&self) {
        admin_client(&self.admin_url)
            .await
            .batch_execute(&format!(
                "ALTER DATABASE {} ALLOW_CONNECTIONS true",
                self.name
            ))
            .await
            .unwrap();
    }
}

/// Terminates every backend connected to `database` (Steward's pool, heartbeat and listener).
pub(crate) async fn terminate_backends(admin: &tokio_postgres::Client, database: &str) -> i64 {
    let rows = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&database],
        )
        .await
        .unwrap();
    rows.len() as i64
}

/// The invocation the operation key names, as the list shows it (`None` while reads fail).
async fn invocation(api: &Api, operation_key: &str) -> Option<Value> {
    let list = api.get("/actions/invocations").await;
    if list.status != 200 {
        return None;
    }
    list.data()
        .as_array()?
        .iter()
        .find(|i| i["operationKey"] == operation_key)
        .cloned()
}

async fn the_answer_lost_after_the_provider_call_is_unknown_then_settled(
    w: &World,
    outage: &impl Outage,
) {
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::HoldAfterCommit).hold_ms(HOLD_MS));
    let agent = w.agent.clone();
    let first = tokio::spawn(async move {
        agent
            .invoke("refund", refund_input(1), Some("order-1"), Some("idem-1"))
            .await
    });
    let fixture = &w.fixture;
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 1).await,
        "the provider committed the refund"
    );
    outage.start().await;
    let answer = first.await.unwrap();

    // The refund was made: the answer must not say that nothing was sent.
    assert_eq!(answer.status, 503, "{:?}", answer.body);
    assert_eq!(answer.code(), "outcome_unknown", "{:?}", answer.body);
    let error = &answer.body["error"];
    assert_eq!(error["details"]["mayHaveBeenSent"], true, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(!message.contains("nothing was sent"), "{message}");
    assert!(message.contains("same operationKey"), "{message}");
    assert_eq!(answer.retry_after.as_deref(), Some("1"));
    let effect_id = error["details"]["effectId"].as_str().unwrap().to_string();

    // A resend while the database is away writes nothing at the provider.
    let during = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), Some("idem-1"))
        .await;
    assert_ne!(during.status, 200, "{:?}", during.body);
    tokio::time::sleep(Duration::from_millis(OUTAGE_MS)).await;
    assert_eq!(
        w.fixture.write_count(),
        1,
        "no second write during the outage"
    );
    outage.end().await;

    // The replica records the answer it kept, without a restart and without a resend.
    let mut settled = None;
    let started = std::time::Instant::now();
    while started.elapsed() < SETTLE_WAIT {
        if let Some(inv) = invocation(&w.agent, "order-1").await {
            if inv["status"] != "running" {
                settled = Some(inv);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settled = settled.expect("the kept answer is recorded once the database is back");
    assert_eq!(settled["status"], "succeeded", "{settled}");
    let effect = w
        .agent
        .get(&format!("/actions/effects/{effect_id}"))
        .await
        .data()
        .clone();
    assert_eq!(effect["outcome"], "succeeded", "{effect}");
    assert_ne!(effect["stage"], "dispatching", "{effect}");

    // The same keys now answer the settled outcome, and nothing is written again.
    let again = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), Some("idem-1"))
        .await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(again.data()["status"], "succeeded", "{:?}", again.body);
    let by_key = w
        .agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(by_key.data()["status"], "succeeded", "{:?}", by_key.body);
    assert_eq!(w.fixture.write_count(), 1, "exactly one provider write");
    assert!(
        w.server.log().contains("recorded a kept answer"),
        "the log says the kept answer was recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_disk_after_the_provider_call_answers_outcome_unknown_and_settles_without_a_restart(
) {
    let (w, fault) = on_a_disk_that_can_fail().await;
    the_answer_lost_after_the_provider_call_is_unknown_then_settled(&w, &FailingDisk(fault)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_postgres_after_the_provider_call_answers_outcome_unknown_and_settles_without_a_restart(
) {
    let database = TestDatabase::create().await;
    let w = world(&["--database", &database.url]).await;
    let outage = LostDatabase {
        admin_url: database.admin_url.clone(),
        name: database.name.clone(),
    };
    the_answer_lost_after_the_provider_call_is_unknown_then_settled(&w, &outage).await;
}

/// A webhook receiver on loopback that answers every request 200 and counts the POSTs.
async fn receiver() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let posts = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = posts.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                if buf[..n].starts_with(b"POST") {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (url, posts)
}

/// One number from the test database.
async fn count(admin: &tokio_postgres::Client, sql: &str) -> i64 {
    admin.query_one(sql, &[]).await.unwrap().get(0)
}

/// Every background loop keeps working after PostgreSQL ended all of Steward's connections (as a
/// failover does): the heartbeat beats again, the takeover sweep removes a dead replica, the
/// audit sealer seals what was written afterwards, webhook delivery delivers, and the
/// reconciler settles an unknown effect made afterwards. None of them needs a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_loops_keep_working_after_every_postgres_connection_is_terminated() {
    use std::sync::atomic::Ordering;
    let database = TestDatabase::create().await;
    let w = world(&[
        "--database",
        &database.url,
        "--lease-ms",
        "1000",
        "--reconcile-interval-ms",
        "200",
    ])
    .await;
    let (hook_url, posts) = receiver().await;
    let subscribed = w
        .operator
        .post(
            "/events/topics/environment/subscriptions",
            serde_json::json!({"url": hook_url}),
        )
        .await;
    assert!(subscribed.status < 300, "{:?}", subscribed.body);
    let db = admin_client(&database.url).await;

    let terminated = terminate_backends(&db, &database.name).await;
    assert!(
        terminated >= 2,
        "Steward's connections were terminated: {terminated}"
    );
    let db = admin_client(&database.url).await;
    let beat_before = count(&db, "SELECT COALESCE(MAX(heartbeat_at), 0) FROM replicas").await;
    // A replica that died long ago: the takeover sweep removes its registration.
    db.batch_execute(
        "INSERT INTO replicas (id, started_at, heartbeat_at) VALUES ('rep_gone_before_failover', 0, 0)",
    )
    .await
    .unwrap();

    // Requests may meet a connection that died with the others; each is answered, and a
    // resend goes through once the pool has replaced it.
    let mut halted = false;
    for _ in 0..20 {
        let halt = w
            .operator
            .post(
                "/environment/halt",
                serde_json::json!({"reason": "after the failover"}),
            )
            .await;
        if halt.status == 200 {
            halted = true;
            break;
        }
        assert_eq!(halt.code(), "STORAGE_UNAVAILABLE", "{:?}", halt.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(halted, "the halt went through once the pool reconnected");
    let resumed = w
        .operator
        .post("/environment/resume", serde_json::json!({}))
        .await;
    assert_eq!(resumed.status, 200, "{:?}", resumed.body);
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::DropAfterCommit));
    let unknown = w
        .agent
        .invoke("refund", refund_input(7), Some("after-failover"), None)
        .await;
    assert_eq!(unknown.data()["status"], "unknown", "{:?}", unknown.body);

    let mut seen = (false, false, false, false, false);
    let started = std::time::Instant::now();
    while started.elapsed() < SETTLE_WAIT {
        seen.0 =
            count(&db, "SELECT COALESCE(MAX(heartbeat_at), 0) FROM replicas").await > beat_before;
        seen.1 = count(
            &db,
            "SELECT COUNT(*) FROM replicas WHERE id = 'rep_gone_before_failover'",
        )
        .await
            == 0;
        seen.2 = count(&db, "SELECT COUNT(*) FROM audit WHERE seq IS NULL").await == 0;
        seen.3 = posts.load(Ordering::SeqCst) >= 2;
        seen.4 = invocation(&w.agent, "after-failover")
            .await
            .is_some_and(|inv| inv["status"] == "succeeded");
        if seen == (true, true, true, true, true) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (heartbeat, sweep, sealer, webhooks, reconciler) = seen;
    assert!(heartbeat, "the heartbeat beats again");
    assert!(sweep, "the takeover sweep still removes dead replicas");
    assert!(
        sealer,
        "the audit sealer seals what was written after the failover"
    );
    assert!(
        webhooks,
        "webhook delivery delivers the halt and the resume"
    );
    assert!(
        reconciler,
        "the reconciler settles the unknown effect made after the failover"
    );
    assert_eq!(w.fixture.write_count(), 1, "the reconciler only looked");
}

/// A gated invoke whose parked submit commits but loses its commit's answer (the embedded
/// store's commit-unknown fault: the batch commits, then the answer is an I/O error, as the
/// long fault run's failover did on PostgreSQL, seed 26) is answered `503 outcome_unknown`
/// with `mayHaveBeenSent: false`, never `STORAGE_UNAVAILABLE` ("changed nothing"). Once the
/// disk heals, a resend with the same key sees the parked invocation it recorded, once: one
/// approval, nothing sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_submit_whose_commit_answer_is_lost_answers_outcome_unknown_and_is_found_once() {
    let (w, fault) = on_a_disk_that_can_fail().await;
    let (operator, agent, fixture) = (&w.operator, &w.agent, &w.fixture);
    let gated = operator
        .call(
            "PATCH",
            "/actions/refund",
            Some(serde_json::json!({"requiresApproval": true})),
            None,
        )
        .await;
    assert_eq!(gated.status, 200, "{:?}", gated.body);

    std::fs::write(&fault, steward_store::COMMIT_UNKNOWN_FAULT).unwrap();
    // The same request each time: one operation key, one `Idempotency-Key`.
    let invoke_parked = || {
        agent.invoke(
            "refund",
            refund_input(1),
            Some("order-parked"),
            Some("idem-parked"),
        )
    };
    let answer = invoke_parked().await;
    std::fs::remove_file(&fault).unwrap();
    assert_eq!(answer.status, 503, "{:?}", answer.body);
    assert_eq!(answer.code(), "outcome_unknown", "{:?}", answer.body);
    let error = &answer.body["error"];
    assert_eq!(error["details"]["mayHaveBeenSent"], false, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("waits for its approval"),
        "the parked submit's answer: {message}"
    );
    assert!(!message.contains("changed nothing"), "{message}");

    // The disk is back: the same keys find what the lost commit recorded, once.
    let mut found = None;
    for _ in 0..50 {
        let again = invoke_parked().await;
        if again.status == 202 {
            found = Some(again);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = found.expect("a resend once the disk is back is answered");
    assert_eq!(
        again.data()["status"],
        "pending_approval",
        "{:?}",
        again.body
    );
    let by_key = agent
        .invoke("refund", refund_input(1), Some("order-parked"), None)
        .await;
    assert_eq!(by_key.status, 202, "{:?}", by_key.body);
    assert_eq!(by_key.data()["id"], again.data()["id"], "one invocation");
    assert_eq!(by_key.data()["approvalId"], again.data()["approvalId"]);
    let inbox = operator.get("/approvals?status=pending").await;
    assert_eq!(
        inbox.body["pagination"]["total"], 1,
        "one approval: {:?}",
        inbox.body
    );
    let listed = agent.get("/actions/invocations").await;
    let ours = listed
        .data()
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["operationKey"] == "order-parked")
        .count();
    assert_eq!(ours, 1, "one invocation for the key");
    assert_eq!(fixture.write_count(), 0, "nothing is sent while it waits");
}

/// An embedded server whose data files fail every write while the returned file exists
/// (`FAIL_WRITES_WHILE_FILE_ENV`), with the fixture and a `refund` action.
async fn on_a_disk_that_can_fail() -> (World, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let fault = dir.path().join("fail-writes");
    let fixture = fixture().await;
    let server = Server::start_with_env(
        &dir.path().join("data"),
        &["--allow-insecure-destinations"],
        &[(
            steward_store::FAIL_WRITES_WHILE_FILE_ENV,
            fault.to_str().unwrap(),
        )],
    );
    let operator = Api::new(&server, &server.keys("test", "operator"));
    let agent = Api::new(&server, &server.keys("test", "agent"));
    refund_action(&operator, &fixture.base_url(), "refund").await;
    let world = World {
        server,
        fixture,
        operator,
        agent,
        _dir: dir,
    };
    (world, fault)
}
