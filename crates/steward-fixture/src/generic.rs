//! A generic idempotent provider under `/generic`, for adapters that know no provider's API
//! (Steward's `http.idempotent`): any JSON write, deduplicated by a request header, and a
//! lookup by that key.
//!
//! * `POST /generic/writes` with a JSON object body and [`IDEMPOTENCY_HEADER`] commits one
//!   write per key and answers `200 {"id": "wr_...", "object": "write", "key", "status":
//!   "succeeded", "body", "created"}`. A later request with the same key and the same body gets
//!   the saved answer (`Idempotent-Replayed: true`) and writes nothing; another body under the
//!   key is `422 idempotency_mismatch`; a request while the key is in flight is `409
//!   idempotency_in_use`. A request without the header is `400`: this provider deduplicates
//!   everything.
//! * `GET /generic/writes/{key}` answers the write committed under `key`, or `404`.
//!
//! Both take the same test-mode bearer key as `/v1`. The armed [`FaultPlan`](crate::FaultPlan)
//! applies to generic writes exactly as to refunds, and they count in
//! [`FixtureHandle::write_count`](crate::FixtureHandle::write_count).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use rand::distributions::Alphanumeric;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::conn::ConnKill;
use crate::error::json_response;
use crate::faults::FaultMode;
use crate::state::{Claim, KeyGuard, SavedResponse, Store};

/// The header that carries the idempotency key. Deliberately not `Idempotency-Key`, so that a
/// client must send the header it was configured with.
pub const IDEMPOTENCY_HEADER: &str = "x-idempotency-key";
/// The longest key accepted, in bytes.
const KEY_LEN_MAX: usize = 255;
/// Saved answers of this endpoint live beside Stripe's, under this prefix.
const KEY_NAMESPACE: &str = "generic:";

/// One committed generic write.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GenericWrite {
    /// `wr_` followed by 24 alphanumerics.
    pub id: String,
    /// Always `"write"`.
    pub object: String,
    /// The idempotency key it was written under.
    pub key: String,
    /// Always `"succeeded"`.
    pub status: String,
    /// The request body, as sent.
    pub body: Value,
    /// Unix seconds at commit.
    pub created: i64,
}

pub(crate) fn router() -> Router<Arc<Store>> {
    Router::new()
        .route("/generic/writes", post(create))
        .route("/generic/writes/{key}", get(look_up))
        .route_layer(axum::middleware::from_fn(crate::refunds::require_test_key))
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    json_response(
        status,
        &json!({"error": {"code": code, "message": message}}),
    )
}

/// `POST /generic/writes`.
async fn create(
    State(store): State<Arc<Store>>,
    ConnectInfo(conn): ConnectInfo<ConnKill>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = headers
        .get(IDEMPOTENCY_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= KEY_LEN_MAX);
    let Some(key) = key.map(str::to_string) else {
        return error(
            StatusCode::BAD_REQUEST,
            "idempotency_key_required",
            "X-Idempotency-Key is required (1 to 255 printable characters)",
        );
    };
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            "the body must be a JSON object",
        );
    };
    let written = Value::Object(fields);
    let fingerprint = written.to_string();
    let saved_key = format!("{KEY_NAMESPACE}{key}");
    let guard = match store.claim(&saved_key, &fingerprint) {
        Claim::Replay(saved) => return crate::refunds::replay(saved),
        Claim::Mismatch => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_mismatch",
                "this key was used with another body",
            )
        }
        Claim::InUse => {
            return error(
                StatusCode::CONFLICT,
                "idempotency_in_use",
                "a request with this key is in flight",
            )
        }
        Claim::Claimed(guard) => guard,
    };

    let fault = store.take_fault();
    let mode = fault.as_ref().map_or(FaultMode::None, |f| f.mode);
    match mode {
        FaultMode::ErrorBeforeCommit => {
            // Not saved: the guard drops and a resend with the key proceeds.
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "an error occurred before the write was committed (injected fault)",
            );
        }
        FaultMode::Reject => {
            let answer = json!({"error": {"code": "rejected", "message": "the provider refused this write (injected fault)"}});
            let saved = SavedResponse {
                fingerprint,
                status: StatusCode::UNPROCESSABLE_ENTITY.as_u16(),
                body: answer.clone(),
            };
            if let Err(response) = commit(store, None, saved_key, saved, guard).await {
                return response;
            }
            return json_response(StatusCode::UNPROCESSABLE_ENTITY, &answer);
        }
        _ => {}
    }

    let write = GenericWrite {
        id: format!("wr_{}", random_alnum(24)),
        object: "write".into(),
        key,
        status: "succeeded".into(),
        body: written,
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0),
    };
    let answer = serde_json::to_value(&write).unwrap_or_else(|_| json!({}));
    let saved = SavedResponse {
        fingerprint,
        status: StatusCode::OK.as_u16(),
        body: answer.clone(),
    };
    let id = write.id.clone();
    let guard = match commit(store, Some(write), saved_key, saved, guard).await {
        Ok(guard) => guard,
        Err(response) => return response,
    };
    tracing::info!(write = %id, fault = ?mode, "committed generic write");
    let response = match mode {
        FaultMode::HoldAfterCommit => {
            let ms = fault.as_ref().map_or(0, |f| f.ms);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            json_response(StatusCode::OK, &answer)
        }
        FaultMode::DropAfterCommit => {
            // The connection's IO now fails: no response reaches the client.
            conn.kill();
            json_response(StatusCode::OK, &answer)
        }
        FaultMode::ErrorAfterCommit => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "an error occurred while answering (injected fault)",
        ),
        _ => json_response(StatusCode::OK, &answer),
    };
    drop(guard);
    response
}

/// Commits on a blocking thread, the key guard travelling with it; `Err` is the answer to give.
async fn commit(
    store: Arc<Store>,
    write: Option<GenericWrite>,
    key: String,
    saved: SavedResponse,
    guard: KeyGuard,
) -> Result<KeyGuard, Response> {
    let joined =
        tokio::task::spawn_blocking(move || (store.commit_generic(write, (key, saved)), guard))
            .await;
    match joined {
        Ok((Ok(()), guard)) => Ok(guard),
        Ok((Err(e), _)) => {
            tracing::error!(error = %e, "could not persist the fixture state; nothing committed");
            Err(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "the write could not be saved; nothing was committed",
            ))
        }
        Err(e) => {
            tracing::error!(error = %e, "commit task failed");
            Err(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "the commit failed unexpectedly",
            ))
        }
    }
}

/// `GET /generic/writes/{key}`.
async fn look_up(State(store): State<Arc<Store>>, Path(key): Path<String>) -> Response {
    match store.generic_write(&key) {
        Some(write) => json_response(
            StatusCode::OK,
            &serde_json::to_value(&write).unwrap_or_else(|_| json!({})),
        ),
        None => error(
            StatusCode::NOT_FOUND,
            "not_found",
            "no write was committed under this key",
        ),
    }
}

fn random_alnum(n: usize) -> String {
    rand::thread_rng()
        .sample_iter(&Alphanumeric)
        .take(n)
        .map(char::from)
        .collect()
}
