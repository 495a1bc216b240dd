//! The unknown queue: every unresolved effect (`unresolved=true`: `unknown`, and `dispatching`
//! while an attempt is in flight), oldest first. "Reconcile now" is the API's read-only
//! reconcile; "resolve" settles an unknown effect by hand with evidence, from a key other than
//! the invoker's (`POST /api/v2/actions/effects/{id}/reconcile|resolve`, the same handlers).
//! There is no replay or re-send control: a person settles an unknown, nothing sends it again.

use super::bridge::{body, data, items, optional, required};
use super::layout::{self, csrf_field, text};
use super::records;
use super::session::Operator;
use super::ConsoleMode;
use crate::api::recovery;
use crate::app::reads::{self, EffectFilters, PageRequest};
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde_json::{json, Value};
use std::collections::HashMap;
use steward_core::Millis;

/// How many unresolved effects the queue shows: the API's largest page.
const QUEUE_EFFECTS_MAX: u32 = 200;

pub async fn page(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let done = params.get("done").and_then(|d| layout::done_message(d));
    render(&state, mode, &op, done, None).await
}

async fn render(
    state: &AppState,
    mode: ConsoleMode,
    op: &Operator,
    done: Option<&str>,
    error: Option<ApiError>,
) -> Response {
    let filters = EffectFilters {
        unresolved: Some("true".to_string()),
        page: PageRequest {
            limit: Some(QUEUE_EFFECTS_MAX),
            offset: None,
        },
        ..EffectFilters::default()
    };
    let answer = match reads::list_effects(state, &op.caller, &filters).await {
        Ok(found) => records::effects(&found),
        Err(e) => Err(e),
    };
    let queue = match answer {
        Ok(page) => page.get("data").cloned().unwrap_or(Value::Null),
        Err(e) => return layout::error_page(&e),
    };
    // The API lists newest first; the queue is worked oldest first.
    let mut effects: Vec<&Value> = items(&queue).iter().collect();
    effects.sort_by(|a, b| text(a, "createdAt").cmp(text(b, "createdAt")));
    let now = state.clock.now();
    let status = error.as_ref().map_or(StatusCode::OK, |e| e.status);
    let body = html! {
        (layout::notice(done, error.as_ref()))
        p.muted { "Effects whose outcome Steward could not prove. Reconcile asks the provider (read-only, nothing is sent); resolve records what you established, with evidence. Nothing here sends a request again." }
        @if effects.is_empty() {
            p.muted { "The queue is empty." }
        } @else {
            table #unknown {
                tr { th { "Effect" } th { "State" } th { "Age" } th { "Attempts" } th { "Reconcile" } th { "Resolve by hand" } }
                @for e in &effects { (row(e, op, mode, now)) }
            }
        }
    };
    layout::html(
        status,
        layout::page("Unknown outcomes", Some(op), mode, body),
    )
}

fn row(e: &Value, op: &Operator, mode: ConsoleMode, now: Millis) -> Markup {
    let id = text(e, "id");
    html! {
        tr.effect data-effect=(id) {
            td {
                strong { (text(e, "action")) } br;
                span.muted { (id) } br;
                a href={ "/console/invocations/" (text(e, "invocationId")) } { "timeline" }
            }
            td { span.tag { (text(e, "outcome")) } " " span.muted { (text(e, "stage")) } }
            td { (layout::age(text(e, "createdAt"), now)) br; span.muted { (text(e, "createdAt")) } }
            td { (e.get("attemptCount").and_then(Value::as_u64).unwrap_or(0)) }
            @if mode.writable() {
                td {
                    form.inline method="post" action={ "/console/effects/" (id) "/reconcile" } {
                        (csrf_field(op))
                        button type="submit" { "Reconcile now" }
                    }
                }
                td {
                    form method="post" action={ "/console/effects/" (id) "/resolve" } {
                        (csrf_field(op))
                        select name="outcome" {
                            option value="succeeded" { "it happened (succeeded)" }
                            option value="failed" { "it did not happen (failed)" }
                        }
                        br;
                        textarea name="reason" rows="2" cols="34" placeholder="evidence: what you checked and found (required)" {}
                        br;
                        input type="text" name="externalReference" placeholder="provider reference (optional)";
                        " " button type="submit" { "Resolve" }
                    }
                }
            } @else {
                td colspan="2" { span.muted { "read-only" } }
            }
        }
    }
}

pub async fn reconcile(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
) -> Response {
    let answer = recovery::reconcile(State(state.clone()), op.caller.clone(), Path(id)).await;
    match data(answer).await {
        Ok(_) => layout::see_other("/console/unknown?done=reconciled"),
        Err(e) => render(&state, mode, &op, None, Some(e)).await,
    }
}

pub async fn resolve(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let request = match (required(&form, "outcome"), required(&form, "reason")) {
        (Ok(outcome), Ok(reason)) => {
            let mut request = json!({ "outcome": outcome, "reason": reason });
            if let Some(reference) = optional(&form, "externalReference") {
                request["externalReference"] = json!(reference);
            }
            request
        }
        (Err(e), _) | (_, Err(e)) => return render(&state, mode, &op, None, Some(e)).await,
    };
    let answer = recovery::resolve_effect(
        State(state.clone()),
        op.caller.clone(),
        Path(id),
        HeaderMap::new(),
        body(request),
    )
    .await;
    match data(answer).await {
        Ok(_) => layout::see_other("/console/unknown?done=resolved"),
        Err(e) => render(&state, mode, &op, None, Some(e)).await,
    }
}
