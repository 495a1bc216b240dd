//! Several stateless replicas on one PostgreSQL: every rule is held by the database, a dead
//! replica's in-flight work is taken over by exactly one live one, and an approval decided on one
//! replica wakes a long poll on another. Counted at the provider. Each test gets a fresh database
//! (see `postgres.rs`) and three `steward serve --database` processes sharing one master key; the
//! embedded store, by contrast, refuses a second `serve`.

use crate::harness::*;
use crate::postgres::{audit_verify_in, TestDatabase, LEASE_MS};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use steward_fixture::{FaultMode, FaultPlan, FixtureHandle};

const REPLICAS: usize = 3;
/// The vault key every replica shares (secrets sealed by one are opened by the others).
const MASTER_KEY: &str = "5e7a2d1c0b9f8e7d6c5b4a3928170615e4d3c2b1a09f8e7d6c5b4a3928170615";

/// Three replicas on one fresh database, with an operator and an agent client for each (the
/// keys live in the database, so every replica knows them) and a `refund` action.
struct Cluster {
    servers: Vec<Server>,
    fixture: FixtureHandle,
    operators: Vec<Api>,
    agents: Vec<Api>,
    _dir: tempfile::TempDir,
    // Last: dropped after the servers have been killed.
    database: TestDatabase,
    /// One cluster at a time: three replicas under load open up to three full connection pools
    /// (48 connections), and two clusters at once can pass PostgreSQL's default
    /// `max_connections` (100), which fails requests with `STORAGE_UNAVAILABLE` for a reason
    /// that is not the one under test.
    _alone: tokio::sync::MutexGuard<'static, ()>,
}

/// Held by each [`Cluster`] while it lives.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn cluster() -> Cluster {
    let alone = ONE_CLUSTER_AT_A_TIME.lock().await;
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture().await;
    let lease = LEASE_MS.to_string();
    let args = [
        "--allow-insecure-destinations",
        "--database",
        database.url.as_str(),
        "--lease-ms",
        lease.as_str(),
    ];
    let servers: Vec<Server> = (0..REPLICAS)
        .map(|i| {
            Server::start_with_env(
                &dir.path().join(format!("replica-{i}")),
                &args,
                &[(steward_server::MASTER_KEY_ENV, MASTER_KEY)],
            )
        })
        .collect();
    let (operator_key, agent_key) = (
        servers[0].keys("test", "operator"),
        servers[0].keys("test", "agent"),
    );
    let operators: Vec<Api> = servers.iter().map(|s| Api::new(s, &operator_key)).collect();
    let agents: Vec<Api> = servers.iter().map(|s| Api::new(s, &agent_key)).collect();
    refund_action(&operators[0], &fixture.base_url(), "refund").await;
    Cluster {
        servers,
        fixture,
        operators,
        agents,
        _dir: dir,
        database,
        _alone: alone,
    }
}

impl Cluster {
    fn audit_verifies(&self) {
        let (ok, text) = audit_verify_in(&self.servers[0].data, &self.database.url);
        assert!(ok, "the audit chain verifies: {text}");
    }

