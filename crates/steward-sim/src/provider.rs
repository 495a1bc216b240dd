//! The in-memory provider: a Stripe-shaped refunds API (`POST /v1/refunds`, deduplicated by
//! the `Idempotency-Key` header as Stripe does, and `GET /v1/refunds?payment_intent=` that the
//! `stripe.refund` adapter's lookup reads) and a plain endpoint a template action posts to
//! (`POST /v1/notify/<op>`, no key, no lookup). It counts committed writes and fails in the
//! ways real providers do. Requests arrive as the production dispatcher built them.

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use steward_server::Exchange;

/// What the provider does with one write request, chosen by the seed when it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Writes and answers 200 with a succeeded refund.
    None,
    /// Refuses (400); writes nothing.
    Reject,
    /// Answers 500 with `Stripe-Should-Retry: true` before writing: nothing happened.
    ErrorBeforeCommit,
    /// Writes, then answers 500: the caller cannot tell.
    ErrorAfterCommit,
    /// Writes, and answers only after the caller's deadline.
    Slow,
}

impl Fault {
    pub(crate) const ALL: [Fault; 5] = [
        Fault::None,
        Fault::Reject,
        Fault::ErrorBeforeCommit,
        Fault::ErrorAfterCommit,
        Fault::Slow,
    ];
}

/// One request as the provider reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    /// `POST /v1/refunds` for operation `op`, under the `Idempotency-Key` it carried.
    Refund { op: usize, key: Option<String> },
    /// `POST /v1/notify/<op>`: a template action's write.
    Notify { op: usize },
    /// `GET /v1/refunds?payment_intent=`: the adapter's read-only lookup.
    ListRefunds { op: usize },
    /// Anything else (a bug in the simulated actions).
    Other(String),
}

/// The operation a payment intent or path segment names (`pi_op-3`, `op-3`).
fn op_of(text: &str) -> Option<usize> {
    text.trim_start_matches("pi_")
        .strip_prefix("op-")
        .and_then(|n| n.parse().ok())
}

impl Call {
    pub(crate) fn of(request: &reqwest::Request) -> Call {
        let url = request.url();
        let path = url.path().to_string();
        let other = || Call::Other(format!("{} {path}", request.method()));
        match (request.method().as_str(), path.as_str()) {
            ("POST", "/v1/refunds") => {
                let body = request
                    .body()
                    .and_then(|b| b.as_bytes())
                    .unwrap_or_default();
                let form: BTreeMap<String, String> =
                    url::form_urlencoded::parse(body).into_owned().collect();
                let Some(op) = form.get("payment_intent").and_then(|p| op_of(p)) else {
                    return other();
                };
                let key = request
                    .headers()
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                Call::Refund { op, key }
            }
            ("GET", "/v1/refunds") => url
                .query_pairs()
                .find(|(k, _)| k == "payment_intent")
                .and_then(|(_, v)| op_of(&v))
                .map_or_else(other, |op| Call::ListRefunds { op }),
            ("POST", p) => p
                .strip_prefix("/v1/notify/")
                .and_then(op_of)
                .map_or_else(other, |op| Call::Notify { op }),
            _ => other(),
        }
    }

    pub(crate) fn writes(&self) -> bool {
        matches!(self, Call::Refund { .. } | Call::Notify { .. })
    }
}

/// The provider's answer as it travels back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Response {
    pub status: u16,
    /// `Stripe-Should-Retry`, when sent.
    pub should_retry: Option<bool>,
    pub body: Value,
}

impl Response {
    fn new(status: u16, body: Value) -> Self {
        Self {
            status,
            should_retry: None,
            body,
        }
    }

    /// The answer as the server's transport hands it over.
    pub(crate) fn exchange(&self) -> Exchange {
        let mut headers = HeaderMap::new();
        if let Some(retry) = self.should_retry {
            let value = if retry { "true" } else { "false" };
            headers.insert(
                "stripe-should-retry",
                value.parse().expect("a header value"),
            );
        }
        Exchange {
            status: self.status,
            headers,
            body: Ok(serde_json::to_vec(&self.body).expect("JSON encodes")),
        }
    }
}

/// One committed write.
#[derive(Debug, Clone)]
pub(crate) struct Write {
    pub op: usize,
    /// Which of the operation's requests (in arrival order) made it.
    pub request: u32,
    /// The refund's id, and the key it was made under (a refund only).
    pub id: String,
    pub key: Option<String>,
}

#[derive(Default)]
pub(crate) struct Provider {
    pub writes: Vec<Write>,
    /// Every write request that reached the provider, written or not: (operation, its n-th).
    pub received: Vec<(usize, u32)>,
    by_key: BTreeMap<String, usize>,
}

