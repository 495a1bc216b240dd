//! `steward bench-proxy`: the durable-proxy floor of `steward bench` (workload `proxy`).
//!
//! The least any durable execution layer in front of the fixture must do per request, on the
//! same parts Steward uses (hyper through axum, reqwest, SQLite in WAL mode with
//! `synchronous=FULL`, one writer thread committing whatever is queued as one transaction):
//!
//! 1. record the request (its idempotency key and body), durable before the call;
//! 2. forward it to the fixture;
//! 3. record the answer, durable before the reply;
//! 4. reply with the fixture's status and body.
//!
//! Nothing else: no keys, policy, idempotency lookup, audit, receipts or redaction. Its ratio to
//! the floor is what a durable proxy reaches on this machine, so the report can tell the cost
//! of the two durable commits and the extra hop from the cost of Steward's own work. It is a
//! measuring instrument, hidden from `steward --help`, and listens on loopback only. Bodies are
//! bounded by axum's default limit (2 MiB), the call to the fixture by [`CALL_TIMEOUT_S`], and
//! every error it makes itself is JSON with a code.

use anyhow::{bail, Context};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use rusqlite::Connection;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{mpsc, Arc};

/// The most records one commit carries, as the embedded store's writer
/// (`GROUP_COMMIT_JOBS_MAX` in steward-store).
const BATCH_MAX: usize = 128;
/// The call to the fixture's deadline, in seconds: Steward's own provider deadline.
const CALL_TIMEOUT_S: u64 = 10;
/// The headers forwarded to the fixture, as Steward sends them.
const FORWARDED: [&str; 3] = ["authorization", "idempotency-key", "content-type"];

#[derive(clap::Args)]
pub struct Args {
    /// The address to listen on (loopback).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The fixture's base URL (http://ADDR).
    #[arg(long)]
    fixture: String,
    /// The directory for the proxy's journal (`proxy.db`).
    #[arg(long)]
    data: PathBuf,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.listen.ip().is_loopback() {
        bail!("--listen: the bench proxy listens on loopback only");
    }
    let journal = Journal::open(&args.data.join("proxy.db"))?;
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(1024)
        .timeout(std::time::Duration::from_secs(CALL_TIMEOUT_S))
        .build()
        .context("building the HTTP client")?;
    let state = Arc::new(Proxy {
        journal,
        http,
        refunds: format!("{}/v1/refunds", args.fixture.trim_end_matches('/')),
    });
    let app = axum::Router::new()
        .route("/v1/refunds", axum::routing::post(forward))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .context("binding --listen")?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(super::super::shutdown_signal())
        .await?;
    Ok(ExitCode::SUCCESS)
}

struct Proxy {
    journal: Journal,
    http: reqwest::Client,
    refunds: String,
}

/// An error the proxy makes itself: `{"error": {"code", "message"}}` with `status`.
fn failed(status: StatusCode, code: &str, message: impl std::fmt::Display) -> Response {
    let body = serde_json::json!({"error": {"code": code, "message": message.to_string()}});
    (status, axum::Json(body)).into_response()
}

/// One request through the proxy: recorded, forwarded, its answer recorded, answered.
async fn forward(State(proxy): State<Arc<Proxy>>, headers: HeaderMap, body: Bytes) -> Response {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if key.is_empty() {
        let message = "the Idempotency-Key header is required";
        return failed(StatusCode::BAD_REQUEST, "IDEMPOTENCY_KEY_REQUIRED", message);
    }
    let recorded = Record::Request {
        key: key.clone(),
        body: body.clone(),
    };
    if let Err(e) = proxy.journal.write(recorded).await {
        return failed(StatusCode::SERVICE_UNAVAILABLE, "STORAGE_UNAVAILABLE", e);
    }
    let mut request = proxy.http.post(&proxy.refunds).body(body);
    for name in FORWARDED {
        if let Some(value) = headers.get(name) {
            request = request.header(name, value);
        }
    }
    let called = match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            response.bytes().await.map(|answer| (status, answer))
        }
        Err(e) => Err(e),
    };
    let (status, answer) = match called {
        Ok(called) => called,
        Err(e) => return failed(StatusCode::BAD_GATEWAY, "PROVIDER_UNREACHABLE", e),
    };
    let recorded = Record::Answer {
        key,
        status,
        body: answer.clone(),
    };
    if let Err(e) = proxy.journal.write(recorded).await {
        return failed(StatusCode::SERVICE_UNAVAILABLE, "STORAGE_UNAVAILABLE", e);
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    (status, [("content-type", "application/json")], answer).into_response()
}

/// What one step records.
enum Record {
    Request {
        key: String,
        body: Bytes,
    },
    Answer {
        key: String,
        status: u16,
        body: Bytes,
    },
}

struct Queued {
    record: Record,
    done: tokio::sync::oneshot::Sender<Result<(), String>>,
}

/// The journal: one SQLite file, one writer thread that group-commits.
struct Journal {
    queue: std::sync::Mutex<mpsc::Sender<Queued>>,
}

