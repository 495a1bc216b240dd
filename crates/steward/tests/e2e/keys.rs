//! API keys over their life, with the CLI against a running server: revocation, rotation with
//! an overlap, expiry, last use; `Idempotency-Key` scoped to the calling key; and a server
//! refusing to start with a master key that is not the database's.

use crate::harness::*;
use crate::postgres::{audit_verify_in, TestDatabase};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The master key of the replicas that share a database in these tests.
const MASTER_KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
/// Another master key: not the one the database's secrets were sealed with.
const OTHER_MASTER_KEY: &str = "aa1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1ff";
/// How long a key given `--expires-in` or a rotation's overlap lasts in these tests, in
/// seconds: long enough that the request right after the CLI returns is well inside it on a
/// busy machine, short enough to wait out.
const LIFETIME_S: u64 = 10;
/// How long a test waits for the lifetime to run out and a request to be refused.
const EXPIRY_WAIT: Duration = Duration::from_secs(LIFETIME_S + 20);

/// `steward keys ARGS --data DATA [--database URL]`: its stdout (trimmed) and stderr; panics
/// when it fails.
fn keys_cli(data: &Path, database: Option<&str>, args: &[&str]) -> (String, String) {
    let mut command = Command::new(steward_bin());
    command.arg("keys").args(args).arg("--data").arg(data);
    if let Some(url) = database {
        command.args(["--database", url]);
    }
    let out = command.output().expect("steward keys runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "keys {args:?} failed: {stderr}");
    (stdout, stderr)
}

/// Creates a key; returns the token and the key's id (from the CLI's stderr).
fn create(data: &Path, database: Option<&str>, role: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec![
        "create", "--env", "test", "--name", "keys-e2e", "--role", role,
    ];
    args.extend_from_slice(extra);
    let (token, stderr) = keys_cli(data, database, &args);
    (token, key_id_in(&stderr))
}

fn key_id_in(text: &str) -> String {
    text.split_whitespace()
        .find(|w| w.starts_with("key_"))
        .unwrap_or_else(|| panic!("no key id in {text:?}"))
        .to_string()
}

/// The `keys list` row of `id`, split at tabs.
fn listed(data: &Path, database: Option<&str>, id: &str) -> Vec<String> {
    let (stdout, _) = keys_cli(data, database, &["list"]);
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{id}\t")))
        .unwrap_or_else(|| panic!("{id} is not listed:\n{stdout}"))
        .split('\t')
        .map(str::to_string)
        .collect()
}

fn assert_refused(reply: &Reply, what: &str) {
    assert_eq!(reply.status, 401, "{what}: {:?}", reply.body);
    assert_eq!(
        reply.code(),
        "AUTHENTICATION_FAILED",
        "{what}: {:?}",
        reply.body
    );
    assert_eq!(reply.body["success"], json!(false));
}

/// Polls until `api`'s next request is refused with 401, or `limit` passes.
async fn refused_within(api: &Api, limit: Duration) -> Reply {
    let started = Instant::now();
    loop {
        let reply = api.get("/actions").await;
        if reply.status != 200 || started.elapsed() > limit {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn assert_names_the_master_key_not_its_value(stderr: &str, key: &str) {
    assert!(
        stderr.contains("master key")
            && stderr.contains("is not the one this database's secrets were sealed with"),
        "the refusal names the problem: {stderr}"
    );
    assert!(!stderr.contains(key), "the refusal never prints the key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_revoked_with_the_cli_while_the_server_runs_gets_401_on_its_next_request() {
    let w = world(&[]).await;
    let data = w.server.data.clone();
    let (token, id) = create(&data, None, "agent", &[]);
    let agent = Api::new(&w.server, &token);
    assert_eq!(agent.get("/actions").await.status, 200);
    assert_eq!(
        agent
            .invoke("refund", refund_input(1), Some("before-revoke"), None)
            .await
            .status,
        200
    );
    // The use is recorded (off the request's path, so possibly a moment later).
    let recorded = eventually(Duration::from_secs(10), || {
        listed(&data, None, &id)[6] != "-"
    })
    .await;
    assert!(
        recorded,
        "keys list shows the last use: {:?}",
        listed(&data, None, &id)
    );
    assert_eq!(listed(&data, None, &id)[7], "active");

    let (stdout, stderr) = keys_cli(&data, None, &["revoke", &id]);
    assert!(
        stdout.is_empty(),
        "revoke prints nothing on stdout: {stdout}"
    );
    assert!(stderr.contains(&id), "{stderr}");
    assert_refused(&agent.get("/actions").await, "a read after the revocation");
    assert_refused(
        &agent
            .invoke("refund", refund_input(2), Some("after-revoke"), None)
            .await,
        "an invoke after the revocation",
    );
    assert_eq!(
        w.fixture.write_count(),
        1,
        "nothing was sent for the revoked key"
    );
    assert_eq!(listed(&data, None, &id)[7], "revoked");
    // The other keys are untouched.
    assert_eq!(w.agent.get("/actions").await.status, 200);

    let out = Command::new(steward_bin())
        .args(["audit", "verify", "--data"])
        .arg(&data)
        .output()
        .expect("audit verify runs");
    assert!(
        out.status.success(),
        "the audit chain verifies: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rotated_key_works_during_the_overlap_and_gets_401_after_it() {
    let w = world(&[]).await;
    let data = w.server.data.clone();
    let (old_token, old_id) = create(&data, None, "agent", &[]);
    let overlap = LIFETIME_S.to_string();
    let (new_token, stderr) = keys_cli(&data, None, &["rotate", &old_id, "--overlap-s", &overlap]);
    assert!(
        new_token.starts_with("stw_") && !new_token.contains('\n'),
        "rotate prints only the new key on stdout: {new_token:?}"
    );
    let new_id = key_id_in(stderr.split("to replace").next().unwrap_or_default());
    assert_ne!(new_id, old_id);
    let (old, new) = (
        Api::new(&w.server, &old_token),
        Api::new(&w.server, &new_token),
    );
    assert_eq!(
        old.get("/actions").await.status,
        200,
        "the old key works during the overlap"
    );
    assert_eq!(new.get("/actions").await.status, 200);
    let (old_row, new_row) = (listed(&data, None, &old_id), listed(&data, None, &new_id));
    assert_eq!(
        old_row[1..4],
        new_row[1..4],
        "same name, environment and scopes"
    );
    assert_ne!(old_row[5], "-", "the old key has an expiry now");

    assert_refused(
        &refused_within(&old, EXPIRY_WAIT).await,
        "the old key after the overlap",
    );
    assert_eq!(
        new.get("/actions").await.status,
        200,
        "the new key still works"
    );
    assert_eq!(
        new.invoke("refund", refund_input(3), Some("rotated"), None)
            .await
            .status,
        200
    );
    assert_eq!(listed(&data, None, &old_id)[7], "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_created_with_an_expiry_gets_401_once_it_has_expired() {
    let w = world(&[]).await;
    let data = w.server.data.clone();
    let lifetime = format!("{LIFETIME_S}s");
    let (token, id) = create(&data, None, "agent", &["--expires-in", &lifetime]);
    let agent = Api::new(&w.server, &token);
    assert_eq!(agent.get("/actions").await.status, 200);
    assert_ne!(
        listed(&data, None, &id)[5],
        "-",
        "keys list shows the expiry"
    );
    assert_refused(
        &refused_within(&agent, EXPIRY_WAIT).await,
        "the expired key",
    );
    assert_refused(
        &agent
            .invoke("refund", refund_input(4), Some("expired"), None)
            .await,
        "an invoke with the expired key",
    );
    assert_eq!(w.fixture.write_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_revoked_with_the_cli_gets_401_from_every_replica_on_its_next_request() {
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--database", database.url.as_str()];
    let servers: Vec<Server> = (0..2)
        .map(|i| {
            Server::start_with_env(
                &dir.path().join(format!("replica-{i}")),
                &args,
                &[(steward_server::MASTER_KEY_ENV, MASTER_KEY)],
            )
        })
        .collect();
    let data = servers[0].data.clone();
    let db = Some(database.url.as_str());
    let (token, id) = create(&data, db, "agent", &[]);
    let agents: Vec<Api> = servers.iter().map(|s| Api::new(s, &token)).collect();
    for (i, agent) in agents.iter().enumerate() {
        assert_eq!(agent.get("/actions").await.status, 200, "replica {i}");
    }
    keys_cli(&data, db, &["revoke", &id]);
    for (i, agent) in agents.iter().enumerate() {
        assert_refused(&agent.get("/actions").await, &format!("replica {i}"));
    }
    let (ok, text) = audit_verify_in(&data, &database.url);
    assert!(ok, "the audit chain verifies: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_with_another_master_key_refuses_to_start_on_a_shared_database() {
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().unwrap();
    let args = ["--database", database.url.as_str()];
    let first = Server::start_with_env(
        &dir.path().join("replica-0"),
        &args,
        &[(steward_server::MASTER_KEY_ENV, MASTER_KEY)],
    );
    let operator = Api::new(&first, &first.keys("test", "operator"));
    let put = operator
        .call(
            "PUT",
            "/secrets/SEALED",
            Some(json!({"value": "sealed-value"})),
            None,
        )
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    let (ok, stderr) = crate::harness::serve_refused(
        &dir.path().join("replica-1"),
        &args,
        &[(steward_server::MASTER_KEY_ENV, OTHER_MASTER_KEY)],
    );
    assert!(!ok, "the second replica exits non-zero");
    assert_names_the_master_key_not_its_value(&stderr, OTHER_MASTER_KEY);
    // A replica with the right key still starts.
    let second = Server::start_with_env(
        &dir.path().join("replica-2"),
        &args,
        &[(steward_server::MASTER_KEY_ENV, MASTER_KEY)],
    );
    drop((first, second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_embedded_store_refuses_to_start_with_a_replaced_master_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = Server::start(&data, &[]);
    let token = server.keys("test", "operator");
    let operator = Api::new(&server, &token);
    let put = operator
        .call(
            "PUT",
            "/secrets/SEALED",
            Some(json!({"value": "sealed-value"})),
            None,
        )
        .await;
    assert_eq!(put.status, 200, "{:?}", put.body);
    assert!(server.terminate(), "the server stops cleanly");
    let master = data.join(steward_server::MASTER_KEY_FILE);
    let original = std::fs::read_to_string(&master).expect("master.key");
    std::fs::write(&master, OTHER_MASTER_KEY).expect("replace master.key");
    let (ok, stderr) = crate::harness::serve_refused(&data, &[], &[]);
    assert!(!ok, "the server exits non-zero");
    assert_names_the_master_key_not_its_value(&stderr, OTHER_MASTER_KEY);
    std::fs::write(&master, original).expect("restore master.key");
    server.restart();
    let operator = Api::new(&server, &token);
    assert_eq!(operator.get("/secrets").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_keys_idempotency_key_is_a_separate_request_and_the_operation_key_still_spans_keys()
{
    let w = world(&[]).await;
    let data = w.server.data.clone();
    let (a, b) = (
        Api::new(&w.server, &create(&data, None, "operator", &[]).0),
        Api::new(&w.server, &create(&data, None, "operator", &[]).0),
    );

    // Invoke: b's different body under a's header value is b's own request.
    let first = a
        .invoke("refund", refund_input(10), None, Some("shared-x"))
        .await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    let other = b
        .invoke("refund", refund_input(11), None, Some("shared-x"))
        .await;
    assert_eq!(
        other.status, 200,
        "not refused as a reused key: {:?}",
        other.body
    );
    assert!(!other.replayed, "b does not get a's answer");
    assert_ne!(other.data()["id"], first.data()["id"]);
    let again = b
        .invoke("refund", refund_input(11), None, Some("shared-x"))
        .await;
    assert!(again.replayed);
    assert_eq!(
        again.data()["id"],
        other.data()["id"],
        "b's resend replays b's own"
    );
    assert_eq!(w.fixture.write_count(), 2);

    // The operation key spans keys: one effect, one provider write.
    let by_a = a
        .invoke("refund", refund_input(12), Some("order-12"), Some("same"))
        .await;
    let by_b = b
        .invoke("refund", refund_input(12), Some("order-12"), Some("same"))
        .await;
    assert_eq!(
        (by_a.status, by_b.status),
        (200, 200),
        "{:?} {:?}",
        by_a.body,
        by_b.body
    );
    assert_eq!(by_a.data()["id"], by_b.data()["id"]);
    assert_eq!(w.fixture.write_count(), 3, "order-12 was written once");

    // Other write endpoints: b's different body is not refused with 422.
    let put = |api: &Api, value: &'static str| {
        let api = api.clone();
        async move {
            api.call(
                "PUT",
                "/secrets/SCOPED",
                Some(json!({"value": value})),
                Some("put-x"),
            )
            .await
        }
    };
    let by_a = put(&a, "first-value").await;
    assert_eq!(by_a.status, 200, "{:?}", by_a.body);
    let by_b = put(&b, "second-value").await;
    assert_eq!(
        by_b.status, 200,
        "not refused as a reused key: {:?}",
        by_b.body
    );
    assert!(!by_b.replayed);
    assert_eq!(
        by_b.data()["version"],
        json!(2),
        "b's request ran: {:?}",
        by_b.body
    );
    assert!(
        put(&a, "first-value").await.replayed,
        "a's own resend replays"
    );
}