impl Provider {
    /// Handles one request. A refund key already written answers with that write and writes
    /// nothing. Lookups are never faulted (the network may still lose them).
    pub(crate) fn receive(&mut self, call: &Call, fault: Fault) -> Response {
        let (op, key) = match call {
            Call::ListRefunds { op } => return self.list(*op),
            Call::Other(what) => {
                return Response::new(404, json!({"error": format!("no route {what}")}))
            }
            Call::Refund { op, key, .. } => (*op, key.clone()),
            Call::Notify { op } => (*op, None),
        };
        let request = self.received.iter().filter(|(o, _)| *o == op).count() as u32 + 1;
        self.received.push((op, request));
        if let Some(&w) = key.as_ref().and_then(|k| self.by_key.get(k)) {
            return Response::new(200, self.refund(w));
        }
        let writes = matches!(fault, Fault::None | Fault::ErrorAfterCommit | Fault::Slow);
        let mut written = Value::Null;
        if writes {
            let id = format!("re_{}", self.writes.len() + 1);
            self.writes.push(Write {
                op,
                request,
                id,
                key: key.clone(),
            });
            let w = self.writes.len() - 1;
            if let Some(k) = key {
                self.by_key.insert(k, w);
            }
            written = match call {
                Call::Refund { .. } => self.refund(w),
                _ => json!({"ok": true}),
            };
        }
        match fault {
            Fault::None | Fault::Slow => Response::new(200, written),
            Fault::Reject => {
                Response::new(400, json!({"error": {"type": "invalid_request_error"}}))
            }
            Fault::ErrorBeforeCommit | Fault::ErrorAfterCommit => Response {
                should_retry: Some(fault == Fault::ErrorBeforeCommit),
                ..Response::new(500, json!({"error": {"type": "api_error"}}))
            },
        }
    }

    fn refund(&self, w: usize) -> Value {
        let write = &self.writes[w];
        json!({
            "id": write.id, "object": "refund", "status": "succeeded",
            "metadata": {"steward_idempotency_key": write.key},
        })
    }

    /// The refunds of one operation's payment intent, as Stripe lists them.
    fn list(&self, op: usize) -> Response {
        let data: Vec<Value> = (0..self.writes.len())
            .filter(|w| self.writes[*w].op == op && self.writes[*w].key.is_some())
            .map(|w| self.refund(w))
            .collect();
        Response::new(
            200,
            json!({"object": "list", "has_more": false, "data": data}),
        )
    }

    pub(crate) fn writes_of(&self, op: usize) -> usize {
        self.writes.iter().filter(|w| w.op == op).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(
        method: reqwest::Method,
        url: &str,
        key: Option<&str>,
        form: &str,
    ) -> reqwest::Request {
        let client = reqwest::Client::new();
        let mut builder = client.request(method, url).body(form.to_string());
        if let Some(key) = key {
            builder = builder.header("Idempotency-Key", key);
        }
        builder.build().expect("a request")
    }

    #[test]
    fn the_provider_reads_the_requests_the_dispatcher_builds() {
        let refund = request(
            reqwest::Method::POST,
            "https://provider.test/v1/refunds",
            Some("steward-eff_1"),
            "payment_intent=pi_op-3&amount=300&currency=usd",
        );
        assert_eq!(
            Call::of(&refund),
            Call::Refund {
                op: 3,
                key: Some("steward-eff_1".into())
            }
        );
        let lookup = request(
            reqwest::Method::GET,
            "https://provider.test/v1/refunds?payment_intent=pi_op-12&limit=100",
            None,
            "",
        );
        assert_eq!(Call::of(&lookup), Call::ListRefunds { op: 12 });
        let notify = request(
            reqwest::Method::POST,
            "https://provider.test/v1/notify/op-0",
            None,
            "",
        );
        assert_eq!(Call::of(&notify), Call::Notify { op: 0 });
        let other = request(
            reqwest::Method::DELETE,
            "https://provider.test/v1/refunds",
            None,
            "",
        );
        assert!(matches!(Call::of(&other), Call::Other(_)));
    }

    #[test]
    fn a_refund_key_already_written_writes_nothing_and_a_notify_always_writes() {
        let mut provider = Provider::default();
        let refund = Call::Refund {
            op: 0,
            key: Some("k".into()),
        };
        assert_eq!(
            provider.receive(&refund, Fault::ErrorAfterCommit).status,
            500
        );
        let again = provider.receive(&refund, Fault::None);
        assert_eq!((again.status, provider.writes_of(0)), (200, 1));
        assert_eq!(again.body["metadata"]["steward_idempotency_key"], "k");
        let listed = provider.receive(&Call::ListRefunds { op: 0 }, Fault::None);
        assert_eq!(listed.body["data"].as_array().map(Vec::len), Some(1));
        let notify = Call::Notify { op: 1 };
        provider.receive(&notify, Fault::None);
        provider.receive(&notify, Fault::None);
        assert_eq!(provider.writes_of(1), 2);
        assert_eq!(provider.received, vec![(0, 1), (0, 2), (1, 1), (1, 2)]);
        let before = provider.receive(
            &Call::Refund {
                op: 2,
                key: Some("j".into()),
            },
            Fault::ErrorBeforeCommit,
        );
        assert_eq!(
            (before.should_retry, provider.writes_of(2)),
            (Some(true), 0)
        );
    }
}