    /// Every replica's log, for a failure message.
    fn logs(&self) -> String {
        self.servers
            .iter()
            .enumerate()
            .map(|(i, s)| format!("--- replica {i}:\n{}", s.log()))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_hundred_invokes_over_three_replicas_write_each_of_thirty_operation_keys_once() {
    let c = cluster().await;
    let mut tasks = Vec::new();
    for i in 0..300 {
        let agent = c.agents[i % REPLICAS].clone();
        let n = (i % 30) as u32;
        tasks.push(tokio::spawn(async move {
            let key = format!("order-{n}");
            (
                n,
                agent
                    .invoke("refund", refund_input(n), Some(&key), None)
                    .await,
            )
        }));
    }
    let mut invocations: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for task in tasks {
        let (n, reply) = task.await.unwrap();
        assert_eq!(
            reply.status,
            200,
            "order-{n}: {:?}\n{}",
            reply.body,
            c.logs()
        );
        let id = reply.data()["id"]
            .as_str()
            .expect("invocation id")
            .to_string();
        invocations.entry(n).or_default().insert(id);
    }
    assert_eq!(invocations.len(), 30);
    for (n, ids) in &invocations {
        assert_eq!(ids.len(), 1, "order-{n} names one invocation: {ids:?}");
    }
    assert_eq!(
        c.fixture.write_count(),
        30,
        "exactly one provider write per operation key\n{}",
        c.logs()
    );
    let effects = c.agents[1].get("/actions/effects?action=refund").await;
    assert_eq!(
        effects.body["pagination"]["total"], 30,
        "{:?}",
        effects.body
    );
    let listed = c.agents[2].get("/actions/invocations?limit=100").await;
    let statuses: BTreeSet<&str> = listed
        .data()
        .as_array()
        .expect("invocations")
        .iter()
        .map(|inv| inv["status"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(statuses, BTreeSet::from(["succeeded"]), "{:?}", listed.body);
    c.audit_verifies();
}

/// The first invocation a replica lists, polled until it is no longer `running` or `limit`
/// passes.
async fn settled_first_invocation(api: &Api, limit: Duration) -> Value {
    let started = Instant::now();
    loop {
        let listed = api.get("/actions/invocations").await;
        let inv = listed.data()[0].clone();
        if inv["status"] != "running" || started.elapsed() > limit {
            return inv;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_while_the_provider_holds_its_write_is_taken_over_and_nothing_is_resent() {
    let mut c = cluster().await;
    c.fixture
        .set_faults(FaultPlan::new(FaultMode::HoldAfterCommit).hold_ms(LEASE_MS * 30));
    let victim = 1;
    let agent = c.agents[victim].clone();
    let pending = tokio::spawn(async move {
        agent
            .invoke("refund", refund_input(7), Some("order-7"), None)
            .await
    });
    let fixture = &c.fixture;
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 1).await,
        "the provider committed the write"
    );
    c.servers[victim].kill();
    drop(pending);

    // Another replica marks the attempt unknown within the lease (bounded by a few).
    let inv = settled_first_invocation(&c.agents[0], Duration::from_millis(LEASE_MS * 5)).await;
    assert_eq!(inv["status"], "unknown", "{inv}\n{}", c.logs());
    let effect_id = inv["effectId"].as_str().expect("governed invocation");
    let effect = c.agents[2]
        .get(&format!("/actions/effects/{effect_id}"))
        .await
        .data()
        .clone();
    let evidence = effect["evidence"].as_array().expect("evidence");
    let kinds: Vec<&str> = evidence
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["accepted", "attempt", "restart"],
        "one takeover, saying why: {effect}"
    );
    let takeover = &evidence[2]["data"];
    assert!(
        takeover["owner"].is_string() && takeover["recoveredBy"].is_string(),
        "{takeover}"
    );
    assert_ne!(
        takeover["owner"], takeover["recoveredBy"],
        "a live replica took the dead one's attempt over"
    );

    // Nothing is re-sent: the survivors answer with the same invocation, still unknown.
    for agent in [&c.agents[0], &c.agents[2]] {
        let again = agent
            .invoke("refund", refund_input(7), Some("order-7"), None)
            .await;
        assert_eq!(again.status, 200, "{:?}", again.body);
        assert_eq!(again.data()["id"], inv["id"]);
        assert_eq!(again.data()["status"], "unknown");
    }
    tokio::time::sleep(Duration::from_millis(LEASE_MS * 2)).await;
    assert_eq!(c.fixture.write_count(), 1, "exactly one provider write");
    let after = c.agents[0]
        .get(&format!("/actions/effects/{effect_id}"))
        .await;
    assert_eq!(
        after.data()["evidence"].as_array().map(Vec::len),
        Some(3),
        "no second takeover: {:?}",
        after.body
    );
    c.audit_verifies();
}

/// A replica frozen (SIGSTOP) past its lease while the provider holds its write open: another
/// replica takes the attempt over (`unknown`, under the next epoch). Woken (SIGCONT), the frozen
/// replica gets the provider's answer and tries to record it: the fence refuses it (kept as a
/// late answer, the new owner's state stands), it logs that it was fenced, rejoins, and serves
/// on. One provider write for the key, counted at the fixture.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_paused_past_its_lease_is_fenced_and_serves_on_after_it_wakes() {
    let c = cluster().await;
    // Held longer than the pause and the takeover, shorter than the dispatch deadline (10 s):
    // the frozen replica's answer arrives once it is awake again.
    c.fixture.set_faults(
        FaultPlan::new(FaultMode::HoldAfterCommit)
            .hold_ms(LEASE_MS * 7)
            .times(1),
    );
    let victim = 1;
    let agent = c.agents[victim].clone();
    let pending = tokio::spawn(async move {
        agent
            .invoke("refund", refund_input(9), Some("order-9"), None)
            .await
    });
    let fixture = &c.fixture;
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 1).await,
        "the provider committed the write"
    );
    c.servers[victim].signal("STOP");

    // Another replica takes the frozen one for dead and the attempt over, within a few leases.
    let inv = settled_first_invocation(&c.agents[0], Duration::from_millis(LEASE_MS * 5)).await;
    c.servers[victim].signal("CONT");
    assert_eq!(inv["status"], "unknown", "{inv}\n{}", c.logs());
    let effect_id = inv["effectId"].as_str().expect("governed invocation");

    // Awake, the replica records its answer: refused by the fence, and it says so.
    let victim_log = || c.servers[victim].log();
    assert!(
        eventually(Duration::from_millis(LEASE_MS * 15), || victim_log()
            .contains("fenced: another replica took this attempt over"))
        .await,
        "the woken replica's late answer is refused by the fence:\n{}",
        c.logs()
    );
    assert!(
        eventually(Duration::from_millis(LEASE_MS * 10), || victim_log()
            .contains("rejoined with a fresh registration"))
        .await,
        "the woken replica finds it was fenced and rejoins:\n{}",
        victim_log()
    );
    let _ = pending.await;
    let effect = c.agents[0]
        .get(&format!("/actions/effects/{effect_id}"))
        .await
        .data()
        .clone();
    let kinds: Vec<&str> = effect["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["accepted", "attempt", "restart", "late_answer"],
        "one takeover, and the late answer kept as evidence only: {effect}"
    );
    assert_eq!(effect["outcome"], "unknown", "the new owner's state stands");
    assert_eq!(c.fixture.write_count(), 1, "exactly one provider write");

    // It serves on: a new operation through it is sent once and recorded by it.
    let next = c.agents[victim]
        .invoke("refund", refund_input(10), Some("order-10"), None)
        .await;
    assert_eq!(next.status, 200, "{:?}", next.body);
    assert_eq!(next.data()["status"], "succeeded", "{:?}", next.body);
    assert_eq!(c.fixture.write_count(), 2, "one write per operation key");
    c.audit_verifies();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_poll_on_one_replica_wakes_when_another_replica_decides() {
    let c = cluster().await;
    let gated = c.operators[0]
        .call(
            "PATCH",
            "/actions/refund",
            Some(json!({"requiresApproval": true})),
            None,
        )
        .await;
    assert_eq!(gated.status, 200, "{:?}", gated.body);
    let parked = c.agents[0]
        .invoke("refund", refund_input(9), Some("order-9"), None)
        .await;
    assert_eq!(parked.status, 202, "{:?}", parked.body);
    let approval_id = parked.data()["approvalId"]
        .as_str()
        .expect("approvalId")
        .to_string();

    let poller = c.agents[0].clone();
    let path = format!("/approvals/{approval_id}?waitSeconds=30");
    let poll = tokio::spawn(async move {
        let started = Instant::now();
        let reply = poller.get(&path).await;
        (reply, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let approved = c.operators[1]
        .post(&format!("/approvals/{approval_id}/approve"), json!({}))
        .await;
    assert_eq!(approved.status, 200, "{:?}", approved.body);
    assert_eq!(approved.data()["approval"]["status"], "approved");

    let (polled, took) = poll.await.unwrap();
    assert_eq!(polled.data()["status"], "approved", "{:?}", polled.body);
    // Replica 0 re-reads only when woken or when the 30 s wait runs out; only the decision on
    // replica 1, announced through the database, can wake it this early.
    assert!(
        took < Duration::from_secs(15),
        "the long poll answered after {took:?}: replica 0 was not woken by replica 1's decision"
    );

    // The deciding replica dispatched the parked invocation, once.
    let inv = c.agents[2]
        .get(&format!(
            "/actions/invocations/{}",
            parked.data()["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(inv.data()["status"], "succeeded", "{:?}", inv.body);
    tokio::time::sleep(Duration::from_millis(LEASE_MS)).await;
    assert_eq!(c.fixture.write_count(), 1, "exactly one provider write");
}

/// The embedded store serves one process: a second `serve` on the same data directory fails at
/// start, with a message that says why, and the first keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_one_embedded_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = Server::start(&data, &[]);
    let mut second = Command::new(steward_bin())
        .arg("serve")
        .arg("--data")
        .arg(&data)
        .args(["--listen", "127.0.0.1:0", "--reconcile-interval-ms", "0"])
        .env_remove("STEWARD_CRASH_AT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("steward serve starts");
    let started = Instant::now();
    while second.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = second.kill();
            panic!("a second serve on {} kept running", data.display());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = second.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the second serve must fail: {stderr}"
    );
    assert!(
        stderr.contains("already serving"),
        "the error says why: {stderr}"
    );
    let operator = Api::new(&first, &first.keys("test", "operator"));
    assert_eq!(
        operator.get("/actions").await.status,
        200,
        "the first still serves"
    );
}
