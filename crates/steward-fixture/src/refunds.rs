//! The Stripe-shaped refunds API under `/v1`.
//!
//! * `POST /v1/refunds` creates (commits) a refund, honouring
//!   `Idempotency-Key` the way Stripe does and applying the armed fault.
//! * `GET /v1/refunds/{id}` fetches one.
//! * `GET /v1/refunds?payment_intent=pi_..&limit=N` lists, newest first.
//!
//! Every `/v1` request needs `Authorization: Bearer sk_test_...` (or
//! `rk_test_...`); see [`require_test_key`]. The key is never echoed or logged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use rand::distributions::Alphanumeric;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::conn::ConnKill;
use crate::error::{json_response, ApiError};
use crate::faults::FaultMode;
use crate::params::{self, RefundParams};
use crate::state::{Claim, KeyGuard, SavedResponse, Store};

/// A committed refund, as Stripe shapes it (plus the idempotency key it was
/// created under, which is only shown by the control endpoints).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Refund {
    /// `re_` followed by 24 alphanumerics.
    pub id: String,
    /// Always `"refund"`.
    pub object: String,
    /// Amount in the currency's smallest unit; positive.
    pub amount: i64,
    /// Lowercase ISO code, default `"usd"`.
    pub currency: String,
    /// The payment intent refunded.
    pub payment_intent: String,
    /// `duplicate`, `fraudulent`, `requested_by_customer` or null.
    #[serde(default)]
    pub reason: Option<String>,
    /// Always `"succeeded"`.
    pub status: String,
    /// Caller-supplied metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Unix seconds at commit.
    pub created: i64,
    /// The `Idempotency-Key` of the creating request, if any.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

impl Refund {
    fn new(params: RefundParams, idempotency_key: Option<String>) -> Self {
        let suffix: String = rand::thread_rng()
            .sample_iter(&Alphanumeric)
            .take(24)
            .map(char::from)
            .collect();
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Refund {
            id: format!("re_{suffix}"),
            object: "refund".to_string(),
            amount: params.amount,
            currency: params.currency,
            payment_intent: params.payment_intent,
            reason: params.reason,
            status: "succeeded".to_string(),
            metadata: params.metadata,
            created,
            idempotency_key,
        }
    }

    /// The JSON Stripe would return (without the fixture-only fields).
    pub(crate) fn stripe_json(&self) -> Value {
        let mut value = serde_json::to_value(self).unwrap_or_else(|_| json!({}));
        if let Value::Object(map) = &mut value {
            map.remove("idempotency_key");
        }
        value
    }
}

/// The `/v1` routes, behind the test-key check.
pub(crate) fn router() -> Router<Arc<Store>> {
    Router::new()
        .route("/v1/refunds", post(create).get(list))
        .route("/v1/refunds/{id}", get(retrieve))
        .merge(crate::payment_intents::api_router())
        .route_layer(axum::middleware::from_fn(require_test_key))
}

/// Refuses `/v1` requests without a test-mode secret or restricted key.
pub(crate) async fn require_test_key(req: Request, next: Next) -> Response {
    let auth = req.headers().get(header::AUTHORIZATION);
    let verdict = match auth.map(|v| v.to_str()) {
        None => Err(
            "You did not provide an API key. You need to provide your API key in the \
             Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
        ),
        Some(Ok(value)) if is_test_key(value) => Ok(()),
        Some(_) => Err(
            "Invalid API Key provided. This fixture accepts only test-mode keys \
             (Bearer sk_test_... or rk_test_...).",
        ),
    };
    match verdict {
        Ok(()) => {
            let mut resp = next.run(req).await;
            if let Ok(id) = HeaderValue::from_str(&format!("req_{}", random_alnum(14))) {
                resp.headers_mut().insert("request-id", id);
            }
            resp
        }
        Err(message) => {
            tracing::info!(path = %req.uri().path(), "refused request without a test-mode API key");
            ApiError::unauthorized(message).into_response()
        }
    }
}

