//! The agents and the operator: K client tasks that invoke with stable operation keys and retry
//! as a real agent does, and approvers that decide the gated ones concurrently. Every request
//! and answer goes to the event log; one request per attempt (no hidden client retries), so the
//! log holds every answer Steward gave.

use super::check::Operation;
use super::events::{Answer, Event, EventLog};
use super::fleet::Urls;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One invoke's HTTP deadline, in milliseconds: past the replicas' provider deadline (the suite
/// sets it to 3 s) with room for a commit, short enough that an agent stuck on a paused or cut
/// off replica gives up and calls again elsewhere.
pub(crate) const INVOKE_TIMEOUT_MS: u64 = 8_000;
/// The first pause after an unanswered or retryable call, in milliseconds; it doubles.
const BACKOFF_INITIAL_MS: u64 = 50;
/// The longest pause between calls for one operation, in milliseconds: short, so that the time
/// from an outage's end to the next acknowledged invoke (the RTO) is Steward's, not the agent's.
const BACKOFF_MAX_MS: u64 = 500;
/// How often an agent calls again for an operation that is running, unknown or pending
/// approval, in milliseconds.
const POLL_MS: u64 = 250;
/// How often an approver lists pending approvals, in milliseconds.
const APPROVER_POLL_MS: u64 = 200;
/// How many times an approver sends one decision before leaving it to the next listing: with
/// [`backoff`]'s pauses and [`INVOKE_TIMEOUT_MS`] per call, past a failover's 10–15 s.
const DECISION_ATTEMPTS: u32 = 40;
/// How often the sweep after the heal lists what is still pending, in milliseconds.
const SWEEP_MS: u64 = 1_000;
/// One in this many approvals is denied.
const DENY_ONE_IN: u64 = 5;

/// What the agents and approvers share.
pub(crate) struct Shared {
    pub(crate) log: EventLog,
    pub(crate) urls: Urls,
    pub(crate) http: reqwest::Client,
    pub(crate) agent_key: String,
    pub(crate) approver_key: String,
    pub(crate) action: String,
    pub(crate) gated_action: String,
    /// The share of operations that need an approval, in percent.
    pub(crate) gated_percent: u32,
    pub(crate) seed: u64,
    /// Set at the end of the faults: agents start no new operation.
    pub(crate) stop_starting: AtomicBool,
    /// Set when the drain is over: agents give up what is left, approvers stop.
    pub(crate) stop_all: AtomicBool,
    /// Operations that reached a final status.
    pub(crate) settled: AtomicU64,
    pub(crate) operations: Mutex<Vec<Operation>>,
    /// Operations given up unsettled (the drain ended first), for the summary.
    pub(crate) abandoned: Mutex<Vec<String>>,
}

impl Shared {
    fn url(&self, replica: usize) -> String {
        let urls = self.urls.read().unwrap_or_else(|e| e.into_inner());
        urls[replica % urls.len()].clone()
    }

    fn replicas(&self) -> usize {
        self.urls.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Sends one request, once; the envelope's HTTP status and JSON body, or why none came.
async fn send(request: reqwest::RequestBuilder) -> Result<(u16, Value), String> {
    let response = request.send().await.map_err(|e| {
        if e.is_timeout() {
            "timed out".to_string()
        } else if e.is_connect() {
            "connection refused".to_string()
        } else {
            "connection broken".to_string()
        }
    })?;
    let status = response.status().as_u16();
    let body = response
        .json::<Value>()
        .await
        .map_err(|_| "answer cut short".to_string())?;
    Ok((status, body))
}

/// What one invoke's answer tells the agent.
fn classify(result: Result<(u16, Value), String>) -> Answer {
    let (status, body) = match result {
        Ok(answer) => answer,
        Err(reason) => return Answer::Unanswered { reason },
    };
    if status == 200 || status == 202 {
        let data = &body["data"];
        return match (data["id"].as_str(), data["status"].as_str()) {
            (Some(id), Some(s)) => Answer::Acknowledged {
                invocation: id.to_string(),
                status: s.to_string(),
            },
            _ => Answer::Retry {
                status,
                code: "malformed".into(),
            },
        };
    }
    let code = body["error"]["code"]
        .as_str()
        .unwrap_or("no_code")
        .to_string();
    match (status, code.as_str()) {
        (503, "STORAGE_UNAVAILABLE") => Answer::NotSent { status, code },
        (500..=599 | 429, _) | (409, "idempotency_request_in_progress") => {
            Answer::Retry { status, code }
        }
        _ => Answer::Refused { status, code },
    }
}

/// Whether an invocation status is final for an agent (it stops calling).
fn done(status: &str) -> bool {
    matches!(status, "succeeded" | "failed" | "denied" | "expired")
}

/// One agent: operations one after another until told to stop.
pub(crate) async fn agent(shared: Arc<Shared>, client: usize) {
    let mut rng = StdRng::seed_from_u64(shared.seed ^ (client as u64).wrapping_mul(0x9e37_79b9));
    let mut n = 0u64;
    while !shared.stop_starting.load(Ordering::Relaxed) {
        n += 1;
        let op = Operation {
            key: format!("f{}-c{client}-{n}", shared.seed),
            payment_intent: format!("pi_f{}_c{client}_{n}", shared.seed),
            amount: rng.gen_range(100..1_000),
        };
        let gated = rng.gen_range(0..100) < shared.gated_percent;
        shared
            .operations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(op.clone());
        drive(&shared, &op, gated, &mut rng).await;
    }
}

/// Calls for one operation until it has an outcome: the same operation key every time, on any
/// replica. An answer that nothing was sent, as the first answer, is believed: the agent gives
/// the key up (and would take another path), which is what the checks hold Steward to.
async fn drive(shared: &Shared, op: &Operation, gated: bool, rng: &mut StdRng) {
    let action = if gated {
        &shared.gated_action
    } else {
        &shared.action
    };
    let body = json!({
        "input": {"paymentIntent": op.payment_intent, "amount": op.amount},
        "operationKey": op.key,
    });
    let mut failures = 0u32;
    let mut answered = false;
    let mut settled_counted = false;
    for attempt in 1u32.. {
        if shared.stop_all.load(Ordering::Relaxed) {
            shared
                .abandoned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(op.key.clone());
            return;
        }
        let replica = rng.gen_range(0..shared.replicas());
        let url = format!("{}/api/v2/actions/{action}/invoke", shared.url(replica));
        let request = shared
            .http
            .post(url)
            .bearer_auth(&shared.agent_key)
            .header("Idempotency-Key", format!("{}.{attempt}", op.key))
            .timeout(Duration::from_millis(INVOKE_TIMEOUT_MS))
            .json(&body);
        let sent_at = shared.log.now();
        shared.log.record(Event::Request {
            operation: op.key.clone(),
            replica,
            attempt,
        });
        let answer = classify(send(request).await);
        shared.log.record(Event::Answer {
            operation: op.key.clone(),
            replica,
            sent_at,
            answer: answer.clone(),
        });
        let first = !answered;
        answered = true;
        let pause = match &answer {
            Answer::Acknowledged { status, .. } => {
                failures = 0;
                if done(status) {
                    if !settled_counted {
                        shared.settled.fetch_add(1, Ordering::Relaxed);
                    }
                    return;
                }
                if status == "unknown" && !settled_counted {
                    // Honest, and settled by the reconciler: counted, and watched to the end.
                    settled_counted = true;
                    shared.settled.fetch_add(1, Ordering::Relaxed);
                }
                Duration::from_millis(POLL_MS)
            }
            Answer::NotSent { .. } if first => return,
            Answer::Refused { .. } => return,
            Answer::NotSent { .. } | Answer::Retry { .. } | Answer::Unanswered { .. } => {
                failures += 1;
                backoff(failures)
            }
        };
        tokio::time::sleep(pause).await;
    }
}

fn backoff(failures: u32) -> Duration {
    let factor = 1u64 << failures.saturating_sub(1).min(10);
    Duration::from_millis((BACKOFF_INITIAL_MS * factor).min(BACKOFF_MAX_MS))
}

/// One approver: lists pending approvals on a replica and decides each (approve, or deny one in
/// [`DENY_ONE_IN`] by a seeded choice), racing the other approvers, until told to stop.
pub(crate) async fn approver(shared: Arc<Shared>, index: usize) {
    let mut rng = StdRng::seed_from_u64(shared.seed.wrapping_add(0xa11 + index as u64));
    while !shared.stop_all.load(Ordering::Relaxed) {
        let replica = rng.gen_range(0..shared.replicas());
        decide_listed(&shared, replica, index).await;
        tokio::time::sleep(Duration::from_millis(APPROVER_POLL_MS)).await;
    }
}

/// Lists the pending approvals on `replica` and decides each, retrying each decision as
/// [`decide`] does; how many were listed, or `None` when the list itself got no answer.
async fn decide_listed(shared: &Shared, replica: usize, index: usize) -> Option<usize> {
    let base = shared.url(replica);
    let list = shared
        .http
        .get(format!("{base}/api/v2/approvals?status=pending&limit=200"))
        .bearer_auth(&shared.approver_key)
        .timeout(Duration::from_millis(INVOKE_TIMEOUT_MS));
    let Ok((200, body)) = send(list).await else {
        return None;
    };
    let pending = body["data"].as_array().cloned().unwrap_or_default();
    for approval in &pending {
        let Some(id) = approval["id"].as_str() else {
            continue;
        };
        let operation = approval["payload"]["operationKey"]
            .as_str()
            .or_else(|| approval["operationKey"].as_str())
            .unwrap_or("")
            .to_string();
        decide(shared, replica, id, operation, index).await;
    }
    Some(pending.len())
}

/// After the heal: an operator who makes sure nothing acknowledged waits on an approval that
/// the racing approvers lost to an outage (both decisions answered 503 during a failover, as
/// in seed 26's `f26-c1-2309`). Every [`SWEEP_MS`] until told to stop, it lists the pending
/// approvals, on each replica in turn, and decides every one, with the same retries.
pub(crate) async fn sweeper(shared: Arc<Shared>, index: usize) {
    let mut round = 0usize;
    while !shared.stop_all.load(Ordering::Relaxed) {
        if let Some(n) = decide_listed(&shared, round, index).await {
            if n > 0 {
                shared.log.note(format!(
                    "sweep: {n} pending approvals decided after the heal"
                ));
            }
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(SWEEP_MS)).await;
    }
}

/// Whether the suite denies `approval`: the same answer from every approver.
fn denies(seed: u64, approval: &str) -> bool {
    let hash = approval
        .bytes()
        .fold(seed, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    hash % DENY_ONE_IN == 0
}

/// What an approver does after one decision's answer (or the lack of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterDecision {
    /// Decided, by this call or before it (a 409: the other approver, or this approver's own
    /// decision whose answer was lost), or refused for good (another 4xx): stop.
    Done,
    /// No answer, a timeout, a 5xx (503 storage unavailable, outcome unknown) or 429, or the
    /// key still in progress: send the same decision again.
    Retry,
}

/// The approver's reading of a decision's answer: retried as an agent retries an invoke.
fn after_decision(result: &Result<(u16, Value), String>) -> AfterDecision {
    let (status, body) = match result {
        Ok(answer) => answer,
        Err(_) => return AfterDecision::Retry,
    };
    let code = body["error"]["code"].as_str().unwrap_or("");
    match (*status, code) {
        (409, "idempotency_request_in_progress") => AfterDecision::Retry,
        (500..=599 | 429, _) => AfterDecision::Retry,
        _ => AfterDecision::Done,
    }
}

/// Decides `approval` on `replica`, retrying the same decision (bounded, with backoff, on the
/// next replica each time) until it is decided or refused for good. Each attempt has its own
/// `Idempotency-Key`: a key whose first request failed while the database was away may stay
/// `in progress` (its release failed too), and the decision itself is idempotent by state (a
/// second decision is a 409, never a second row).
async fn decide(shared: &Shared, replica: usize, approval: &str, operation: String, index: usize) {
    let verb = if denies(shared.seed, approval) {
        "deny"
    } else {
        "approve"
    };
    for attempt in 1..=DECISION_ATTEMPTS {
        let base = shared.url(replica + attempt as usize - 1);
        let request = shared
            .http
            .post(format!("{base}/api/v2/approvals/{approval}/{verb}"))
            .bearer_auth(&shared.approver_key)
            .header(
                "Idempotency-Key",
                format!("decide-{approval}-{index}.{attempt}"),
            )
            .timeout(Duration::from_millis(INVOKE_TIMEOUT_MS))
            .json(&json!({"note": "decided by steward faults"}));
        let result = send(request).await;
        shared.log.record(Event::Decision {
            approval: approval.to_string(),
            operation: operation.clone(),
            decision: verb.to_string(),
            status: result.as_ref().map(|(status, _)| *status).unwrap_or(0),
        });
        if after_decision(&result) == AfterDecision::Done || shared.stop_all.load(Ordering::Relaxed)
        {
            return;
        }
        tokio::time::sleep(backoff(attempt)).await;
    }
}

/// Waits (bounded) until `shared.settled` reaches `count`; `false` when `limit` passed first.
pub(crate) async fn settled_at_least(shared: &Shared, count: u64, limit: Duration) -> bool {
    let started = Instant::now();
    while shared.settled.load(Ordering::Relaxed) < count {
        if started.elapsed() >= limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_classified_as_an_agent_reads_them() {
        let ok = classify(Ok((
            200,
            json!({"success": true, "data": {"id": "inv_1", "status": "running"}}),
        )));
        assert_eq!(
            ok,
            Answer::Acknowledged {
                invocation: "inv_1".into(),
                status: "running".into()
            }
        );
        let storage = json!({"success": false, "error": {"code": "STORAGE_UNAVAILABLE"}});
        assert!(matches!(
            classify(Ok((503, storage))),
            Answer::NotSent { .. }
        ));
        let busy = json!({"success": false, "error": {"code": "idempotency_request_in_progress"}});
        assert!(matches!(classify(Ok((409, busy))), Answer::Retry { .. }));
        let conflict = json!({"success": false, "error": {"code": "operation_key_conflict"}});
        assert!(matches!(
            classify(Ok((409, conflict))),
            Answer::Refused { .. }
        ));
        let invalid = json!({"success": false, "error": {"code": "VALIDATION_ERROR"}});
        assert!(matches!(
            classify(Ok((400, invalid))),
            Answer::Refused { .. }
        ));
        assert!(matches!(
            classify(Err("timed out".into())),
            Answer::Unanswered { .. }
        ));
    }

    #[test]
    fn a_decision_is_retried_until_decided_by_someone() {
        let error = |status: u16, code: &str| Ok((status, json!({"error": {"code": code}})));
        let retried = [
            Err("timed out".to_string()),
            Err("connection refused".to_string()),
            error(503, "STORAGE_UNAVAILABLE"),
            error(503, "outcome_unknown"),
            error(500, "INTERNAL"),
            error(429, "rate_limited"),
            error(409, "idempotency_request_in_progress"),
        ];
        for answer in &retried {
            assert_eq!(after_decision(answer), AfterDecision::Retry, "{answer:?}");
        }
        let done = [
            Ok((200, json!({"data": {"id": "apr_1", "status": "approved"}}))),
            error(409, "approval_already_decided"),
            error(409, "already_decided_by_this_key"),
            error(404, "NOT_FOUND"),
            error(403, "FORBIDDEN"),
        ];
        for answer in &done {
            assert_eq!(after_decision(answer), AfterDecision::Done, "{answer:?}");
        }
    }

    #[test]
    fn every_approver_makes_the_same_choice() {
        let denied = (0..100).filter(|n| denies(7, &format!("apr_{n}"))).count();
        assert!(denied > 5 && denied < 40, "{denied}");
        assert_eq!(denies(7, "apr_x"), denies(7, "apr_x"));
    }
}
