//! The key check: `GET /v1/account` answers which account a key belongs to, as Stripe's does,
//! so a connected account's API key can be checked without writing anything.
//!
//! * A test-mode key (`sk_test_...`, `rk_test_...`) is accepted (200 with the account), unless
//!   it was revoked with `POST /_fixture/revoked-keys {"key": "..."}`: then 401, as for any
//!   other key. Checks write nothing and are never counted in `/_fixture/writes`.
//! * `POST /_fixture/key-check-fault {"mode": "error"|"hold"|"none", "ms": N, "count": N}` makes
//!   the next `count` checks answer 500 (`error`) or wait `ms` milliseconds first (`hold`), so
//!   a caller can see a check that could not be made.
//!
//! `POST /_fixture/reset` does not clear these (they are test set-up, not provider state).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::Extension;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::json;

use crate::error::{json_response, ApiError};
use crate::state::Store;

/// What the next key checks do.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum CheckFault {
    #[default]
    None,
    /// Answer 500 `api_error`.
    Error,
    /// Wait `ms` milliseconds, then answer normally.
    Hold,
}

#[derive(Debug, Deserialize)]
struct CheckFaultPlan {
    mode: CheckFault,
    #[serde(default)]
    ms: u64,
    #[serde(default = "one")]
    count: u32,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Default)]
struct Checks {
    revoked: BTreeSet<String>,
    fault: CheckFault,
    ms: u64,
    remaining: u32,
}

/// The key checks' own state, shared by the check and its control endpoints.
#[derive(Debug, Default)]
pub(crate) struct KeyChecks(Mutex<Checks>);

impl KeyChecks {
    fn lock(&self) -> MutexGuard<'_, Checks> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The fault this check gets, consuming one of its count.
    fn next_fault(&self) -> (CheckFault, u64) {
        let mut checks = self.lock();
        if checks.remaining == 0 {
            return (CheckFault::None, 0);
        }
        checks.remaining -= 1;
        (checks.fault, checks.ms)
    }
}

/// `GET /v1/account` (behind the test-key check) and its control endpoints.
pub(crate) fn router() -> Router<Arc<Store>> {
    let checks = Arc::new(KeyChecks::default());
    let check = Router::new()
        .route("/v1/account", get(account))
        .route_layer(axum::middleware::from_fn(crate::refunds::require_test_key));
    check
        .route("/_fixture/revoked-keys", post(revoke))
        .route("/_fixture/key-check-fault", post(set_fault))
        .layer(Extension(checks))
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (_, token) = value.trim().split_once(' ')?;
    Some(token.trim().to_string())
}

async fn account(Extension(checks): Extension<Arc<KeyChecks>>, headers: HeaderMap) -> Response {
    match checks.next_fault() {
        (CheckFault::Error, _) => {
            return ApiError::server_error("The key check failed (injected fault).", true)
                .into_response()
        }
        (CheckFault::Hold, ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        (CheckFault::None, _) => {}
    }
    let key = bearer(&headers).unwrap_or_default();
    if checks.lock().revoked.contains(&key) {
        return ApiError::unauthorized("This API key has been revoked.").into_response();
    }
    json_response(
        StatusCode::OK,
        &json!({"id": "acct_fixture", "object": "account", "livemode": false}),
    )
}

async fn revoke(Extension(checks): Extension<Arc<KeyChecks>>, body: Bytes) -> Response {
    #[derive(Deserialize)]
    struct Revoke {
        key: String,
    }
    match serde_json::from_slice::<Revoke>(&body) {
        Ok(r) => {
            checks.lock().revoked.insert(r.key);
            json_response(StatusCode::OK, &json!({"revoked": true}))
        }
        Err(e) => {
            ApiError::bad_request(format!("expected {{\"key\": \"...\"}} ({e})")).into_response()
        }
    }
}

async fn set_fault(Extension(checks): Extension<Arc<KeyChecks>>, body: Bytes) -> Response {
    match serde_json::from_slice::<CheckFaultPlan>(&body) {
        Ok(plan) => {
            let mut c = checks.lock();
            c.fault = plan.mode;
            c.ms = plan.ms;
            c.remaining = if plan.mode == CheckFault::None {
                0
            } else {
                plan.count
            };
            json_response(StatusCode::OK, &json!({"remaining": c.remaining}))
        }
        Err(e) => ApiError::bad_request(format!(
            "expected {{\"mode\": \"none|error|hold\", \"ms\": N, \"count\": N}} ({e})"
        ))
        .into_response(),
    }
}
