//! PostgreSQL across a failover (issue #26): a multi-host connection string reaches the server
//! that answers, and a `COMMIT` whose answer is lost is reported as ambiguous
//! (`StoreError::CommitUnknown`), never as "nothing was committed".

use super::*;
use std::sync::atomic::AtomicBool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The URL's parts around its hosts: (`postgres://user@`, `host[:port]`, `/db?...`).
fn split_hosts(url: &str) -> (&str, &str, &str) {
    let start = url.find("://").expect("a postgres:// URL") + 3;
    let rest = &url[start..];
    let end = start + rest.find(['/', '?']).unwrap_or(rest.len());
    let hosts_start = url[start..end]
        .rfind('@')
        .map_or(start, |at| start + at + 1);
    (&url[..hosts_start], &url[hosts_start..end], &url[end..])
}

/// The `host:port` of the test server, from its URL.
fn host_port(url: &str) -> String {
    let (_, host, _) = split_hosts(url);
    if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:5432")
    }
}

/// `url` with its `host:port` replaced by `hosts` (one or several, comma-separated).
fn with_hosts(url: &str, hosts: &str) -> String {
    let (head, _, tail) = split_hosts(url);
    format!("{head}{hosts}{tail}")
}

/// A loopback port nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// A store through `postgres://u@127.0.0.1:<closed>,<server>/db?target_session_attrs=read-write`
/// skips the host that refuses and works on the one that answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_multi_host_url_reaches_the_host_that_answers() {
    let database = TestDatabase::create().await;
    let closed = closed_port().await;
    let hosts = format!("127.0.0.1:{closed},{}", host_port(&database.url));
    let mut url = with_hosts(&database.url, &hosts);
    url.push_str(if url.contains('?') { "&" } else { "?" });
    url.push_str("target_session_attrs=read-write");
    assert!(url.contains(&format!("127.0.0.1:{closed},")), "{url}");
    let store: Arc<dyn Store> = Arc::new(
        PostgresStore::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect through {url}: {e}")),
    );
    let env = Env::new(&store, "multi-host").await;
    let action = env.create_action(refund_definition("refund")).await;
    // Written through the multi-host URL, read back through the plain one.
    let direct = database.store().await;
    let found = direct
        .action(&env.id, action.id.as_str())
        .await
        .expect("read")
        .expect("the action written through the multi-host URL");
    assert_eq!(found.name, action.name);
}

/// A TCP proxy to the test server that, once armed, forwards the next `COMMIT` and then cuts
/// both sides before its answer comes back: the commit happens, the client never hears it.
struct CommitCutter {
    addr: String,
    armed: Arc<AtomicBool>,
}

impl CommitCutter {
    async fn start(server: String) -> CommitCutter {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let armed = Arc::new(AtomicBool::new(false));
        let arm = armed.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = TcpStream::connect(&server).await.unwrap();
                tokio::spawn(relay(client, upstream, arm.clone()));
            }
        });
        CommitCutter { addr, armed }
    }
}

async fn relay(client: TcpStream, upstream: TcpStream, armed: Arc<AtomicBool>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let cut = Arc::new(tokio::sync::Notify::new());
    let answers = {
        let cut = cut.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                tokio::select! {
                    _ = cut.notified() => return,
                    read = upstream_read.read(&mut buf) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(n) => if client_write.write_all(&buf[..n]).await.is_err() { return },
                    },
                }
            }
        })
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let commits = buf[..n].windows(7).any(|w| w == b"COMMIT\0");
        if commits && armed.swap(false, Ordering::SeqCst) {
            // Stop relaying answers first, then let the COMMIT reach the server.
            cut.notify_one();
            let _ = answers.await;
            let _ = upstream_write.write_all(&buf[..n]).await;
            // Give the server time to commit before the connection is dropped.
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            return;
        }
        if upstream_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
}

