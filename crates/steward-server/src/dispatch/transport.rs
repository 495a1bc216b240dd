//! The transport seam: how a built request reaches a provider and what comes back.
//!
//! The dispatcher (write path step 4), the adapters' lookups and the `verify` read-backs send
//! every provider call through [`Transport`]. A server process uses [`HttpTransport`], the
//! guarded HTTP client; the simulator (`steward-sim`) passes one that carries the request over a
//! simulated network to a simulated provider, so the production dispatcher and reconciler run
//! unchanged under simulated time and faults.
//!
//! The seam takes the request as HTTP will carry it (`reqwest::Request`, built by
//! `request::build` with its deadline) and gives back the answer read under
//! [`PROVIDER_ANSWER_BYTES_MAX`], or a [`TransportFailure`] that says whether the request can
//! have left.

use super::answer::{read_capped, PROVIDER_ANSWER_BYTES_MAX};
use reqwest::header::HeaderMap;
use steward_core::AttemptReport;

/// One provider call's answer: its status and headers, and its body (or the failure that cut
/// the body short once the status had arrived).
#[derive(Debug)]
pub struct Exchange {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Result<Vec<u8>, TransportFailure>,
}

/// Where a call failed, as far as whether the request left is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The client refused to build or start the request: it never opened a connection.
    NotBuilt,
    /// No connection was made: nothing was sent.
    NotConnected,
    /// The deadline passed: the request may or may not have been handled.
    TimedOut,
    /// The connection broke after the request may have left.
    BrokenAfterSend,
}

/// A call that got no (whole) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportFailure {
    pub kind: FailureKind,
    /// The failure with its causes, without the URL (a template may put a secret in its query).
    pub reason: String,
    /// The failure alone, without the URL: what a lookup reports.
    pub summary: String,
}

impl TransportFailure {
    pub fn new(kind: FailureKind, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self {
            kind,
            summary: reason.clone(),
            reason,
        }
    }

    /// What a transport error says about whether the request left.
    pub fn of(err: reqwest::Error) -> Self {
        // The client refused to build or start the request (a URL or header it cannot carry):
        // it never opened a connection for it.
        let kind = if err.is_builder() {
            FailureKind::NotBuilt
        } else if err.is_connect() {
            FailureKind::NotConnected
        } else if err.is_timeout() {
            FailureKind::TimedOut
        } else {
            FailureKind::BrokenAfterSend
        };
        let err = err.without_url();
        Self {
            kind,
            summary: err.to_string(),
            reason: chain(&err),
        }
    }

    /// The attempt's report, for `steward_core::classify`.
    pub fn report(&self) -> AttemptReport {
        let reason = self.reason.clone();
        match self.kind {
            FailureKind::NotBuilt => AttemptReport::NotBuilt { reason },
            FailureKind::NotConnected => AttemptReport::NotConnected { reason },
            FailureKind::TimedOut => AttemptReport::TimedOut,
            FailureKind::BrokenAfterSend => AttemptReport::BrokenAfterSend { reason },
        }
    }
}

/// A transport error's chain, without the URL (a template may put a secret in its query).
pub(crate) fn describe(err: reqwest::Error) -> String {
    chain(&err.without_url())
}

fn chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Carries one provider call. Implementations honour the request's timeout
/// (`reqwest::Request::timeout`): past it, the call ends [`FailureKind::TimedOut`].
#[async_trait::async_trait]
pub trait Transport: Send + Sync + 'static {
    async fn execute(&self, request: reqwest::Request) -> Result<Exchange, TransportFailure>;
}

/// The real transport: the server's guarded HTTP client (`outbound::http_client`).
pub struct HttpTransport {
    client: reqwest::Client,
}

impl HttpTransport {
    pub fn new(client: reqwest::Client) -> Self {
        Self { client }
    }
}

#[async_trait::async_trait]
impl Transport for HttpTransport {
    async fn execute(&self, request: reqwest::Request) -> Result<Exchange, TransportFailure> {
        let response = self
            .client
            .execute(request)
            .await
            .map_err(TransportFailure::of)?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = read_capped(response, PROVIDER_ANSWER_BYTES_MAX)
            .await
            .map(|b| b.bytes)
            .map_err(TransportFailure::of);
        Ok(Exchange {
            status,
            headers,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::{classify, EffectEvent};

    #[tokio::test]
    async fn a_request_the_client_cannot_build_is_classified_never_sent() {
        let client = reqwest::Client::new();
        let err = client
            .post("http://127.0.0.1:9/x")
            .header("x-note", "a\r\nX-Evil: 1")
            .send()
            .await
            .expect_err("a header value with CR LF cannot be sent");
        let report = TransportFailure::of(err).report();
        assert!(
            matches!(report, AttemptReport::NotBuilt { .. }),
            "{report:?}"
        );
        assert_eq!(classify(&report).event, EffectEvent::NotSent);
    }
}
