//! `/metrics` in Prometheus text format: counters and fixed-bucket histograms kept in memory per
//! process, plus gauges read from the store at scrape time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Histogram bucket bounds in seconds: from a fast fsync (0.1 ms) to the dispatch deadline.
const BUCKETS_S: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS_S.len()],
    count: u64,
    sum_s: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (i, bound) in BUCKETS_S.iter().enumerate() {
            if seconds <= *bound {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum_s += seconds;
    }
}

#[derive(Default)]
struct Inner {
    counters: BTreeMap<(&'static str, String), u64>,
    histograms: BTreeMap<(&'static str, String), Histogram>,
}

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    dispatches: InFlight,
    /// Client connections open now, over every listener (`listener.rs`).
    connections: AtomicU64,
}

/// Holds one client connection open in the gauge until dropped.
#[must_use = "the connection is counted only while this is held"]
pub struct ConnectionOpen(Arc<Metrics>);

impl ConnectionOpen {
    /// The metrics the connection is counted in.
    pub fn metrics(&self) -> &Metrics {
        &self.0
    }
}

impl Drop for ConnectionOpen {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Provider calls under way: sent, or about to be, and their answers not yet recorded. A gauge,
/// and what a graceful shutdown waits for (`serve.rs`).
#[derive(Default)]
struct InFlight {
    count: AtomicU64,
    /// Woken each time the count falls to zero.
    idle: Notify,
}

/// Holds one dispatch in flight (see [`Metrics::dispatch_in_flight`]) until dropped.
#[must_use = "the dispatch is in flight only while this is held"]
pub struct DispatchInFlight<'a>(&'a InFlight);

impl Drop for DispatchInFlight<'_> {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn count(&self, name: &'static str, label: String) {
        self.with(|m| *m.counters.entry((name, label)).or_default() += 1);
    }

    fn observe(&self, name: &'static str, label: String, took: Duration) {
        self.with(|m| {
            m.histograms
                .entry((name, label))
                .or_default()
                .observe(took.as_secs_f64())
        });
    }

    /// Marks one dispatch in flight, from its attempt's commit until its answer is recorded
    /// (write path steps 4 and 5), for as long as the guard is held.
    pub fn dispatch_in_flight(&self) -> DispatchInFlight<'_> {
        self.dispatches.count.fetch_add(1, Ordering::SeqCst);
        DispatchInFlight(&self.dispatches)
    }

    /// Dispatches in flight now.
    pub fn dispatches_in_flight(&self) -> u64 {
        self.dispatches.count.load(Ordering::SeqCst)
    }

    /// Waits until no dispatch is in flight, or `deadline`; answers how many still are.
    pub async fn dispatches_settled(&self, deadline: tokio::time::Instant) -> u64 {
        loop {
            // Registered before the count is read, so a fall to zero in between is not missed.
            let idle = self.dispatches.idle.notified();
            let left = self.dispatches_in_flight();
            if left == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.dispatches_in_flight();
            }
        }
    }

    /// Counts one client connection open while the guard is held.
    pub fn connection_open(self: &Arc<Self>) -> ConnectionOpen {
        self.connections.fetch_add(1, Ordering::SeqCst);
        ConnectionOpen(self.clone())
    }

    /// One connection closed by the server: `header read timeout`, `idle timeout`, or
    /// `evicted` (the oldest connection with no request in flight, to make room at the cap).
    pub fn connection_closed(&self, reason: &str) {
        self.count(
            "steward_http_connections_closed_total",
            format!("reason=\"{reason}\""),
        );
    }

    /// One accept that failed (out of file descriptors, say), answered by freeing a connection.
    pub fn accept_failed(&self) {
        self.count("steward_http_accept_errors_total", String::new());
    }

    /// One reconcile result: found, absent, inconclusive, no_lookup.
    pub fn reconcile(&self, result: &str) {
        self.count("steward_reconcile_total", format!("result=\"{result}\""));
    }

    /// One finished dispatch attempt, by the state it led to.
    pub fn attempt(&self, outcome: &str) {
        self.count(
            "steward_dispatch_attempts_total",
            format!("outcome=\"{outcome}\""),
        );
    }

    /// One invoke answered, by the invocation's status in the answer.
    pub fn invocation(&self, status: &str) {
        self.count("steward_invocations_total", format!("status=\"{status}\""));
    }

    /// The provider call of one attempt, from the first byte sent to the answer read, by the
    /// adapter that built it (`template` for a template action). `adapter` is a name from the
    /// adapter registry, never from a request, so the series are as many as the adapters.
    pub fn dispatch_latency(&self, adapter: &'static str, took: Duration) {
        self.observe(
            "steward_dispatch_duration_seconds",
            format!("adapter=\"{adapter}\""),
            took,
        );
    }

    /// One approver's decision recorded: `approve` or `deny` (a decision that changed nothing
    /// is not counted).
    pub fn approval_decision(&self, decision: &'static str) {
        self.count(
            "steward_approval_decisions_total",
            format!("decision=\"{decision}\""),
        );
    }

    /// What the shadow (log-only) policies that matched a recorded invocation would have
    /// decided (`shadowDecisions`): one count per policy and decision. The policy label is the
    /// policy's id (an operator's saved policy, never a request's text), so the series are as
    /// many as the environment's shadow policies times three decisions.
    pub fn shadow_decisions(&self, shadow: Option<&serde_json::Value>) {
        let Some(list) = shadow.and_then(serde_json::Value::as_array) else {
            return;
        };
        for d in list {
            let text = |k: &str| d.get(k).and_then(serde_json::Value::as_str).unwrap_or("");
            self.count(
                "steward_shadow_policy_decisions_total",
                format!(
                    "policy=\"{}\",decision=\"{}\"",
                    text("policyId"),
                    text("decision")
                ),
            );
        }
    }

    /// Approvals the expiry sweep settled `expired`.
    pub fn approvals_expired(&self, count: u64) {
        self.with(|m| {
            *m.counters
                .entry(("steward_approvals_expired_total", String::new()))
                .or_default() += count
        });
    }

    /// One webhook event moved to the dead-letter list after its retry schedule.
    pub fn webhook_dead_lettered(&self) {
        self.count("steward_webhook_dead_letters_total", String::new());
    }

    /// One HTTP request answered: by route template (`/api/v2/actions/{id}`, `unmatched` for
    /// none), method and status, and the time to its answer's head.
    pub fn http_request(&self, route: &str, method: &str, status: u16, took: Duration) {
        self.count(
            "steward_http_requests_total",
            format!("route=\"{route}\",method=\"{method}\",status=\"{status}\""),
        );
        self.observe(
            "steward_http_request_duration_seconds",
            format!("route=\"{route}\",method=\"{method}\""),
            took,
        );
    }

    /// One durable store write on the request path (`submit`, `change_effect`), fsync included.
    pub fn store_commit(&self, operation: &str, took: Duration) {
        self.observe(
            "steward_store_commit_duration_seconds",
            format!("operation=\"{operation}\""),
            took,
        );
    }

    /// The text exposition, with `gauges` (name, help, value) read at scrape time.
    pub fn render(&self, gauges: &[(&str, &str, f64)]) -> String {
        let mut out = String::new();
        let in_flight = [
            (
                "steward_dispatches_in_flight",
                "provider calls sent or about to be whose answers are not recorded yet, in this process",
                self.dispatches_in_flight() as f64,
            ),
            (
                "steward_http_connections_open",
                "client connections open now, over every listener",
                self.connections.load(Ordering::SeqCst) as f64,
            ),
        ];
        for (name, help, value) in gauges.iter().chain(&in_flight) {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
            ));
        }
        out.push_str(&format!(
            "# HELP steward_build_info the Steward version serving\n# TYPE steward_build_info gauge\n\
             steward_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        ));
        self.with(|m| {
            let mut last = "";
            for ((name, label), value) in &m.counters {
                if *name != last {
                    out.push_str(&format!("# TYPE {name} counter\n"));
                    last = name;
                }
                if label.is_empty() {
                    out.push_str(&format!("{name} {value}\n"));
                } else {
                    out.push_str(&format!("{name}{{{label}}} {value}\n"));
                }
            }
            let mut last = "";
            for ((name, label), h) in &m.histograms {
                if *name != last {
                    out.push_str(&format!("# TYPE {name} histogram\n"));
                    last = name;
                }
                let sep = if label.is_empty() { "" } else { "," };
                for (bound, count) in BUCKETS_S.iter().zip(h.counts) {
                    out.push_str(&format!(
                        "{name}_bucket{{{label}{sep}le=\"{bound}\"}} {count}\n"
                    ));
                }
                out.push_str(&format!(
                    "{name}_bucket{{{label}{sep}le=\"+Inf\"}} {}\n",
                    h.count
                ));
                let braces = if label.is_empty() {
                    String::new()
                } else {
                    format!("{{{label}}}")
                };
                out.push_str(&format!(
                    "{name}_sum{braces} {}\n{name}_count{braces} {}\n",
                    h.sum_s, h.count
                ));
            }
        });
        out
    }
}

