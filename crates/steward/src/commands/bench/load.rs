//! The load loop: `concurrency` workers share one request counter and one deadline; each
//! records its own latencies in an HDR histogram, merged at the end.

use super::split::{Split, Watched};
use super::world::{Fixture, World, SECRET_VALUE};
use super::Workload;
use crate::commands::progress::Progress;
use anyhow::Context;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest latency a histogram holds, in microseconds: one request's whole budget (the
/// client timeout below). Anything slower is an error, not a sample.
const LATENCY_US_MAX: u64 = 60_000_000;
/// Significant decimal digits the histograms keep (0.1 % resolution).
const LATENCY_DIGITS: u8 = 3;
/// One request's deadline, in seconds: above Steward's provider deadline (10 s), so a slow
/// dispatch is measured, and bounded so a stuck server ends the run.
const REQUEST_TIMEOUT_S: u64 = 60;

/// How long each run lasts: a deadline, and optionally a request count.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limit {
    pub(super) duration: Duration,
    pub(super) requests: Option<u64>,
}

/// One HTTP client for the whole run: keep-alive connections, one per worker.
pub(super) fn http_client(concurrency_max: usize) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency_max * 2)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(REQUEST_TIMEOUT_S))
        .build()
        .context("building the HTTP client")
}

/// Where the requests go and with which keys.
#[derive(Clone)]
pub(super) struct Target {
    http: reqwest::Client,
    fixture_url: String,
    /// Every replica's base URL: request `n` goes to replica `n % len`, and the approval of
    /// workload (c) to the next one, so a decision travels between replicas.
    server_urls: Vec<String>,
    agent: String,
    approver: String,
    action: String,
    gated_action: String,
    pub(super) store: String,
    run: String,
}

impl Target {
    pub(super) fn floor(http: &reqwest::Client, fixture_url: &str, run: &str) -> Target {
        Target {
            http: http.clone(),
            fixture_url: fixture_url.to_string(),
            server_urls: Vec::new(),
            agent: String::new(),
            approver: String::new(),
            action: String::new(),
            gated_action: String::new(),
            store: "-".to_string(),
            run: run.to_string(),
        }
    }

    /// The durable-proxy floor: the floor's request, sent to `steward bench-proxy` at `url`.
    pub(super) fn proxy(http: &reqwest::Client, url: &str, run: &str) -> Target {
        Target {
            store: "embedded".to_string(),
            ..Target::floor(http, url, run)
        }
    }

    pub(super) fn steward(http: &reqwest::Client, world: &World, store: &str, run: &str) -> Target {
        Target {
            http: http.clone(),
            fixture_url: String::new(),
            server_urls: world.urls.clone(),
            agent: world.agent.clone(),
            approver: world.approver.clone(),
            action: world.action.clone(),
            gated_action: world.gated_action.clone(),
            store: store.to_string(),
            run: run.to_string(),
        }
    }

    /// The business input that goes with an operation key: the same key always gets the same
    /// input, so a resubmission is the same operation.
    fn input(key: &str, n: u64) -> Value {
        json!({"paymentIntent": format!("pi_{key}"), "amount": 100 + n % 900})
    }

