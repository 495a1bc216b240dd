//! Broken builds for the fault suite's own tests: `STEWARD_FAULTS_SELFTEST=<break>` makes a
//! `steward serve` process that breaks one promise on purpose, so `steward faults` can show that
//! its checks name the violation. Unset (always, outside those tests), nothing changes: the
//! variable is read once, and the server warns loudly at start when it is set. Like
//! `STEWARD_CRASH_AT` (`crash.rs`) and `AppState::defect` (the simulator's broken builds), it is
//! a runtime switch rather than a cargo feature: one build, whose tests all run
//! (docs/DECISIONS.md, "Broken builds of a real process are a runtime switch").
//!
//! * `duplicate_send`: every provider write is sent twice, the second under another
//!   `Idempotency-Key` (a dispatcher that lost its dedupe): two provider writes for one key.
//! * `ack_without_commit`: one invoke in [`ONE_IN`] is answered `200 succeeded` with an
//!   invocation id that was never committed (an ambiguous commit taken for a commit): an
//!   acknowledged operation the store does not hold.
//! * `hang_dispatch`: one provider write in [`ONE_IN`] never returns (its deadline ignored),
//!   so its attempt stays `dispatching` for as long as the process lives.

use crate::dispatch::transport::{Exchange, Transport, TransportFailure};
use axum::response::{IntoResponse, Response};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The variable that arms a break.
pub(crate) const SELFTEST_ENV: &str = "STEWARD_FAULTS_SELFTEST";
/// The breaks that act on some requests act on one in this many.
pub(crate) const ONE_IN: u64 = 4;

/// One promise broken on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Break {
    DuplicateSend,
    AckWithoutCommit,
    HangDispatch,
}

fn armed() -> Option<Break> {
    static ARMED: OnceLock<Option<Break>> = OnceLock::new();
    *ARMED.get_or_init(|| {
        let armed = match std::env::var(SELFTEST_ENV).ok()?.trim() {
            "duplicate_send" => Break::DuplicateSend,
            "ack_without_commit" => Break::AckWithoutCommit,
            "hang_dispatch" => Break::HangDispatch,
            other => {
                tracing::error!(value = other, "unknown {SELFTEST_ENV}; nothing broken");
                return None;
            }
        };
        tracing::warn!(
            ?armed,
            "a selftest break is armed: this server breaks a promise"
        );
        Some(armed)
    })
}

/// Whether this is the one in [`ONE_IN`] that `counter` picks.
fn picked(counter: &AtomicU64) -> bool {
    counter.fetch_add(1, Ordering::Relaxed) % ONE_IN == ONE_IN - 1
}

/// The server's transport, broken as armed (unchanged when nothing is).
pub(crate) fn transport(inner: Arc<dyn Transport>) -> Arc<dyn Transport> {
    match armed() {
        Some(b @ (Break::DuplicateSend | Break::HangDispatch)) => Arc::new(Broken {
            inner,
            armed: b,
            writes: AtomicU64::new(0),
        }),
        _ => inner,
    }
}

struct Broken {
    inner: Arc<dyn Transport>,
    armed: Break,
    writes: AtomicU64,
}

#[async_trait::async_trait]
impl Transport for Broken {
    async fn execute(&self, request: reqwest::Request) -> Result<Exchange, TransportFailure> {
        if request.method() != reqwest::Method::POST {
            return self.inner.execute(request).await;
        }
        match self.armed {
            Break::HangDispatch if picked(&self.writes) => std::future::pending().await,
            Break::DuplicateSend => {
                if let Some(mut again) = request.try_clone() {
                    if let Some(key) = again.headers().get("idempotency-key").cloned() {
                        let other = format!("{}-again", key.to_str().unwrap_or("key"));
                        if let Ok(value) = other.parse() {
                            again.headers_mut().insert("idempotency-key", value);
                        }
                    }
                    let _ = self.inner.execute(again).await;
                }
                self.inner.execute(request).await
            }
            _ => self.inner.execute(request).await,
        }
    }
}

/// For `ack_without_commit`: the answer to give instead of invoking, one time in [`ONE_IN`].
pub(crate) fn acknowledgement_without_commit() -> Option<Response> {
    static INVOKES: AtomicU64 = AtomicU64::new(0);
    if armed() != Some(Break::AckWithoutCommit) || !picked(&INVOKES) {
        return None;
    }
    let id = format!("inv_{}", crate::clock::unique().to_ascii_lowercase());
    let body = serde_json::json!({
        "success": true,
        "data": {"id": id, "status": "succeeded", "pendingApproval": false},
    });
    Some((axum::http::StatusCode::OK, axum::Json(body)).into_response())
}