impl Journal {
    fn open(path: &Path) -> anyhow::Result<Journal> {
        let conn = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS calls (
                 key TEXT PRIMARY KEY,
                 request BLOB NOT NULL,
                 status INTEGER,
                 answer BLOB
             ) WITHOUT ROWID;",
        )?;
        let (queue, jobs) = mpsc::channel();
        std::thread::Builder::new()
            .name("bench-proxy-writer".into())
            .spawn(move || writer(conn, jobs))
            .context("starting the writer thread")?;
        Ok(Journal {
            queue: std::sync::Mutex::new(queue),
        })
    }

    /// Returns once `record` is committed (its batch's fsync done).
    async fn write(&self, record: Record) -> Result<(), String> {
        let (done, committed) = tokio::sync::oneshot::channel();
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Queued { record, done })
            .map_err(|_| "the journal is closed".to_string())?;
        committed
            .await
            .map_err(|_| "the journal is closed".to_string())?
    }
}

/// Takes everything queued (up to [`BATCH_MAX`]), writes it in one transaction, commits once,
/// then answers each; a record whose statement failed fails alone (SQLite undoes only that
/// statement), a failed commit fails the batch.
fn writer(mut conn: Connection, jobs: mpsc::Receiver<Queued>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH_MAX {
            match jobs.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let results = commit(&mut conn, &batch);
        for (queued, result) in batch.into_iter().zip(results) {
            let _ = queued.done.send(result);
        }
    }
}

fn commit(conn: &mut Connection, batch: &[Queued]) -> Vec<Result<(), String>> {
    let failed = |e: rusqlite::Error| vec![Err(e.to_string()); batch.len()];
    let tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return failed(e),
    };
    let results: Vec<Result<(), String>> = batch
        .iter()
        .map(|queued| apply(&tx, &queued.record).map_err(|e| e.to_string()))
        .collect();
    match tx.commit() {
        Ok(()) => results,
        Err(e) => failed(e),
    }
}

fn apply(tx: &rusqlite::Transaction<'_>, record: &Record) -> rusqlite::Result<()> {
    match record {
        Record::Request { key, body } => {
            tx.prepare_cached("INSERT INTO calls (key, request) VALUES (?1, ?2)")?
                .execute(rusqlite::params![key, body.as_ref()])?;
        }
        Record::Answer { key, status, body } => {
            let updated = tx
                .prepare_cached("UPDATE calls SET status = ?2, answer = ?3 WHERE key = ?1")?
                .execute(rusqlite::params![key, status, body.as_ref()])?;
            if updated != 1 {
                return Err(rusqlite::Error::QueryReturnedNoRows);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON body of a proxy's answer.
    async fn json_body(response: Response) -> serde_json::Value {
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    fn calls(path: &Path) -> Vec<(String, Option<u16>)> {
        let conn = Connection::open(path).unwrap();
        let mut statement = conn
            .prepare("SELECT key, status FROM calls ORDER BY key")
            .unwrap();
        statement
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[tokio::test]
    async fn a_request_without_a_key_is_refused_in_json_and_recorded_nowhere() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxy.db");
        let proxy = Arc::new(Proxy {
            journal: Journal::open(&path).unwrap(),
            http: reqwest::Client::new(),
            // Never called: the refusal comes first.
            refunds: "http://127.0.0.1:1/v1/refunds".into(),
        });
        let response = forward(State(proxy), HeaderMap::new(), Bytes::new()).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = json_body(response).await;
        assert_eq!(body["error"]["code"], "IDEMPOTENCY_KEY_REQUIRED");
        assert!(calls(&path).is_empty());
    }

    #[tokio::test]
    async fn a_vanished_fixture_is_a_json_502_and_the_request_stays_recorded_unanswered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxy.db");
        // A loopback port that was free a moment ago: nothing listens there now.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let refunds = format!("http://{}/v1/refunds", closed.local_addr().unwrap());
        drop(closed);
        let proxy = Arc::new(Proxy {
            journal: Journal::open(&path).unwrap(),
            http: reqwest::Client::new(),
            refunds,
        });
        let mut headers = HeaderMap::new();
        headers.insert("idempotency-key", "k1".parse().unwrap());
        let response = forward(State(proxy), headers, Bytes::from_static(b"amount=1")).await;
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        let body = json_body(response).await;
        assert_eq!(body["error"]["code"], "PROVIDER_UNREACHABLE");
        assert_eq!(calls(&path), vec![("k1".to_string(), None)]);
    }

    #[tokio::test]
    async fn each_step_is_committed_before_its_write_returns_and_a_failed_one_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxy.db");
        let journal = Journal::open(&path).unwrap();
        let request = |key: &str| Record::Request {
            key: key.into(),
            body: Bytes::from_static(b"amount=1"),
        };
        journal.write(request("k1")).await.unwrap();
        assert_eq!(calls(&path), vec![("k1".to_string(), None)]);
        // The same key again breaks the primary key: that record fails, the others of its
        // batch commit.
        let (again, other) =
            tokio::join!(journal.write(request("k1")), journal.write(request("k2")));
        assert!(again.is_err());
        other.unwrap();
        let answer = |key: &str| Record::Answer {
            key: key.into(),
            status: 200,
            body: Bytes::from_static(b"{}"),
        };
        journal.write(answer("k2")).await.unwrap();
        assert!(journal.write(answer("missing")).await.is_err());
        assert_eq!(
            calls(&path),
            vec![("k1".to_string(), None), ("k2".to_string(), Some(200))]
        );
    }
}