    async fn post(
        &self,
        url: String,
        bearer: &str,
        key: &str,
        body: &Value,
    ) -> Result<(u16, Value), String> {
        let response = self
            .http
            .post(url)
            .bearer_auth(bearer)
            .header("Idempotency-Key", key)
            .json(body)
            .send()
            .await
            .map_err(|e| format!("transport: {e}"))?;
        let status = response.status().as_u16();
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("HTTP {status}, unreadable body: {e}"))?;
        Ok((status, body))
    }

    /// The replica that takes request `n` (`shift` replicas further on).
    fn server_url(&self, n: u64, shift: u64) -> &str {
        let replicas = self.server_urls.len() as u64;
        &self.server_urls[((n + shift) % replicas) as usize]
    }

    async fn invoke(&self, action: &str, key: &str, n: u64) -> Result<(u16, Value), String> {
        let url = format!("{}/api/v2/actions/{action}/invoke", self.server_url(n, 0));
        let body = json!({"input": Self::input(key, n), "operationKey": key});
        self.post(url, &self.agent, key, &body).await
    }

    /// One request of `workload`; `Ok` only when the answer is the expected one.
    async fn one(&self, workload: Workload, key: &str, n: u64) -> Result<(), String> {
        match workload {
            Workload::Floor | Workload::Proxy => self.floor_refund(key, n).await,
            Workload::Invoke | Workload::Resubmit => {
                let (status, body) = self.invoke(&self.action, key, n).await?;
                expect(status, 200, &body, "/data/status", "succeeded")
            }
            Workload::Approve => {
                let (status, body) = self.invoke(&self.gated_action, key, n).await?;
                expect(status, 202, &body, "/data/status", "pending_approval")?;
                let approval = body["data"]["approvalId"]
                    .as_str()
                    .ok_or("a gated invoke answered without an approvalId")?;
                let url = format!(
                    "{}/api/v2/approvals/{approval}/approve",
                    self.server_url(n, 1)
                );
                let (status, body) = self
                    .post(
                        url,
                        &self.approver,
                        &format!("approve-{key}"),
                        &json!({"note": "bench"}),
                    )
                    .await?;
                // The approve answers the approval and the invocation it released, dispatched.
                expect(status, 200, &body, "/data/approval/status", "approved")?;
                expect(status, 200, &body, "/data/invocation/status", "succeeded")
            }
            Workload::Recovery => Err("recovery is not a request workload".into()),
        }
    }

    /// The floor: the same refund, straight to the fixture, with nothing recorded anywhere (or,
    /// for the proxy, through the durable proxy, whose URL the target holds instead).
    async fn floor_refund(&self, key: &str, n: u64) -> Result<(), String> {
        let form = format!(
            "payment_intent=pi_{key}&amount={}&currency=usd",
            100 + n % 900
        );
        let response = self
            .http
            .post(format!("{}/v1/refunds", self.fixture_url))
            .bearer_auth(SECRET_VALUE)
            .header("Idempotency-Key", key)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .map_err(|e| format!("transport: {e}"))?;
        let status = response.status().as_u16();
        let _ = response.bytes().await;
        if status == 200 {
            Ok(())
        } else {
            Err(format!("fixture answered HTTP {status}"))
        }
    }

    fn key(&self, workload: Workload, concurrency: usize, phase: &str, n: u64) -> String {
        format!(
            "bench-{}-{}-{}{concurrency}-{phase}{n}",
            self.run,
            self.store,
            workload.name()
        )
    }

    /// The key of one of workload (b)'s seeded operations.
    fn resubmit_key(&self, i: u64) -> String {
        format!("bench-{}-{}-b-seed{i}", self.run, self.store)
    }
}

/// `Ok` when the answer has status `want` and the field at `pointer` (a JSON pointer into the
/// envelope, e.g. `/data/status`) holds `value`.
fn expect(status: u16, want: u16, body: &Value, pointer: &str, value: &str) -> Result<(), String> {
    let seen = body.pointer(pointer).and_then(Value::as_str);
    if status == want && seen == Some(value) {
        return Ok(());
    }
    let error = body.get("error").map(|e| e.to_string()).unwrap_or_default();
    Err(format!(
        "HTTP {status} with {pointer} {seen:?} (wanted {want}, {value}) {error}"
    ))
}

/// Creates workload (b)'s operations, untimed: each is invoked once and settles.
pub(super) async fn seed_resubmit(target: &Target, count: u64) -> anyhow::Result<()> {
    for i in 0..count {
        let key = target.resubmit_key(i);
        let (status, body) = target
            .invoke(&target.action, &key, i)
            .await
            .map_err(anyhow::Error::msg)?;
        expect(status, 200, &body, "/data/status", "succeeded")
            .map_err(anyhow::Error::msg)
            .context("seeding workload (b)")?;
    }
    Ok(())
}

/// What one (workload, store, concurrency) run measured.
pub(super) struct Cell {
    pub(super) workload: Workload,
    pub(super) store: String,
    pub(super) concurrency: usize,
    pub(super) ok: u64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    /// Provider writes the fixture committed during the run, and how many it should have.
    pub(super) writes: u64,
    pub(super) writes_expected: u64,
    pub(super) elapsed: Duration,
    /// Latencies of the successful requests, in microseconds.
    pub(super) latency_us: Histogram<u64>,
    /// Where the time went (`split.rs`).
    pub(super) split: Split,
}

