//! The shared store: `steward serve --database postgres://...` keeps the embedded store's
//! guarantees, counted at the provider. Each test gets a fresh database `steward_test_<unique>` on
//! `STEWARD_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`), dropped
//! afterwards. An unreachable PostgreSQL fails the test; it is never skipped.

use crate::harness::*;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use steward_fixture::{FaultMode, FaultPlan};

const TEST_DATABASE_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database of its own for one test, dropped when the test ends, passed or panicked.
struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl TestDatabase {
    async fn create() -> TestDatabase {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let admin_url = std::env::var("STEWARD_TEST_DATABASE_URL")
            .unwrap_or_else(|_| TEST_DATABASE_URL_DEFAULT.to_string());
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!(
            "steward_test_e2e_{}_{nanos:x}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        admin_client(&admin_url)
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        let url = with_database(&admin_url, &name);
        TestDatabase {
            admin_url,
            name,
            url,
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // No runtime to await on in Drop: a thread with its own runs the DROP, even while a
        // failed test unwinds. FORCE ends the connections of a server that is still running.
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                admin_client(&admin_url)
                    .await
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
            })
        })
        .join();
    }
}

async fn admin_client(admin_url: &str) -> tokio_postgres::Client {
    match tokio_postgres::connect(admin_url, tokio_postgres::NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(connection);
            client
        }
        Err(e) => panic!(
            "PostgreSQL is unreachable at {admin_url} ({e}). These tests need a server that lets \
             them create databases: start one, or point STEWARD_TEST_DATABASE_URL at one."
        ),
    }
}

/// `url` with its database replaced by `name` (URL or `key=value` form).
fn with_database(url: &str, name: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return format!("{url} dbname={name}");
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let query = rest[authority_end..]
        .find('?')
        .map_or("", |i| &rest[authority_end + i..]);
    format!("{}/{name}{query}", &url[..scheme_end + 3 + authority_end])
}

fn audit_verify(world: &World, database: &str) -> (bool, String) {
    let out = Command::new(steward_bin())
        .args(["audit", "verify", "--data"])
        .arg(&world.server.data)
        .args(["--database", database])
        .output()
        .expect("audit verify runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_invokes_of_one_operation_key_write_once_on_postgres() {
    let database = TestDatabase::create().await;
    let w = world(&["--database", &database.url]).await;
    assert!(
        !w.server.data.join(steward_server::DATABASE_FILE).exists(),
        "with --database the embedded store is not used"
    );
    let mut tasks = Vec::new();
    for i in 0..64 {
        let agent = w.agent.clone();
        tasks.push(tokio::spawn(async move {
            agent
                .invoke(
                    "refund",
                    refund_input(1),
                    Some("order-1"),
                    Some(&format!("idem-{i}")),
                )
                .await
        }));
    }
    let mut invocations = std::collections::BTreeSet::new();
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        invocations.insert(reply.data()["id"].as_str().unwrap().to_string());
    }
    assert_eq!(
        invocations.len(),
        1,
        "all 64 answers must name one invocation: {invocations:?}"
    );
    assert_eq!(w.fixture.write_count(), 1, "exactly one provider write");
    let effects = w.agent.get("/actions/effects?action=refund").await;
    assert_eq!(effects.body["pagination"]["total"], 1, "{:?}", effects.body);
    let (ok, text) = audit_verify(&w, &database.url);
    assert!(ok, "the audit chain in PostgreSQL verifies: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_the_provider_holds_a_committed_write_ends_unknown_on_postgres() {
    let database = TestDatabase::create().await;
    let mut w = world(&["--database", &database.url]).await;
    w.fixture
        .set_faults(FaultPlan::new(FaultMode::HoldAfterCommit).hold_ms(5_000));
    let agent = w.agent.clone();
    let pending = tokio::spawn(async move {
        agent
            .invoke("refund", refund_input(1), Some("order-1"), None)
            .await
    });
    let fixture = &w.fixture;
    assert!(
        eventually(Duration::from_secs(10), || fixture.write_count() == 1).await,
        "the provider committed"
    );
    w.server.kill();
    drop(pending);
    w.server.restart();
    let agent = Api::new(&w.server, &w.server.keys("test", "agent"));

    let invocations = agent.get("/actions/invocations").await;
    let inv = invocations.data()[0].clone();
    assert_eq!(inv["status"], "unknown", "{inv}");
    let effect_id = inv["effectId"].as_str().expect("governed invocation");
    let effect = agent.get(&format!("/actions/effects/{effect_id}")).await;
    let evidence = effect.data()["evidence"].as_array().expect("evidence");
    assert_eq!(
        evidence.last().expect("evidence")["kind"],
        "restart",
        "recovery on the restarted server said why: {:?}",
        effect.body
    );

    // Re-invoking the same operation returns that effect, and sends nothing.
    let again = agent
        .invoke("refund", refund_input(1), Some("order-1"), None)
        .await;
    assert_eq!(again.data()["id"], inv["id"]);
    assert_eq!(again.data()["status"], "unknown");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(w.fixture.write_count(), 1, "exactly one provider write");
    let (ok, text) = audit_verify(&w, &database.url);
    assert!(ok, "{text}");
}
