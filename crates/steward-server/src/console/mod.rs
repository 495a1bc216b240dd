//! The operator console under `/console/`: server-rendered pages (maud, so every value is
//! HTML-escaped at compile-checked call sites) whose forms work without JavaScript.
//!
//! The console adds no rules of its own. Every page and every button calls the same handler
//! function the HTTP API serves (`bridge.rs`), as the signed-in operator key, so what the
//! console shows and refuses is what `/api/v2` shows and refuses: scopes, separation of duties,
//! expiry, N-of-M, the kill switch.
//!
//! Where each check is made:
//!
//! 1. **Sign-in** (`login.rs`): the operator key is checked like a bearer key
//!    (`Store::caller`) and must hold `approvals:decide` (`session::CONSOLE_SCOPE`: agent and
//!    read-only keys are refused); a session token is generated, only its hash is stored
//!    (`Store::create_console_session`), and the token goes to the browser in a `__Host-`
//!    cookie (`session.rs`: `Secure`, `HttpOnly`, `SameSite=Strict`, `Path=/`).
//! 2. **Every request** (`session.rs`, [`session::Operator`]): the session and its key are read
//!    from the store (`Store::console_session`); an expired session or a revoked or expired key
//!    is no session, and a page asks for sign-in.
//! 3. **Every write** (`guard.rs`, a middleware in front of every POST): `Sec-Fetch-Site` and
//!    `Origin` must name this origin (another site, or another port on localhost, is 403), the
//!    form's `csrf` field must match the session's token, and a read-only console
//!    (`--console-read-only`) refuses every write but sign-in and sign-out. A refusal is 403
//!    and the handler never runs.

mod audit;
mod bridge;
mod catalog;
mod decide;
mod effects;
mod environment;
mod filters;
mod guard;
mod holds;
mod inbox;
mod invocations;
mod layout;
mod live;
mod login;
mod overview;
mod records;
mod runs;
mod session;
mod timeline;
mod unknown;
mod webhooks;

use crate::state::AppState;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;

/// The path the console is served under.
pub const PATH: &str = "/console";

/// The largest form the console accepts, in bytes: a note, a reason or evidence text with
/// room to spare, far below the API's JSON body limit.
pub const FORM_BODY_BYTES_MAX: usize = 64 * 1024;

/// Whether the console may change anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsoleMode {
    /// Pages show their write controls, and writes are accepted (after the checks above).
    #[default]
    ReadWrite,
    /// `steward serve --console-read-only`: no write control is shown and every write but
    /// sign-in and sign-out is 403.
    ReadOnly,
}

impl ConsoleMode {
    pub fn writable(self) -> bool {
        self == ConsoleMode::ReadWrite
    }
}

/// The console's routes, each behind the write guard.
pub(crate) fn routes(mode: ConsoleMode) -> Router<AppState> {
    Router::new()
        .route(PATH, get(|| async { layout::see_other("/console/") }))
        .route("/console/", get(overview::page))
        .route(layout::LIVE_SCRIPT_PATH, get(live::script))
        .route("/console/events", get(live::events))
        .route("/console/login", get(login::page).post(login::sign_in))
        .route("/console/logout", post(login::sign_out))
        .route("/console/approvals/batch", post(decide::batch))
        .route("/console/approvals/{id}/approve", post(decide::approve))
        .route("/console/approvals/{id}/deny", post(decide::deny))
        .route("/console/unknown", get(unknown::page))
        .route("/console/effects/{id}/reconcile", post(unknown::reconcile))
        .route("/console/effects/{id}/resolve", post(unknown::resolve))
        .route("/console/invocations", get(invocations::list))
        .route("/console/effects", get(effects::list))
        .route("/console/runs", get(runs::list))
        .route("/console/runs/{id}", get(runs::page))
        .route("/console/invocations/{id}", get(timeline::page))
        .route("/console/actions", get(catalog::actions))
        .route("/console/actions/{id}", get(catalog::action))
        .route("/console/policies", get(catalog::policies))
        .route("/console/policies/{id}", get(catalog::policy))
        .route("/console/limits", get(catalog::limits))
        .route("/console/keys", get(catalog::keys))
        .route("/console/environment", get(environment::page))
        .route("/console/environment/halt", post(environment::halt))
        .route("/console/environment/resume", post(environment::resume))
        .route("/console/holds", get(holds::page).post(holds::hold))
        .route("/console/holds/{id}/release", post(holds::release))
        .route("/console/audit", get(audit::page))
        .route("/console/webhooks", get(webhooks::page))
        .route(
            "/console/dlq/{id}/redeliver",
            post(webhooks::redeliver_letter),
        )
        .route(
            "/console/webhooks/subscriptions/{id}/redeliver",
            post(webhooks::redeliver_subscription),
        )
        .route("/console/{*rest}", get(layout::not_found))
        .layer(middleware::from_fn(move |request, next| {
            guard::writes(mode, request, next)
        }))
        .layer(axum::Extension(mode))
        .layer(DefaultBodyLimit::max(FORM_BODY_BYTES_MAX))
}

/// `GET /`: a `303 See Other` to the console (its overview, or sign-in).
pub(crate) fn landing() -> axum::response::Response {
    layout::see_other("/console/")
}