/// The methods a label may name; any other is `other`, so a client cannot grow the series.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Middleware over the whole router: counts every request by its route's template (never its
/// path, so ids and names add no series) and times it to its answer's head.
pub(crate) async fn track_http(
    axum::extract::State(metrics): axum::extract::State<Arc<Metrics>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = method_label(request.method());
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    metrics.http_request(
        &route,
        method,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let m = Metrics::default();
        m.invocation("succeeded");
        m.invocation("succeeded");
        m.dispatch_latency("stripe.refund", Duration::from_millis(3));
        m.store_commit("submit", Duration::from_micros(200));
        let text = m.render(&[(
            "steward_unknown_effects",
            "effects whose outcome is unknown",
            2.0,
        )]);
        assert!(
            text.contains("steward_invocations_total{status=\"succeeded\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "steward_dispatch_duration_seconds_bucket{adapter=\"stripe.refund\",le=\"0.005\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "steward_dispatch_duration_seconds_bucket{adapter=\"stripe.refund\",le=\"0.001\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains("steward_store_commit_duration_seconds_count{operation=\"submit\"} 1"),
            "{text}"
        );
        assert!(text.contains("steward_unknown_effects 2"), "{text}");
        assert!(text.contains("steward_dispatches_in_flight 0"), "{text}");
        assert!(text.contains("steward_build_info{version=\""), "{text}");
    }

    #[test]
    fn approvals_decided_and_expired_and_dead_letters_are_counted() {
        let m = Metrics::default();
        m.approval_decision("approve");
        m.approval_decision("approve");
        m.approval_decision("deny");
        m.approvals_expired(3);
        m.webhook_dead_lettered();
        let text = m.render(&[("steward_reconcile_lag_seconds", "lag", 1.5)]);
        for line in [
            "steward_approval_decisions_total{decision=\"approve\"} 2",
            "steward_approval_decisions_total{decision=\"deny\"} 1",
            "steward_approvals_expired_total 3",
            "steward_webhook_dead_letters_total 1",
            "steward_reconcile_lag_seconds 1.5",
        ] {
            assert!(text.contains(line), "no {line} in\n{text}");
        }
    }

    /// Every family the Grafana dashboard in `deploy/` queries is one this server exports (by
    /// name, here or among the scrape-time gauges of `api/metrics.rs`).
    #[test]
    fn the_dashboard_queries_only_families_that_exist() {
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../deploy/grafana-dashboard.json")).unwrap();
        let exported = [include_str!("metrics.rs"), include_str!("api/metrics.rs")].concat();
        let mut queried = Vec::new();
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().unwrap();
                for (at, _) in expr.match_indices("steward_") {
                    let name: String = expr[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    let family = ["_bucket", "_sum", "_count"]
                        .iter()
                        .find_map(|suffix| name.strip_suffix(suffix))
                        .unwrap_or(&name)
                        .to_string();
                    queried.push(family);
                }
            }
        }
        assert!(queried.len() > 10, "{queried:?}");
        // A name is exported when the sources spell it whole (not as the start of a longer
        // name).
        let spelled = |family: &str| {
            exported.match_indices(family).any(|(at, _)| {
                exported[at + family.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| !(c.is_ascii_alphanumeric() || c == '_'))
            })
        };
        for family in queried {
            assert!(
                spelled(&family),
                "the dashboard queries {family}, which the server does not export"
            );
        }
    }

    #[tokio::test]
    async fn requests_are_counted_by_route_template_method_and_status() {
        use axum::routing::get;
        use tower::ServiceExt;
        let metrics = Arc::new(Metrics::default());
        let app = axum::Router::new()
            .route("/things/{id}", get(|| async { "ok" }))
            .layer(axum::middleware::from_fn_with_state(
                metrics.clone(),
                track_http,
            ));
        for uri in ["/things/a", "/things/b", "/nothing"] {
            let request = axum::http::Request::get(uri)
                .body(axum::body::Body::empty())
                .unwrap();
            app.clone().oneshot(request).await.unwrap();
        }
        let weird = axum::http::Request::builder()
            .method("BREW")
            .uri("/things/c")
            .body(axum::body::Body::empty())
            .unwrap();
        app.clone().oneshot(weird).await.unwrap();
        let text = metrics.render(&[]);
        for line in [
            "steward_http_requests_total{route=\"/things/{id}\",method=\"GET\",status=\"200\"} 2",
            "steward_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1",
            "steward_http_requests_total{route=\"/things/{id}\",method=\"other\",status=\"405\"} 1",
            "steward_http_request_duration_seconds_count{route=\"/things/{id}\",method=\"GET\"} 2",
        ] {
            assert!(text.contains(line), "no {line} in\n{text}");
        }
        assert!(!text.contains("/things/a"), "a path is never a label");
    }

    #[tokio::test]
    async fn a_shutdown_waits_for_the_dispatches_in_flight_and_no_longer_than_its_deadline() {
        let m = std::sync::Arc::new(Metrics::default());
        let soon = || tokio::time::Instant::now() + Duration::from_millis(50);
        assert_eq!(m.dispatches_settled(soon()).await, 0, "none in flight");
        let first = m.dispatch_in_flight();
        let second = m.dispatch_in_flight();
        assert!(m.render(&[]).contains("steward_dispatches_in_flight 2"));
        assert_eq!(m.dispatches_settled(soon()).await, 2, "the deadline passed");
        drop(first);
        let waiting = {
            let m = m.clone();
            tokio::spawn(async move {
                let far = tokio::time::Instant::now() + Duration::from_secs(30);
                m.dispatches_settled(far).await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "one is still in flight");
        drop(second);
        assert_eq!(waiting.await.unwrap(), 0);
    }
}
