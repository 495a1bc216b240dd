//! The HTTP API under `/api/v2` ([`surface`]); `router.rs` puts it together with `/mcp` and the
//! console.

pub(crate) mod actions;
pub(crate) mod approvals;
mod billing;
mod body;
pub(crate) mod bounded;
pub(crate) mod budgets;
mod channels;
mod connections;
pub(crate) mod environment;
mod holds;
mod idempotent;
mod identity;
pub(crate) mod import;
pub(crate) mod invoke;
pub(crate) mod key_names;
pub(crate) mod limits;
mod links;
pub(crate) mod metrics;
mod openapi;
#[cfg(test)]
mod openapi_tests;
pub(crate) mod policies;
mod policy_files;
mod previews;
pub(crate) mod query;
pub(crate) mod reads;
pub(crate) mod receipts;
pub(crate) mod recovery;
mod rejection;
pub(crate) mod runs;
mod secrets;
pub(crate) mod stream;
pub(crate) mod views;
mod warnings;
pub(crate) mod webhooks;

use crate::state::AppState;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) use body::JSON_BODY_BYTES_MAX;
pub(crate) use rejection::no_such_route;

pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// A documented route: its handlers, their OpenAPI operations and the schemas they name.
type Documented = utoipa_axum::router::UtoipaMethodRouter<AppState>;

/// Checks the route's query string against `T` before anything else runs, authentication
/// included, so every endpoint refuses the same mistakes in the same order: the ones whose
/// handlers take `Query<T>` against `T`, the others against no parameters at all, all through
/// one parser (`query.rs`).
fn query<T: serde::de::DeserializeOwned + Send + 'static>(routes: Documented) -> Documented {
    let (schemas, paths, method_router) = routes;
    (
        schemas,
        paths,
        method_router.route_layer(middleware::from_fn(only_query::<T>)),
    )
}

/// A route that takes no query parameters.
fn plain(routes: Documented) -> Documented {
    query::<NoParameters>(routes)
}