/// Bearer auth, or Basic auth with the key as the user name (as Stripe accepts `-u sk_test_...:`).
fn is_test_key(authorization: &str) -> bool {
    let Some((scheme, token)) = authorization.trim().split_once(' ') else {
        return false;
    };
    let token = token.trim();
    let key = if scheme.eq_ignore_ascii_case("bearer") {
        token.to_string()
    } else if scheme.eq_ignore_ascii_case("basic") {
        match base64::engine::general_purpose::STANDARD.decode(token) {
            Ok(bytes) => String::from_utf8_lossy(&bytes)
                .split(':')
                .next()
                .unwrap_or_default()
                .to_string(),
            Err(_) => return false,
        }
    } else {
        return false;
    };
    let rest = key
        .strip_prefix("sk_test_")
        .or_else(|| key.strip_prefix("rk_test_"));
    rest.is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
}

use base64::Engine as _;

fn random_alnum(n: usize) -> String {
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(n)
        .map(char::from)
        .collect()
}

/// `POST /v1/refunds`.
async fn create(
    State(store): State<Arc<Store>>,
    ConnectInfo(conn): ConnectInfo<ConnKill>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = match idempotency_key(&headers) {
        Ok(key) => key,
        Err(e) => return e.into_response(),
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());

    // Decode and validate, remembering a fingerprint of what was asked.
    let (fingerprint, validated) = match params::decode(content_type, &body) {
        Ok(map) => match params::validate(&map) {
            Ok(p) => (p.fingerprint(), Ok(p)),
            Err(e) => (params::raw_fingerprint(&map), Err(e)),
        },
        Err(e) => (format!("body:{}", String::from_utf8_lossy(&body)), Err(e)),
    };

    // Idempotency: replay, refuse, or claim the key for this request.
    let guard = match &key {
        None => None,
        Some(k) => match store.claim(k, &fingerprint) {
            Claim::Replay(saved) => {
                tracing::info!(status = saved.status, "replayed idempotent refund request");
                return replay(saved);
            }
            Claim::Mismatch => return ApiError::idempotency_mismatch(k).into_response(),
            Claim::InUse => return ApiError::idempotency_in_use().into_response(),
            Claim::Claimed(guard) => Some(guard),
        },
    };

    let params = match validated {
        Ok(p) => p,
        // Stripe saves 4xx validation results under the key.
        Err(e) => return save_error(store, key, guard, fingerprint, e).await,
    };

    let fault = store.take_fault();
    let mode = fault.as_ref().map_or(FaultMode::None, |f| f.mode);
    match mode {
        FaultMode::ErrorBeforeCommit => {
            let should_retry = fault.as_ref().is_some_and(|f| f.should_retry_header);
            tracing::info!("fault error_before_commit: nothing committed");
            // Not saved: the guard drops and a resend with the key proceeds.
            return ApiError::server_error(
                "An unexpected error occurred before the refund was created (injected fault).",
                should_retry,
            )
            .into_response();
        }
        FaultMode::Reject => {
            tracing::info!("fault reject: nothing committed");
            let e = ApiError::already_refunded(&params.payment_intent);
            return save_error(store, key, guard, fingerprint, e).await;
        }
        _ => {}
    }

    // Commit the refund (and its saved response) before answering anything.
    let refund = Refund::new(params, key.clone());
    let body = refund.stripe_json();
    let saved = key.map(|k| {
        (
            k,
            SavedResponse {
                fingerprint,
                status: StatusCode::OK.as_u16(),
                body: body.clone(),
            },
        )
    });
    let refund_id = refund.id.clone();
    let (committed, guard) = commit(store, Some(refund), saved, guard).await;
    if let Err(e) = committed {
        return e.into_response();
    }
    tracing::info!(refund = %refund_id, fault = ?mode, "committed refund");

    let resp = match mode {
        FaultMode::HoldAfterCommit => {
            let ms = fault.as_ref().map_or(0, |f| f.ms);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            json_response(StatusCode::OK, &body)
        }
        FaultMode::DropAfterCommit => {
            // The connection's IO now fails, so hyper closes it without
            // writing this (or any) response.
            conn.kill();
            json_response(StatusCode::OK, &body)
        }
        FaultMode::ErrorAfterCommit => ApiError::server_error(
            "An unexpected error occurred while answering the request (injected fault).",
            false,
        )
        .into_response(),
        _ => json_response(StatusCode::OK, &body),
    };
    drop(guard);
    resp
}

