//! The HTTP API under `/api/v2`, built by [`app`] so tests can drive it without a socket.

mod actions;
mod approvals;
mod body;
mod environment;
mod gate;
mod idempotent;
mod identity;
mod invoke;
mod limits;
mod policies;
mod reads;
mod recovery;
mod secrets;
pub(crate) mod views;

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The whole HTTP surface.
pub fn app(state: AppState) -> Router {
    let v2 = Router::new()
        .route("/auth/identity", get(identity::identity))
        .route("/environment", get(identity::environment))
        .route("/environment/halt", post(environment::halt))
        .route("/environment/resume", post(environment::resume))
        .route(
            "/approval-policies",
            get(policies::list).post(policies::create),
        )
        .route("/approval-policies/evaluate", post(policies::evaluate))
        .route(
            "/approval-policies/{id}",
            get(policies::get)
                .patch(policies::update)
                .delete(policies::delete),
        )
        .route("/approval-policies/{id}/versions", get(policies::versions))
        .route(
            "/approval-policies/{id}/versions/{version}",
            get(policies::version),
        )
        .route("/impact-limits", get(limits::list).post(limits::create))
        .route(
            "/impact-limits/{id}",
            get(limits::get)
                .patch(limits::update)
                .delete(limits::archive),
        )
        .route("/approvals", get(approvals::list).post(approvals::request))
        .route("/approvals/{id}", get(approvals::get))
        .route("/approvals/{id}/approve", post(approvals::approve))
        .route("/approvals/{id}/deny", post(approvals::deny))
        .route("/secrets", get(secrets::list))
        .route(
            "/secrets/{name}",
            get(secrets::get).put(secrets::put).delete(secrets::delete),
        )
        .route("/actions", get(actions::list).post(actions::create))
        .route("/actions/invocations", get(reads::list_invocations))
        .route("/actions/invocations/{id}", get(reads::invocation))
        .route("/actions/effects", get(reads::list_effects))
        .route("/actions/effects/{id}", get(reads::effect))
        .route("/actions/effects/{id}/reconcile", post(recovery::reconcile))
        .route(
            "/actions/effects/{id}/resolve",
            post(recovery::resolve_effect),
        )
        .route("/actions/effects/{id}/notes", post(recovery::note))
        .route("/actions/effects/{id}/replay", post(recovery::replay))
        .route(
            "/actions/invocations/{id}/resolve",
            post(recovery::resolve_invocation),
        )
        .route(
            "/actions/{reference}",
            get(actions::get)
                .patch(actions::update)
                .delete(actions::delete),
        )
        .route("/actions/{reference}/versions", get(actions::versions))
        .route("/actions/{reference}/invoke", post(invoke::invoke))
        .route(
            "/actions/{reference}/invocations",
            get(reads::invocations_for_action),
        );
    Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/metrics", get(metrics))
        .nest("/api/v2", v2)
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such endpoint")
        })
        .layer(middleware::from_fn(request_context))
        .with_state(state)
}

/// Gives every response an `x-request-id` (the caller's if it sent a sane one) and logs the
/// request line. Headers and bodies are never logged: they carry keys and secrets.
async fn request_context(request: Request, next: Next) -> Response {
    let incoming = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            v.len() <= 128
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_string);
    let id =
        incoming.unwrap_or_else(|| format!("req_{}", crate::clock::unique().to_ascii_lowercase()));
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let started = std::time::Instant::now();
    let mut response = next.run(request).await.into_response();
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    tracing::info!(
        request_id = %id,
        %method,
        %path,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request"
    );
    response
}

async fn metrics(axum::extract::State(state): axum::extract::State<AppState>) -> Response {
    let unknown = state.store.count_unknown().await.unwrap_or(0);
    let gauges = [(
        "steward_unknown_effects",
        "effects whose outcome is unknown, in every environment",
        unknown,
    )];
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.metrics.render(&gauges),
    )
        .into_response()
}
