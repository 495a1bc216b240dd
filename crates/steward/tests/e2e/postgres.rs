//! The shared store: `steward serve --database postgres://...` keeps the embedded store's
//! guarantees, counted at the provider. Each test gets a fresh database `steward_test_<unique>` on
//! `STEWARD_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`), dropped
//! afterwards. An unreachable PostgreSQL fails the test; it is never skipped.

use crate::harness::*;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const TEST_DATABASE_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database of its own for one test, dropped when the test ends, passed or panicked.
pub(crate) struct TestDatabase {
    pub(crate) admin_url: String,
    pub(crate) name: String,
    pub(crate) url: String,
}

impl TestDatabase {
    #[allow(clippy::disallowed_methods)] // a database name unique across runs on one server
    pub(crate) async fn create() -> TestDatabase {
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

pub(crate) async fn admin_client(admin_url: &str) -> tokio_postgres::Client {
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

/// The lease the multi-replica tests give `serve --lease-ms`, in milliseconds: short, so that
/// takeovers happen quickly, and long enough that a busy test machine does not miss it.
pub(crate) const LEASE_MS: u64 = 1_000;

fn audit_verify(world: &World, database: &str) -> (bool, String) {
    audit_verify_in(&world.server.data, database)
}

/// `steward audit verify` on `database`: whether the chain verifies, and what it printed.
pub(crate) fn audit_verify_in(data: &std::path::Path, database: &str) -> (bool, String) {
    let out = Command::new(steward_bin())
        .args(["audit", "verify", "--data"])
        .arg(data)
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
    crate::exactly_once::sixty_four_concurrent_invokes_write_once(&w).await;
    let (ok, text) = audit_verify(&w, &database.url);
    assert!(ok, "the audit chain in PostgreSQL verifies: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_the_provider_holds_a_committed_write_ends_unknown_on_postgres() {
    let database = TestDatabase::create().await;
    let mut w = world(&["--database", &database.url]).await;
    crate::crash::sigkill_during_a_held_write_ends_unknown(&mut w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_is_named_and_a_restart_logs_no_notice() {
    let database = TestDatabase::create().await;
    let missing = with_database(&database.admin_url, "steward_no_such_database");
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(steward_bin())
        .args(["keys", "list", "--data"])
        .arg(data.path())
        .args(["--database", &missing])
        .output()
        .expect("keys list runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for needle in ["\"steward_no_such_database\" does not exist", "createdb"] {
        assert!(stderr.contains(needle), "no {needle:?} in {stderr}");
    }

    // The second start finds the schema current: it says so, and the server sends no NOTICE.
    let mut w = world(&["--database", &database.url]).await;
    w.server.restart();
    let log = w.server.log();
    assert!(log.contains("PostgreSQL schema is current"), "{log}");
    assert!(!log.contains("NOTICE"), "{log}");
}

/// `GET /readyz` answers 200 while the database answers and holds this build's schema, and 503
/// with the envelope when the schema is not the one it serves; `/healthz` stays 200 throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_store_and_its_schema() {
    let database = TestDatabase::create().await;
    let w = world(&["--database", &database.url]).await;
    let http = reqwest::Client::new();
    let get = |path: &'static str| {
        let (http, url) = (http.clone(), w.server.url.clone());
        async move {
            let answer = http.get(format!("{url}{path}")).send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<serde_json::Value>().await.unwrap())
        }
    };
    assert_eq!(
        get("/readyz").await,
        (200, serde_json::json!({"status": "ready"}))
    );

    // A newer Steward migrated the database under this one.
    let admin = admin_client(&database.url).await;
    admin
        .batch_execute(
            "INSERT INTO steward_migrations (version, name) VALUES (1000, 'from the future')",
        )
        .await
        .unwrap();
    let (status, body) = get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "STORAGE_UNAVAILABLE", "{body}");
    assert_eq!(get("/healthz").await.0, 200);

    admin
        .batch_execute("DELETE FROM steward_migrations WHERE version = 1000")
        .await
        .unwrap();
    assert_eq!(get("/readyz").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_on_the_embedded_store() {
    let w = world(&[]).await;
    let answer = reqwest::get(format!("{}/readyz", w.server.url))
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    assert_eq!(
        answer.json::<serde_json::Value>().await.unwrap(),
        serde_json::json!({"status": "ready"})
    );
}

/// Group commit on PostgreSQL: `batch_crash::crash_between_a_batch_commit_and_its_dispatches`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_between_a_batch_commit_and_its_dispatches_writes_at_most_once_on_postgres() {
    let database = TestDatabase::create().await;
    crate::batch_crash::crash_between_a_batch_commit_and_its_dispatches(&[
        "--database",
        &database.url,
    ])
    .await;
}
