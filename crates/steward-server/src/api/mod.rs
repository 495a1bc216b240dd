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
mod openapi;
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
use axum::routing::get;
use axum::Router;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Every `/api/v2` route. Each is registered through `routes!`, which adds the handler to the
/// router and its `#[utoipa::path]` operation to the OpenAPI document together; register no route
/// here any other way (`openapi/drift.rs` checks).
fn v2_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(openapi::serve))
        .routes(routes!(identity::identity))
        .routes(routes!(identity::environment))
        .routes(routes!(environment::halt))
        .routes(routes!(environment::resume))
        .routes(routes!(policies::list, policies::create))
        .routes(routes!(policies::evaluate))
        .routes(routes!(policies::get, policies::update, policies::delete))
        .routes(routes!(policies::versions))
        .routes(routes!(policies::version))
        .routes(routes!(limits::list, limits::create))
        .routes(routes!(limits::get, limits::update, limits::archive))
        .routes(routes!(approvals::list, approvals::request))
        .routes(routes!(approvals::get))
        .routes(routes!(approvals::approve))
        .routes(routes!(approvals::deny))
        .routes(routes!(secrets::list))
        .routes(routes!(secrets::get, secrets::put, secrets::delete))
        .routes(routes!(actions::list, actions::create))
        .routes(routes!(reads::list_invocations))
        .routes(routes!(reads::invocation))
        .routes(routes!(reads::list_effects))
        .routes(routes!(reads::effect))
        .routes(routes!(recovery::reconcile))
        .routes(routes!(recovery::resolve_effect))
        .routes(routes!(recovery::note))
        .routes(routes!(recovery::replay))
        .routes(routes!(recovery::resolve_invocation))
        .routes(routes!(actions::get, actions::update, actions::delete))
        .routes(routes!(actions::versions))
        .routes(routes!(invoke::invoke))
        .routes(routes!(reads::invocations_for_action))
}

/// The `/api/v2` router and its OpenAPI document, built from the same registrations.
pub(crate) fn surface() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(openapi::base())
        .nest("/api/v2", v2_routes())
        .split_for_parts()
}

/// The whole HTTP surface.
pub fn app(state: AppState) -> Router {
    // Built once: describing 40-odd operations is work tests that build an app per request
    // should not repeat.
    static V2: std::sync::OnceLock<Router<AppState>> = std::sync::OnceLock::new();
    let v2 = V2.get_or_init(|| surface().0).clone();
    Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/metrics", get(metrics))
        .merge(v2)
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
