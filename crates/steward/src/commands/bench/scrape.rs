//! The server's own account of a cell: `/metrics` (Prometheus text) scraped before and after,
//! and the `_sum`/`_count` deltas of the histograms that split a request's time.
//!
//! | family | what one observation is (`steward-server/src/metrics.rs`) |
//! | --- | --- |
//! | `steward_http_request_duration_seconds` | one request, from its arrival to its answer's head |
//! | `steward_store_commit_duration_seconds` | one durable store write on the request path, by `operation`, from the call to its return: the time queued for the embedded store's writer or a PostgreSQL connection, the statements and the commit with its fsync |
//! | `steward_dispatch_duration_seconds` | one provider call, first byte sent to the answer read: the network to the fixture and the fixture's time |

use std::collections::BTreeMap;

const HTTP: &str = "steward_http_request_duration_seconds";
const COMMIT: &str = "steward_store_commit_duration_seconds";
const DISPATCH: &str = "steward_dispatch_duration_seconds";

/// A histogram's count and sum (seconds), or their deltas.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Totals {
    pub(super) count: f64,
    pub(super) sum_s: f64,
}

impl Totals {
    fn minus(self, before: Totals) -> Totals {
        Totals {
            count: (self.count - before.count).max(0.0),
            sum_s: (self.sum_s - before.sum_s).max(0.0),
        }
    }

    fn plus(self, other: Totals) -> Totals {
        Totals {
            count: self.count + other.count,
            sum_s: self.sum_s + other.sum_s,
        }
    }
}

/// The families a cell is split by, summed over a server's (or every replica's) series.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Times {
    /// Every route but `/metrics` itself (the scrapes are not the load).
    pub(super) http: Totals,
    /// By `operation` (`submit`, `begin_attempt`, `submit_and_begin`, `record_answer`,
    /// `decide_approval`).
    pub(super) commits: BTreeMap<String, Totals>,
    pub(super) dispatch: Totals,
}

/// The value of label `name` in a series' label text (`a="x",b="y"`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key.trim() == name).then(|| value.trim().trim_matches('"'))
    })
}

/// Parses a Prometheus text exposition into [`Times`]; lines of other families, comments and
/// malformed lines are skipped.
pub(super) fn parse(text: &str) -> Times {
    let mut times = Times::default();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let (family, is_sum) = if let Some(f) = name.strip_suffix("_sum") {
            (f, true)
        } else if let Some(f) = name.strip_suffix("_count") {
            (f, false)
        } else {
            continue;
        };
        let slot = match family {
            HTTP if label(labels, "route") != Some("/metrics") => &mut times.http,
            COMMIT => times
                .commits
                .entry(label(labels, "operation").unwrap_or("").to_string())
                .or_default(),
            DISPATCH => &mut times.dispatch,
            _ => continue,
        };
        if is_sum {
            slot.sum_s += value;
        } else {
            slot.count += value;
        }
    }
    times
}

impl Times {
    /// From `before` to `self`.
    pub(super) fn since(&self, before: &Times) -> Times {
        Times {
            http: self.http.minus(before.http),
            commits: self
                .commits
                .iter()
                .map(|(op, t)| {
                    let b = before.commits.get(op).copied().unwrap_or_default();
                    (op.clone(), t.minus(b))
                })
                .filter(|(_, t)| t.count > 0.0)
                .collect(),
            dispatch: self.dispatch.minus(before.dispatch),
        }
    }

    /// Two servers' figures together (replicas of one store).
    pub(super) fn add(&mut self, other: &Times) {
        self.http = self.http.plus(other.http);
        for (op, t) in &other.commits {
            let slot = self.commits.entry(op.clone()).or_default();
            *slot = slot.plus(*t);
        }
        self.dispatch = self.dispatch.plus(other.dispatch);
    }

    /// Every commit, whatever its operation.
    pub(super) fn all_commits(&self) -> Totals {
        self.commits
            .values()
            .fold(Totals::default(), |sum, t| sum.plus(*t))
    }
}

