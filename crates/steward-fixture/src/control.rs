//! Control endpoints under `/_fixture` (no authentication; loopback only).
//!
//! * `POST /_fixture/faults` arms a [`FaultPlan`](crate::FaultPlan) (JSON);
//!   `GET /_fixture/faults` shows the armed plan and the writes it has left.
//! * `GET /_fixture/writes` → `{"total": N, "writes": [refund, ...], "generic":
//!   [write, ...]}`, in commit order; `total` counts both: the number the tests care about.
//! * `POST /_fixture/reset` clears refunds, idempotency keys, faults and the
//!   state file.
//! * `GET /_fixture/healthz` → 200.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;

use crate::error::{json_response, ApiError};
use crate::faults::FaultPlan;
use crate::state::Store;

/// The `/_fixture` routes.
pub(crate) fn router() -> Router<Arc<Store>> {
    Router::new()
        .route("/_fixture/faults", post(set_faults).get(faults))
        .route("/_fixture/writes", get(writes))
        .route("/_fixture/reset", post(reset))
        .route("/_fixture/healthz", get(healthz))
}

async fn set_faults(State(store): State<Arc<Store>>, body: Bytes) -> Response {
    let plan: FaultPlan = match serde_json::from_slice(&body) {
        Ok(plan) => plan,
        Err(e) => {
            return ApiError::bad_request(format!(
                "Invalid fault plan ({e}); expected {{\"mode\": \"none|hold_after_commit|\
                 drop_after_commit|error_after_commit|error_before_commit|reject\", \
                 \"ms\": N, \"count\": N, \"should_retry_header\": bool}}."
            ))
            .into_response()
        }
    };
    tracing::info!(mode = ?plan.mode, count = plan.count, ms = plan.ms, "armed fault");
    store.set_faults(plan);
    faults(State(store)).await
}

async fn faults(State(store): State<Arc<Store>>) -> Response {
    let (plan, remaining) = store.fault_status();
    json_response(
        StatusCode::OK,
        &json!({
            "mode": plan.mode,
            "ms": plan.ms,
            "should_retry_header": plan.should_retry_header,
            "remaining": remaining,
        }),
    )
}

async fn writes(State(store): State<Arc<Store>>) -> Response {
    let refunds = store.refunds();
    let generic = store.generic_writes();
    json_response(
        StatusCode::OK,
        &json!({ "total": refunds.len() + generic.len(), "writes": refunds, "generic": generic }),
    )
}

async fn reset(State(store): State<Arc<Store>>) -> Response {
    let result = tokio::task::spawn_blocking(move || store.reset()).await;
    match result {
        Ok(Ok(())) => {
            tracing::info!("fixture reset");
            json_response(StatusCode::OK, &json!({ "reset": true }))
        }
        Ok(Err(e)) => ApiError::server_error(format!("Reset failed: {e}"), false).into_response(),
        Err(e) => ApiError::server_error(format!("Reset failed: {e}"), false).into_response(),
    }
}

async fn healthz() -> Response {
    json_response(StatusCode::OK, &json!({ "ok": true }))
}