impl Cell {
    pub(super) fn throughput(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

struct Worker {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    latency_us: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, LATENCY_DIGITS).expect("valid histogram bounds")
}

async fn work(
    target: Target,
    workload: Workload,
    concurrency: usize,
    phase: &'static str,
    counter: Arc<AtomicU64>,
    started: Instant,
    limit: Limit,
) -> Worker {
    let mut worker = Worker {
        ok: 0,
        errors: 0,
        first_error: None,
        latency_us: histogram(),
    };
    loop {
        let n = counter.fetch_add(1, Ordering::Relaxed);
        if limit.requests.is_some_and(|max| n >= max) || started.elapsed() >= limit.duration {
            return worker;
        }
        let key = match workload {
            Workload::Resubmit => target.resubmit_key(n % super::RESUBMIT_KEYS),
            _ => target.key(workload, concurrency, phase, n),
        };
        let sent = Instant::now();
        let result = target.one(workload, &key, n % super::RESUBMIT_KEYS).await;
        let took = sent.elapsed();
        match result {
            Ok(()) => {
                worker.ok += 1;
                let us = (took.as_micros() as u64).clamp(1, LATENCY_US_MAX);
                worker.latency_us.record(us).expect("clamped into bounds");
            }
            Err(e) => {
                worker.errors += 1;
                worker.first_error.get_or_insert(e);
            }
        }
    }
}

async fn drive(
    target: &Target,
    workload: Workload,
    concurrency: usize,
    phase: &'static str,
    limit: Limit,
) -> anyhow::Result<(Vec<Worker>, Duration)> {
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            tokio::spawn(work(
                target.clone(),
                workload,
                concurrency,
                phase,
                counter.clone(),
                started,
                limit,
            ))
        })
        .collect();
    let mut workers = vec![];
    for task in tasks {
        workers.push(task.await.context("a load worker panicked")?);
    }
    Ok((workers, started.elapsed()))
}

/// Warms up (one request per worker, unrecorded), then runs and measures, with the processes
/// in `watched` read before and after the timed part.
pub(super) async fn run_cell(
    target: &Target,
    workload: Workload,
    concurrency: usize,
    limit: Limit,
    fixture: &Fixture,
    watched: &Watched,
    progress: &Progress,
) -> anyhow::Result<Cell> {
    let warm = Limit {
        duration: limit.duration,
        requests: Some(concurrency as u64),
    };
    drive(target, workload, concurrency, "w", warm).await?;
    let writes_before = fixture.writes(&target.http).await?;
    let before = watched.before(&target.http).await;
    let (workers, elapsed) = drive(target, workload, concurrency, "m", limit).await?;
    let sent: u64 = workers.iter().map(|w| w.ok + w.errors).sum();
    let split = watched.after(&target.http, before, sent).await;
    let writes = fixture.writes(&target.http).await? - writes_before;
    let mut cell = Cell {
        workload,
        store: target.store.clone(),
        concurrency,
        ok: 0,
        errors: 0,
        first_error: None,
        writes,
        writes_expected: 0,
        elapsed,
        latency_us: histogram(),
        split,
    };
    for w in workers {
        cell.ok += w.ok;
        cell.errors += w.errors;
        if cell.first_error.is_none() {
            cell.first_error = w.first_error;
        }
        cell.latency_us
            .add(&w.latency_us)
            .expect("histograms with the same bounds");
    }
    cell.writes_expected = match workload {
        Workload::Resubmit => 0,
        _ => cell.ok,
    };
    progress.line(&format!(
        "bench: {:<5} {:<8} c={:<3} {:>7} ok {:>4} errors {:>9.1}/s p50 {:.3} ms",
        workload.name(),
        cell.store,
        concurrency,
        cell.ok,
        cell.errors,
        cell.throughput(),
        cell.latency_us.value_at_quantile(0.5) as f64 / 1000.0
    ));
    Ok(cell)
}