/// Every server's `/metrics` (base URL, token), summed; `None` when there is none or one could
/// not be read.
pub(super) async fn scrape(http: &reqwest::Client, servers: &[(String, String)]) -> Option<Times> {
    if servers.is_empty() {
        return None;
    }
    let mut times = Times::default();
    for (url, token) in servers {
        let text = http
            .get(format!("{url}/metrics"))
            .bearer_auth(token)
            .send()
            .await
            .ok()?
            .error_for_status()
            .ok()?
            .text()
            .await
            .ok()?;
        times.add(&parse(&text));
    }
    Some(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "\
# HELP steward_dispatches_in_flight x
# TYPE steward_dispatches_in_flight gauge
steward_dispatches_in_flight 0
# TYPE steward_store_commit_duration_seconds histogram
steward_store_commit_duration_seconds_bucket{operation=\"submit_and_begin\",le=\"0.001\"} 3
steward_store_commit_duration_seconds_sum{operation=\"submit_and_begin\"} 0.004
steward_store_commit_duration_seconds_count{operation=\"submit_and_begin\"} 4
steward_store_commit_duration_seconds_sum{operation=\"record_answer\"} 0.002
steward_store_commit_duration_seconds_count{operation=\"record_answer\"} 4
steward_dispatch_duration_seconds_sum{adapter=\"stripe.refund\"} 0.01
steward_dispatch_duration_seconds_count{adapter=\"stripe.refund\"} 4
steward_http_request_duration_seconds_sum{route=\"/api/v2/actions/{id}/invoke\",method=\"POST\"} 0.05
steward_http_request_duration_seconds_count{route=\"/api/v2/actions/{id}/invoke\",method=\"POST\"} 4
steward_http_request_duration_seconds_sum{route=\"/metrics\",method=\"GET\"} 0.5
steward_http_request_duration_seconds_count{route=\"/metrics\",method=\"GET\"} 1
";

    const AFTER: &str = "\
steward_store_commit_duration_seconds_sum{operation=\"submit_and_begin\"} 0.104
steward_store_commit_duration_seconds_count{operation=\"submit_and_begin\"} 104
steward_store_commit_duration_seconds_sum{operation=\"record_answer\"} 0.052
steward_store_commit_duration_seconds_count{operation=\"record_answer\"} 104
steward_store_commit_duration_seconds_sum{operation=\"decide_approval\"} 0
steward_store_commit_duration_seconds_count{operation=\"decide_approval\"} 0
steward_dispatch_duration_seconds_sum{adapter=\"stripe.refund\"} 0.21
steward_dispatch_duration_seconds_count{adapter=\"stripe.refund\"} 104
steward_http_request_duration_seconds_sum{route=\"/api/v2/actions/{id}/invoke\",method=\"POST\"} 0.55
steward_http_request_duration_seconds_count{route=\"/api/v2/actions/{id}/invoke\",method=\"POST\"} 104
steward_http_request_duration_seconds_sum{route=\"/metrics\",method=\"GET\"} 0.9
steward_http_request_duration_seconds_count{route=\"/metrics\",method=\"GET\"} 2
a malformed line
steward_dispatch_duration_seconds_sum{adapter=\"x\"} not-a-number
";

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn deltas_by_family_and_operation_leave_the_scrapes_out() {
        let delta = parse(AFTER).since(&parse(BEFORE));
        assert!(close(delta.http.count, 100.0) && close(delta.http.sum_s, 0.5));
        assert!(close(delta.dispatch.count, 100.0) && close(delta.dispatch.sum_s, 0.2));
        let ops: Vec<&str> = delta.commits.keys().map(String::as_str).collect();
        assert_eq!(
            ops,
            ["record_answer", "submit_and_begin"],
            "no empty series"
        );
        assert!(close(delta.commits["submit_and_begin"].sum_s, 0.1));
        assert!(close(delta.commits["record_answer"].count, 100.0));
        let all = delta.all_commits();
        assert!(close(all.count, 200.0) && close(all.sum_s, 0.15));
    }

    #[test]
    fn replicas_add_up() {
        let mut two = parse(AFTER);
        two.add(&parse(AFTER));
        assert!(close(two.dispatch.count, 208.0));
        assert!(close(two.commits["record_answer"].sum_s, 0.104));
        assert_eq!(parse("").since(&parse("")), Times::default());
    }

    #[test]
    fn a_label_is_found_among_others() {
        assert_eq!(
            label("route=\"/metrics\",method=\"GET\"", "method"),
            Some("GET")
        );
        assert_eq!(label("route=\"/x\"", "operation"), None);
    }
}