/// The connection drops after `COMMIT` was sent and before its answer: the store says the
/// outcome is unknown (not "unavailable", which promises nothing was committed), and a read
/// once the database answers again finds what the commit wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_commit_whose_answer_is_lost_is_ambiguous() {
    let database = TestDatabase::create().await;
    database.store().await; // migrated directly, so the proxy sees only the test's statements
    let cutter = CommitCutter::start(host_port(&database.url)).await;
    let url = with_hosts(&database.url, &cutter.addr);
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&url).await.expect("connect"));
    let env = Env::new(&store, "lost-commit").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut sub = env.submission(&action, json!({"n": 1}));
    sub.operation_key = Some(op("order-lost-commit"));
    let first = super::hotpath::first_attempt(&env, &sub, 2_000);

    cutter.armed.store(true, Ordering::SeqCst);
    let err = store
        .submit_and_begin(&sub, &first)
        .await
        .expect_err("the commit's answer never arrives");
    assert!(err.commit_unknown(), "ambiguous, not unavailable: {err}");
    assert!(err.storage_failed());
    assert!(!cutter.armed.load(Ordering::SeqCst), "the COMMIT was cut");

    // Re-read before deciding: here the commit had landed.
    let direct = database.store().await;
    let found = direct
        .invocation_by_operation_key(&env.id, &action.id, &op("order-lost-commit"))
        .await
        .expect("read")
        .expect("the commit landed although its answer was lost");
    let effect = direct
        .effect(&env.id, &found.effect_id)
        .await
        .expect("read")
        .expect("effect");
    assert_eq!(effect.effect.state, EffectState::Dispatching);

    // A failure before COMMIT is sent stays "unavailable": nothing was committed.
    let refused = StoreError::Unavailable {
        message: "x".into(),
        source: None,
    };
    assert!(!refused.commit_unknown());
}

/// A deferred constraint trigger on `invocations` that runs `body` at `COMMIT` for the
/// operation key `key` only (the test's own write; nothing else in the database matches).
async fn at_commit_of(database: &TestDatabase, key: &str, body: &str) {
    let client = admin_client(&database.url).await;
    client
        .batch_execute(&format!(
            "CREATE FUNCTION steward_test_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN {body} RETURN NULL; END $$;
             CREATE CONSTRAINT TRIGGER steward_test_at_commit AFTER INSERT ON invocations
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
             WHEN (NEW.operation_key = '{key}') EXECUTE FUNCTION steward_test_at_commit();"
        ))
        .await
        .expect("create the trigger");
}

/// A `COMMIT` the server refuses with a class-23 error (a deferred constraint): PostgreSQL
/// rolled the transaction back and says so, so the store reports "unavailable" (nothing was
/// committed), and a read finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_commit_refused_by_a_deferred_constraint_is_not_ambiguous() {
    let database = TestDatabase::create().await;
    let store = database.store().await;
    at_commit_of(
        &database,
        "order-refused-at-commit",
        "RAISE EXCEPTION 'refused at commit' USING ERRCODE = 'check_violation';",
    )
    .await;
    let env = Env::new(&store, "refused-commit").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut sub = env.submission(&action, json!({"n": 1}));
    sub.operation_key = Some(op("order-refused-at-commit"));
    let first = super::hotpath::first_attempt(&env, &sub, 2_000);
    let err = store
        .submit_and_begin(&sub, &first)
        .await
        .expect_err("the deferred constraint refuses the COMMIT");
    assert!(
        !err.commit_unknown(),
        "a class-23 COMMIT error rolled back: {err}"
    );
    assert!(err.storage_failed(), "{err}");
    let found = store
        .invocation_by_operation_key(&env.id, &action.id, &op("order-refused-at-commit"))
        .await
        .expect("read");
    assert!(found.is_none(), "nothing was committed");
}

/// A `COMMIT` whose backend is terminated while it runs (here while a deferred trigger waits
/// for an advisory lock the test holds; in production a primary killed while it waits for its
/// synchronous standby) is answered with a server error, `57P01`: the answer does not say the
/// transaction rolled back, so the store reports the commit as unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_commit_whose_backend_is_terminated_is_ambiguous() {
    const LOCK: i64 = 2_626_026;
    let database = TestDatabase::create().await;
    let store = database.store().await;
    at_commit_of(
        &database,
        "order-terminated-at-commit",
        &format!("PERFORM pg_advisory_xact_lock({LOCK});"),
    )
    .await;
    let env = Env::new(&store, "terminated-commit").await;
    let action = env.create_action(refund_definition("refund")).await;
    let mut sub = env.submission(&action, json!({"n": 1}));
    sub.operation_key = Some(op("order-terminated-at-commit"));
    let first = super::hotpath::first_attempt(&env, &sub, 2_000);

    let holder = admin_client(&database.url).await;
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&LOCK])
        .await
        .expect("take the lock");
    let write = {
        let store = store.clone();
        tokio::spawn(async move { store.submit_and_begin(&sub, &first).await })
    };
    // The COMMIT's deferred trigger waits on the lock: end that backend, as an operator (or a
    // dying primary) would.
    let mut terminated = false;
    for _ in 0..200 {
        let rows = holder
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                &[],
            )
            .await
            .expect("look for the waiting COMMIT");
        if !rows.is_empty() {
            terminated = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(terminated, "the COMMIT never waited on the lock");
    let err = write
        .await
        .expect("join")
        .expect_err("the COMMIT's backend was terminated");
    assert!(err.commit_unknown(), "ambiguous, not unavailable: {err}");
    assert!(err.storage_failed(), "{err}");
}