/// Reads `Idempotency-Key` (absent or blank: `None`).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .map_err(|_| ApiError::bad_request("Idempotency-Key must be printable ASCII."))?
        .trim();
    if key.is_empty() {
        return Ok(None);
    }
    if key.len() > 255 {
        return Err(ApiError::bad_request(
            "Idempotency-Key is too long: at most 255 characters are allowed.",
        ));
    }
    Ok(Some(key.to_string()))
}

/// Runs [`Store::commit`] on a blocking thread. The key guard travels with
/// it, so the key stays in flight until the commit is done even if the client
/// goes away meanwhile.
async fn commit(
    store: Arc<Store>,
    refund: Option<Refund>,
    saved: Option<(String, SavedResponse)>,
    guard: Option<KeyGuard>,
) -> (Result<(), ApiError>, Option<KeyGuard>) {
    let joined = tokio::task::spawn_blocking(move || {
        let result = store.commit(refund, saved);
        (result, guard)
    })
    .await;
    match joined {
        Ok((Ok(()), guard)) => (Ok(()), guard),
        Ok((Err(e), guard)) => {
            tracing::error!(error = %e, "could not persist the fixture state; nothing committed");
            let err = ApiError::server_error(
                "The refund could not be saved; nothing was committed.",
                true,
            );
            (Err(err), guard)
        }
        Err(e) => {
            tracing::error!(error = %e, "commit task failed");
            (
                Err(ApiError::server_error(
                    "The commit failed unexpectedly.",
                    false,
                )),
                None,
            )
        }
    }
}

/// Answers a definitive 4xx, saving it under the idempotency key if any.
async fn save_error(
    store: Arc<Store>,
    key: Option<String>,
    guard: Option<KeyGuard>,
    fingerprint: String,
    err: ApiError,
) -> Response {
    if let Some(k) = key {
        let saved = SavedResponse {
            fingerprint,
            status: err.status.as_u16(),
            body: err.body(),
        };
        if let (Err(e), _) = commit(store, None, Some((k, saved)), guard).await {
            return e.into_response();
        }
    }
    err.into_response()
}

/// A saved response, replayed with `Idempotent-Replayed: true`.
pub(crate) fn replay(saved: SavedResponse) -> Response {
    let status = StatusCode::from_u16(saved.status).unwrap_or(StatusCode::OK);
    let mut resp = json_response(status, &saved.body);
    resp.headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    resp
}

/// `GET /v1/refunds/{id}`.
async fn retrieve(State(store): State<Arc<Store>>, Path(id): Path<String>) -> Response {
    match store.find(&id) {
        Some(refund) => json_response(StatusCode::OK, &refund.stripe_json()),
        None => ApiError::not_found(Some("id"), format!("No such refund: '{id}'")).into_response(),
    }
}

/// `GET /v1/refunds?payment_intent=..&limit=..`.
async fn list(State(store): State<Arc<Store>>, RawQuery(query): RawQuery) -> Response {
    let pairs: Vec<(String, String)> =
        match serde_html_form::from_str(query.as_deref().unwrap_or("")) {
            Ok(pairs) => pairs,
            Err(_) => return ApiError::bad_request("Invalid query string.").into_response(),
        };
    let mut payment_intent = None;
    let mut limit = 10usize;
    for (name, value) in pairs {
        match name.as_str() {
            "payment_intent" => payment_intent = Some(value),
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=100).contains(&n) => limit = n,
                _ => {
                    return ApiError::invalid_param(
                        "limit",
                        "Invalid limit: must be an integer between 1 and 100.",
                    )
                    .into_response()
                }
            },
            n if n == "expand" || n.starts_with("expand[") => {}
            other => {
                return ApiError::invalid_param(
                    other,
                    format!("Received unknown parameter: {other}"),
                )
                .into_response()
            }
        }
    }
    let (page, has_more) = store.list(payment_intent.as_deref(), limit);
    let data: Vec<Value> = page.iter().map(Refund::stripe_json).collect();
    json_response(
        StatusCode::OK,
        &json!({ "object": "list", "data": data, "has_more": has_more, "url": "/v1/refunds" }),
    )
}
