//! The whole HTTP surface of one listener: the API under `/api/v2` (`api/`), `/mcp` (`mcp/`)
//! and the operator console (`console/`), built by [`app`] so tests can drive it without a
//! socket. It sits above the three front ends, so none of them imports another to be served.

use crate::api::{edge, request_context, scrape, surface};
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;

/// The whole HTTP surface, without `/metrics` (see [`router`]).
pub fn app(state: AppState) -> Router {
    router(
        state,
        None,
        crate::mcp::Settings::default(),
        crate::console::ConsoleMode::ReadWrite,
    )
}

/// The whole HTTP surface; `/metrics` is served only to holders of `metrics_token`
/// (`metrics.rs`). `/mcp` (`mcp/http.rs`) answers only the host names in `mcp.hosts`. The
/// operator console (`console/`) is served under `/console/` in `console` mode.
/// Where the receipt public keys are served without a key (the same answer as
/// `GET /api/v2/receipts/public-keys`).
pub const RECEIPT_KEYS_WELL_KNOWN_PATH: &str = "/.well-known/steward-receipt-keys.json";

pub(crate) fn router(
    state: AppState,
    metrics_token: Option<crate::api::metrics::MetricsToken>,
    mcp: crate::mcp::Settings,
    console: crate::console::ConsoleMode,
) -> Router {
    // Built once: describing 40-odd operations is work tests that build an app per request
    // should not repeat.
    static V2: std::sync::OnceLock<Router<AppState>> = std::sync::OnceLock::new();
    let v2 = V2.get_or_init(|| surface().0).clone();
    let mut top = Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
        )
        .route("/readyz", get(ready))
        // The receipt public keys, where a verifier looks without a key (`docs/RECEIPTS.md`).
        .route(
            RECEIPT_KEYS_WELL_KNOWN_PATH,
            get(crate::api::receipts::well_known_public_keys),
        )
        // A person who opens the server's address lands in the console.
        .route("/", get(|| async { crate::console::landing() }));
    top = match metrics_token {
        Some(token) => top.route("/metrics", scrape(Some(token))),
        None => top.route("/metrics", any(metrics_off)),
    };
    top = top.merge(crate::mcp::http::route(state.clone(), mcp));
    // The console's pages are HTML, so they stay outside `edge`, whose safety net turns every
    // error answer into the API's JSON envelope; they get the request log all the same.
    let console = crate::console::routes(console).layer(middleware::from_fn(request_context));
    // Outermost, so it counts the answer as sent (`metrics.rs`).
    let counted = middleware::from_fn_with_state(state.metrics.clone(), crate::metrics::track_http);
    edge(top.merge(v2))
        .merge(console)
        .layer(counted)
        .with_state(state)
}

/// `/metrics` on the main listener without a metrics token: still the 404 of a path no endpoint
/// serves (nothing about the server's figures is answered), saying how to turn it on.
async fn metrics_off(method: axum::http::Method) -> Response {
    let mut refusal = crate::api::no_such_route(&method, "/metrics");
    refusal.message = format!(
        "{}: /metrics is off on this listener. Start `steward serve` with --metrics-token \
         (STEWARD_METRICS_TOKEN, 16+ characters) to serve it here to that bearer token, or with \
         --metrics-listen ADDR to serve it on an address of its own",
        refusal.message
    );
    refusal.into_response()
}

/// `GET /readyz`: 200 while the store answers a read and holds the schema this build serves;
/// otherwise 503 `STORAGE_UNAVAILABLE` (the envelope), so a load balancer stops sending work to
/// a replica that cannot record it. `/healthz` only says the process answers.
async fn ready(State(state): State<AppState>) -> Response {
    match state.store.ready().await {
        Ok(()) => axum::Json(serde_json::json!({"status": "ready"})).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}
