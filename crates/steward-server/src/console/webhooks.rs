//! Webhook dead letters (`GET /api/v2/dlq`) and their redelivery (`POST /api/v2/dlq/{id}/redeliver`
//! and `POST /api/v2/events/subscriptions/{id}/dlq/redeliver`, the same handlers): one letter,
//! or every letter of a subscription. A redelivery is a durable, audited request; the
//! subscription's worker POSTs each letter once, and this page shows how it went.

use super::bridge::{data, items, query};
use super::layout::{self, csrf_field, text};
use super::session::Operator;
use super::ConsoleMode;
use crate::api::webhooks;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::{Extension, Form};
use maud::html;
use std::collections::{BTreeSet, HashMap};

/// The fixed message for this page's `?done=` codes; unknown codes show nothing, so a crafted
/// link cannot put words on the page.
fn done_message(code: &str) -> Option<&'static str> {
    Some(match code {
        "letter" => "Redelivery requested: the dead letter will be POSTed once more.",
        "subscription" => "Redelivery requested for every dead letter of the subscription.",
        _ => return None,
    })
}

pub async fn page(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let done = params.get("done").and_then(|d| done_message(d));
    render(&state, mode, &op, done, None).await
}

async fn render(
    state: &AppState,
    mode: ConsoleMode,
    op: &Operator,
    done: Option<&str>,
    error: Option<ApiError>,
) -> Response {
    let q = match query("limit=100") {
        Ok(q) => q,
        Err(e) => return layout::error_page(&e),
    };
    let answer = webhooks::dead_letters(State(state.clone()), op.caller.clone(), q).await;
    let letters = match data(answer).await {
        Ok(letters) => letters,
        Err(e) => return layout::error_page(&e),
    };
    let letters = items(&letters);
    let subscriptions: BTreeSet<&str> = letters.iter().map(|d| text(d, "subscriptionId")).collect();
    let now = state.clock.now();
    let status = error.as_ref().map_or(StatusCode::OK, |e| e.status);
    let body = html! {
        (layout::notice(done, error.as_ref()))
        p.muted { "Events a subscription gave up on after its retry schedule, newest first (at most 100). A redelivery POSTs the letter's event once more, signed afresh, before the subscription's next event." }
        @if letters.is_empty() {
            p #no-letters { "No dead letters." }
        } @else {
            table #dead-letters {
                tr { th { "Letter" } th { "Subscription" } th { "Event" } th { "Attempts" } th { "Last error" } th { "Redelivery" } th { "Age" } th {} }
                @for d in letters {
                    tr {
                        td { code { (text(d, "id")) } }
                        td { code { (text(d, "subscriptionId")) } }
                        td { (text(d, "eventType")) " " code { (text(d, "eventId")) } }
                        td { (d["attempts"]) }
                        td { (text(d, "lastError")) }
                        td { (text(d, "redelivery")) }
                        td { (layout::age(text(d, "createdAt"), now)) }
                        td {
                            @if mode.writable() && text(d, "redelivery") != "requested" {
                                form.inline method="post" action=(format!("/console/dlq/{}/redeliver", text(d, "id"))) {
                                    (csrf_field(op))
                                    button type="submit" { "Redeliver" }
                                }
                            }
                        }
                    }
                }
            }
            @if mode.writable() {
                h2 { "Every letter of a subscription" }
                @for sub in &subscriptions {
                    form method="post" action=(format!("/console/webhooks/subscriptions/{sub}/redeliver")) {
                        (csrf_field(op))
                        code { (sub) } " "
                        button type="submit" { "Redeliver all" }
                    }
                }
            } @else { p.muted { "read-only" } }
        }
    };
    layout::html(
        status,
        layout::page("Webhook dead letters", Some(op), mode, body),
    )
}

pub async fn redeliver_letter(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
    Form(_form): Form<HashMap<String, String>>,
) -> Response {
    let answer = webhooks::redeliver_dead_letter(
        State(state.clone()),
        op.caller.clone(),
        Path(id),
        HeaderMap::new(),
    )
    .await;
    after_redelivery(&state, mode, &op, answer, "letter").await
}

pub async fn redeliver_subscription(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
    Form(_form): Form<HashMap<String, String>>,
) -> Response {
    let answer = webhooks::redeliver_subscription_dead_letters(
        State(state.clone()),
        op.caller.clone(),
        Path(id),
        HeaderMap::new(),
    )
    .await;
    after_redelivery(&state, mode, &op, answer, "subscription").await
}

/// Back to the list with what was requested (`done`), or the page with the API's refusal.
async fn after_redelivery(
    state: &AppState,
    mode: ConsoleMode,
    op: &Operator,
    answer: crate::error::ApiResult<Response>,
    done: &str,
) -> Response {
    match data(answer).await {
        Ok(_) => layout::see_other(&format!("/console/webhooks?done={done}")),
        Err(e) => render(state, mode, op, None, Some(e)).await,
    }
}
