//! Who creates a store and which binary may open it: only `serve` creates one (`keys`, `audit`
//! and `backup` name the directory they tried and fail, creating nothing), and a binary older
//! than its store's schema refuses to start, naming both versions, on SQLite and PostgreSQL.

use crate::harness::*;
use crate::postgres::{admin_client, TestDatabase};
use std::path::Path;
use std::process::{Command, Stdio};

/// `steward ARGS`: whether it succeeded, and its stderr.
fn steward(args: &[&str], data: &Path) -> (bool, String) {
    let out = Command::new(steward_bin())
        .args(args)
        .arg("--data")
        .arg(data)
        .env_remove("STEWARD_DATABASE_URL")
        .env_remove("STEWARD_DATA")
        .stdin(Stdio::null())
        .output()
        .expect("steward runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The entries of `dir`, by name.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the directory is there")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn keys_list_in_an_empty_directory_fails_naming_it_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (ok, stderr) = steward(&["keys", "list"], &empty);
    assert!(!ok, "keys list succeeded in an empty directory: {stderr}");
    assert!(
        stderr.contains(&format!("no Steward store in {}", empty.display()))
            && stderr.contains("steward serve"),
        "the refusal names the directory and what creates a store: {stderr}"
    );
    assert_eq!(entries(&empty), Vec::<String>::new(), "nothing was created");
}

#[test]
fn every_command_but_serve_refuses_a_directory_without_a_store_and_creates_none() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-a-data-dir");
    let out = dir.path().join("copy.db");
    let out_arg = out.to_str().unwrap();
    let commands: [&[&str]; 6] = [
        &["keys", "create", "--env", "test", "--name", "n"],
        &["keys", "list"],
        &["keys", "revoke", "key_01hx0000000000000000000000"],
        &["keys", "rotate", "key_01hx0000000000000000000000"],
        &["audit", "verify"],
        &["backup", "--out", out_arg],
    ];
    for args in commands {
        let (ok, stderr) = steward(args, &missing);
        assert!(!ok, "{args:?} succeeded without a store: {stderr}");
        assert!(
            stderr.contains(&format!("no Steward store in {}", missing.display())),
            "{args:?} does not name the directory: {stderr}"
        );
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
        assert!(!out.exists(), "{args:?} wrote a backup");
    }
    // The same directory once a server made a store there: the commands open it.
    let server = Server::start(&missing, &[]);
    let (ok, stderr) = steward(&["keys", "list"], &missing);
    assert!(ok, "{stderr}");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_against_a_database_without_a_store_fail_and_create_no_table() {
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().unwrap();
    let (ok, stderr) = steward(
        &["keys", "list", "--database", database.url.as_str()],
        dir.path(),
    );
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("holds no Steward store") && stderr.contains("steward serve --database"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(&database.url),
        "the connection string is not repeated"
    );
    let admin = admin_client(&database.url).await;
    let tables: i64 = admin
        .query_one(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "keys list created tables");
}

/// The embedded schema version this build writes (`PRAGMA user_version`).
fn user_version(db: &Path) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_binary_refuses_an_embedded_store_a_newer_one_migrated_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = Server::start(&data, &[]);
    let token = server.keys("test", "operator");
    assert!(server.terminate(), "a clean stop");
    let db = data.join(steward_server::DATABASE_FILE);
    let ours = user_version(&db);
    assert!(ours >= 1, "the store records its schema version: {ours}");

    // A newer Steward migrated the store.
    let newer = ours + 7;
    rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", newer)
        .unwrap();
    let (ok, stderr) = crate::harness::serve_refused(&data, &[], &[]);
    assert!(!ok, "serve started on a newer store: {stderr}");
    assert!(
        stderr.contains(&format!("schema version {newer}"))
            && stderr.contains(&format!("this Steward knows ({ours})")),
        "the refusal names both versions: {stderr}"
    );
    let (ok, stderr) = steward(&["keys", "list"], &data);
    assert!(
        !ok && stderr.contains(&format!("schema version {newer}")),
        "{stderr}"
    );
    assert_eq!(user_version(&db), newer, "the refusal changed nothing");

    // Back at this build's version, the same store serves again.
    rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", ours)
        .unwrap();
    server.restart();
    let operator = Api::new(&server, &token);
    assert_eq!(operator.get("/actions").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_binary_refuses_a_postgresql_store_a_newer_one_migrated_naming_both_versions() {
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = ["--database", database.url.as_str()];
    let mut server = Server::start(&data, &args);
    assert!(server.terminate(), "a clean stop");
    let admin = admin_client(&database.url).await;
    let ours: i64 = admin
        .query_one("SELECT MAX(version) FROM steward_migrations", &[])
        .await
        .unwrap()
        .get(0);
    let newer = ours + 1;
    admin
        .execute(
            "INSERT INTO steward_migrations (version, name) VALUES ($1, 'from a newer Steward')",
            &[&newer],
        )
        .await
        .unwrap();
    let (ok, stderr) = crate::harness::serve_refused(&data, &args, &[]);
    assert!(!ok, "serve started on a newer database: {stderr}");
    assert!(
        stderr.contains(&format!("at version {newer}"))
            && stderr.contains(&format!("this Steward knows ({ours})")),
        "the refusal names both versions: {stderr}"
    );
    let applied: i64 = admin
        .query_one("SELECT MAX(version) FROM steward_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(applied, newer, "the refusal changed nothing");
}
