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
pub(crate) mod metrics;
mod policies;
mod query;
mod reads;
mod recovery;
mod rejection;
mod secrets;
pub(crate) mod views;

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The whole HTTP surface, without `/metrics` (see [`router`]).
pub fn app(state: AppState) -> Router {
    router(state, None)
}

/// The whole HTTP surface; `/metrics` is served only to holders of `metrics_token`
/// (`metrics.rs`).
pub(crate) fn router(state: AppState, metrics_token: Option<metrics::MetricsToken>) -> Router {
    // Every endpoint checks its query string before anything else runs, authentication
    // included, so every endpoint refuses the same mistakes in the same order: the ones whose
    // handlers take `Query<T>` against `T`, the others against no parameters at all, all
    // through one parser (`query.rs`).
    let none = || middleware::from_fn(only_query::<NoParameters>);
    let unpaged = || middleware::from_fn(only_query::<UnpagedList>);
    let v2 = Router::new()
        .route(
            "/auth/identity",
            get(identity::identity).route_layer(none()),
        )
        .route(
            "/environment",
            get(identity::environment).route_layer(none()),
        )
        .route(
            "/environment/halt",
            post(environment::halt).route_layer(none()),
        )
        .route(
            "/environment/resume",
            post(environment::resume).route_layer(none()),
        )
        .route(
            "/approval-policies",
            post(policies::create)
                .route_layer(none())
                .get(policies::list)
                .route_layer(middleware::from_fn(only_query::<policies::ListQuery>)),
        )
        .route(
            "/approval-policies/evaluate",
            post(policies::evaluate).route_layer(none()),
        )
        .route(
            "/approval-policies/{id}",
            get(policies::get)
                .patch(policies::update)
                .delete(policies::delete)
                .route_layer(none()),
        )
        .route(
            "/approval-policies/{id}/versions",
            get(policies::versions)
                .route_layer(middleware::from_fn(only_query::<policies::VersionsQuery>)),
        )
        .route(
            "/approval-policies/{id}/versions/{version}",
            get(policies::version).route_layer(none()),
        )
        .route(
            "/impact-limits",
            post(limits::create)
                .route_layer(none())
                .get(limits::list)
                .route_layer(middleware::from_fn(only_query::<limits::ListQuery>)),
        )
        .route(
            "/impact-limits/{id}",
            get(limits::get)
                .patch(limits::update)
                .delete(limits::archive)
                .route_layer(none()),
        )
        .route(
            "/approvals",
            post(approvals::request)
                .route_layer(none())
                .get(approvals::list)
                .route_layer(middleware::from_fn(only_query::<approvals::ListQuery>)),
        )
        .route(
            "/approvals/{id}",
            get(approvals::get)
                .route_layer(middleware::from_fn(only_query::<approvals::WaitQuery>)),
        )
        .route(
            "/approvals/{id}/approve",
            post(approvals::approve).route_layer(none()),
        )
        .route(
            "/approvals/{id}/deny",
            post(approvals::deny).route_layer(none()),
        )
        .route("/secrets", get(secrets::list).route_layer(unpaged()))
        .route(
            "/secrets/{name}",
            get(secrets::get)
                .put(secrets::put)
                .delete(secrets::delete)
                .route_layer(none()),
        )
        .route(
            "/actions",
            post(actions::create)
                .route_layer(none())
                .get(actions::list)
                .route_layer(unpaged()),
        )
        .route(
            "/actions/invocations",
            get(reads::list_invocations)
                .route_layer(middleware::from_fn(only_query::<reads::InvocationQuery>)),
        )
        .route(
            "/actions/invocations/{id}",
            get(reads::invocation).route_layer(none()),
        )
        .route(
            "/actions/effects",
            get(reads::list_effects)
                .route_layer(middleware::from_fn(only_query::<reads::EffectQuery>)),
        )
        .route(
            "/actions/effects/{id}",
            get(reads::effect).route_layer(none()),
        )
        .route(
            "/actions/effects/{id}/reconcile",
            post(recovery::reconcile).route_layer(none()),
        )
        .route(
            "/actions/effects/{id}/resolve",
            post(recovery::resolve_effect).route_layer(none()),
        )
        .route(
            "/actions/effects/{id}/notes",
            post(recovery::note).route_layer(none()),
        )
        .route(
            "/actions/effects/{id}/replay",
            post(recovery::replay).route_layer(none()),
        )
        .route(
            "/actions/invocations/{id}/resolve",
            post(recovery::resolve_invocation).route_layer(none()),
        )
        .route(
            "/actions/{reference}",
            get(actions::get)
                .patch(actions::update)
                .delete(actions::delete)
                .route_layer(none()),
        )
        .route(
            "/actions/{reference}/versions",
            get(actions::versions).route_layer(none()),
        )
        .route(
            "/actions/{reference}/invoke",
            post(invoke::invoke).route_layer(none()),
        )
        .route(
            "/actions/{reference}/invocations",
            get(reads::invocations_for_action)
                .route_layer(middleware::from_fn(only_query::<reads::InvocationQuery>)),
        );
    let mut top = Router::new().route(
        "/healthz",
        get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
    );
    if let Some(token) = metrics_token {
        top = top.route("/metrics", scrape(Some(token)));
    }
    edge(top.nest("/api/v2", v2)).with_state(state)
}

/// The separate metrics listener's surface: `/metrics` alone, behind `metrics_token` if given.
pub(crate) fn metrics_router(
    state: AppState,
    metrics_token: Option<metrics::MetricsToken>,
) -> Router {
    edge(Router::new().route("/metrics", scrape(metrics_token))).with_state(state)
}

fn scrape(
    token: Option<metrics::MetricsToken>,
) -> axum::routing::MethodRouter<AppState, std::convert::Infallible> {
    get(move |State(state): State<AppState>, headers: HeaderMap| {
        metrics::scrape(state, headers, token.clone())
    })
}

/// What every listener's router gets: the 404 envelope for unknown paths, the one body limit,
/// the envelope for every error (`rejection.rs`), and the request id.
fn edge(routes: Router<AppState>) -> Router<AppState> {
    routes
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such endpoint")
        })
        .layer(DefaultBodyLimit::max(body::JSON_BODY_BYTES_MAX))
        .layer(middleware::from_fn(rejection::envelope))
        .layer(middleware::from_fn(request_context))
}

/// No query parameters: the endpoints that take none refuse any, naming it.
#[derive(Debug, serde::Deserialize)]
struct NoParameters {}

/// The lists that are not paged yet (`GET /actions`, `GET /secrets`) take the paging
/// parameters the SDK sends (it asks for `/actions?limit=100`), check them, and answer with
/// every item: at most one page's worth in any real environment.
#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)] // Parsed to be checked, not used.
struct UnpagedList {
    limit: Option<u32>,
    offset: Option<u32>,
}

/// Refuses a query string `T` does not describe, before the handler runs (`query.rs`).
async fn only_query<T: serde::de::DeserializeOwned>(request: Request, next: Next) -> Response {
    match query::parse::<T>(request.uri().query().unwrap_or_default()) {
        Ok(_) => next.run(request).await,
        Err(e) => e.into_response(),
    }
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