/// Every `/api/v2` route. Each is registered through `routes!`, which adds the handler to the
/// router and its `#[utoipa::path]` operation to the OpenAPI document together; register no route
/// here any other way (`openapi_tests/drift.rs` checks). Handlers with different query parameters on
/// one path are registered apart, each with its own check.
fn v2_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(plain(routes!(openapi::serve)))
        .routes(plain(routes!(identity::identity)))
        .routes(plain(routes!(identity::environment, environment::update)))
        .routes(plain(routes!(environment::halt)))
        .routes(plain(routes!(environment::resume)))
        .routes(plain(routes!(holds::list, holds::create)))
        .routes(plain(routes!(holds::release)))
        .routes(query::<policies::ListQuery>(routes!(policies::list)))
        .routes(plain(routes!(policies::create)))
        .routes(plain(routes!(policies::evaluate)))
        .routes(plain(routes!(policy_files::plan)))
        .routes(plain(routes!(policy_files::apply)))
        .routes(plain(routes!(policy_files::test)))
        .routes(plain(routes!(
            policies::get,
            policies::update,
            policies::delete
        )))
        .routes(query::<policies::VersionsQuery>(routes!(
            policies::versions
        )))
        .routes(plain(routes!(policies::version)))
        .routes(query::<limits::ListQuery>(routes!(limits::list)))
        .routes(plain(routes!(limits::create)))
        .routes(plain(routes!(limits::get, limits::update, limits::archive)))
        .routes(plain(routes!(connections::integrations)))
        .routes(plain(routes!(connections::list)))
        .routes(plain(routes!(connections::connect_with_api_key)))
        .routes(plain(routes!(connections::check)))
        .routes(plain(routes!(connections::reconnect)))
        .routes(plain(routes!(connections::create_session)))
        .routes(plain(routes!(connections::complete)))
        .routes(query::<connections::CallbackParams>(routes!(
            connections::callback
        )))
        .routes(plain(routes!(billing::current_usage)))
        .routes(plain(routes!(billing::quota)))
        .routes(plain(routes!(billing::workspace_budget)))
        .routes(plain(routes!(billing::current_plan)))
        .routes(plain(routes!(billing::plans)))
        .routes(query::<billing::HistoryQuery>(routes!(
            billing::usage_history
        )))
        .routes(plain(routes!(billing::cost_estimate)))
        .routes(query::<billing::InvoicesQuery>(routes!(billing::invoices)))
        .routes(plain(routes!(billing::stripe_config)))
        .routes(plain(routes!(budgets::list)))
        .routes(plain(routes!(budgets::get, budgets::put, budgets::delete)))
        .routes(query::<approvals::ListQuery>(routes!(approvals::list)))
        .routes(plain(routes!(approvals::request)))
        .routes(query::<approvals::WaitQuery>(routes!(approvals::get)))
        .routes(plain(routes!(approvals::approve)))
        .routes(plain(routes!(approvals::deny)))
        .routes(query::<UnpagedList>(routes!(secrets::list)))
        .routes(plain(routes!(secrets::get, secrets::put, secrets::delete)))
        .routes(query::<UnpagedList>(routes!(actions::list)))
        .routes(plain(routes!(actions::create)))
        .routes(plain(routes!(import::import)))
        .routes(query::<reads::InvocationQuery>(routes!(
            reads::list_invocations
        )))
        .routes(plain(routes!(reads::invocation)))
        .routes(query::<reads::EffectQuery>(routes!(reads::list_effects)))
        .routes(plain(routes!(reads::effect)))
        .routes(plain(routes!(receipts::effect_receipt)))
        .routes(plain(routes!(receipts::effect_receipts)))
        .routes(query::<receipts::ChainQuery>(routes!(receipts::chain)))
        .routes(plain(routes!(receipts::public_keys)))
        .routes(plain(routes!(recovery::reconcile)))
        .routes(plain(routes!(recovery::resolve_effect)))
        .routes(plain(routes!(recovery::note)))
        .routes(plain(routes!(recovery::replay)))
        .routes(plain(routes!(recovery::resolve_invocation)))
        .routes(plain(routes!(
            actions::get,
            actions::update,
            actions::delete
        )))
        .routes(plain(routes!(actions::versions)))
        .routes(plain(routes!(invoke::invoke)))
        .routes(plain(routes!(previews::create)))
        .routes(plain(routes!(previews::get)))
        .routes(plain(routes!(previews::refresh)))
        .routes(plain(routes!(stream::stream)))
        .routes(plain(routes!(channels::list, channels::create)))
        .routes(plain(routes!(channels::delete)))
        .routes(plain(routes!(webhooks::list_topics)))
        .routes(plain(routes!(webhooks::get_topic)))
        .routes(plain(routes!(
            webhooks::list_subscriptions,
            webhooks::create_subscription
        )))
        .routes(plain(routes!(
            webhooks::update_subscription,
            webhooks::delete_subscription
        )))
        .routes(plain(routes!(webhooks::rotate_secret)))
        .routes(query::<webhooks::DeadLetterQuery>(routes!(
            webhooks::dead_letters
        )))
        .routes(plain(routes!(webhooks::dead_letter)))
        .routes(plain(routes!(webhooks::redeliver_dead_letter)))
        .routes(plain(routes!(
            webhooks::redeliver_subscription_dead_letters
        )))
        .routes(query::<runs::ListQuery>(routes!(runs::list)))
        .routes(plain(routes!(runs::start)))
        .routes(plain(routes!(runs::import_trace)))
        .routes(plain(routes!(runs::get, runs::end)))
        .routes(plain(routes!(runs::ingest_spans)))
        .routes(query::<runs::SpansQuery>(routes!(runs::list_spans)))
        .routes(plain(routes!(runs::get_span)))
        .routes(plain(routes!(runs::add_feedback)))
        .routes(plain(routes!(runs::list_feedback)))
        .routes(plain(routes!(runs::export_trace)))
        .routes(query::<reads::InvocationQuery>(routes!(
            reads::invocations_for_action
        )))
}

/// The `/api/v2` router and its OpenAPI document, built from the same registrations.
pub(crate) fn surface() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(openapi::base())
        .nest("/api/v2", v2_routes())
        .split_for_parts()
}

/// The separate metrics listener's surface: `/metrics` alone, behind `metrics_token` if given.
pub(crate) fn metrics_router(
    state: AppState,
    metrics_token: Option<metrics::MetricsToken>,
) -> Router {
    edge(Router::new().route("/metrics", scrape(metrics_token))).with_state(state)
}

pub(crate) fn scrape(
    token: Option<metrics::MetricsToken>,
) -> axum::routing::MethodRouter<AppState, std::convert::Infallible> {
    get(move |State(state): State<AppState>, headers: HeaderMap| {
        metrics::scrape(state, headers, token.clone())
    })
}

/// What every listener's router gets: the 404 envelope for unknown paths, the one body limit,
/// the envelope for every error (`rejection.rs`), and the request id.
pub(crate) fn edge(routes: Router<AppState>) -> Router<AppState> {
    routes
        .fallback(
            |method: axum::http::Method, uri: axum::http::Uri| async move {
                rejection::no_such_route(&method, uri.path())
            },
        )
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
pub(crate) async fn request_context(request: Request, next: Next) -> Response {
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
    // The request's span: an invoke's store and dispatch spans nest under it, and it is what
    // `--otlp-endpoint` exports. An invoke naming a run re-parents it under the run's trace.
    let span = tracing::info_span!(
        "steward.request",
        request_id = %id,
        http.method = %method,
        url.path = %path,
        http.status_code = tracing::field::Empty,
    );
    let mut response = tracing::Instrument::instrument(next.run(request), span.clone())
        .await
        .into_response();
    span.record("http.status_code", response.status().as_u16());
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
