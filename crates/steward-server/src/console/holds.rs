//! Holds (the same `app::holds` the API's `/holds` calls): the environment's holds, each with
//! a release button, and a form to hold an action, an operation key, or that key under that
//! action.

use super::bridge::optional;
use super::layout::{self, csrf_field};
use super::session::Operator;
use super::ConsoleMode;
use crate::app;
use crate::app::holds::NewHold;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::html;
use std::collections::HashMap;
use steward_store::HoldRecord;

pub async fn page(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let done = params.get("done").and_then(|d| done_message(d));
    render(&state, mode, &op, done, None).await
}

fn done_message(code: &str) -> Option<&'static str> {
    Some(match code {
        "held" => "Held: new calls it covers are parked and nothing of them is sent.",
        "released" => "Released: the calls it parked were dispatched once each.",
        _ => return None,
    })
}

async fn render(
    state: &AppState,
    mode: ConsoleMode,
    op: &Operator,
    done: Option<&str>,
    error: Option<ApiError>,
) -> Response {
    let holds = match app::holds::list(state, &op.caller).await {
        Ok(holds) => holds,
        Err(e) => {
            let body = html! { (layout::notice(None, Some(&e))) };
            return layout::html(e.status, layout::page("Holds", Some(op), mode, body));
        }
    };
    let status = error.as_ref().map_or(StatusCode::OK, |e| e.status);
    let now = state.clock.now();
    let body = html! {
        (layout::notice(done, error.as_ref()))
        p.muted { "A hold parks new calls of one action, or of one operation key, without stopping the environment (that is the kill switch). Work already being sent is not disturbed. Releasing a hold dispatches each call it parked once; a retry of a held key sees the same parked call." }
        @if holds.is_empty() {
            p #holds-empty { "Nothing is held." }
        } @else {
            table #holds {
                thead { tr { th { "Action" } th { "Operation key" } th { "Reason" } th { "Since" } th {} } }
                tbody {
                    @for h in &holds {
                        tr {
                            td { (h.action_name.as_deref().unwrap_or("any")) }
                            td { code { (h.operation_key.as_deref().unwrap_or("any")) } }
                            td { (h.reason.as_deref().unwrap_or("")) }
                            td { (layout::when(&h.created_at.to_rfc3339(), now)) }
                            td { (release_form(mode, op, h)) }
                        }
                    }
                }
            }
        }
        @if mode.writable() {
            h2 { "Hold" }
            form method="post" action="/console/holds" {
                (csrf_field(op))
                label { "Action " input type="text" name="actionName" maxlength=(app::holds::HOLD_ACTION_NAME_LEN_MAX); }
                br; label { "Operation key " input type="text" name="operationKey" maxlength=(steward_core::CLIENT_KEY_LEN_MAX); }
                br; label { "Reason (recorded in the audit log) " br; textarea name="reason" rows="2" cols="50" maxlength=(app::holds::HOLD_REASON_LEN_MAX) {} }
                br; button.danger type="submit" { "Hold" }
            }
        }
    };
    layout::html(status, layout::page("Holds", Some(op), mode, body))
}

fn release_form(mode: ConsoleMode, op: &Operator, hold: &HoldRecord) -> maud::Markup {
    html! {
        @if mode.writable() {
            form.inline method="post" action=(format!("/console/holds/{}/release", hold.id)) {
                (csrf_field(op))
                button type="submit" { "Release" }
            }
        }
    }
}

pub async fn hold(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let new = NewHold {
        action_name: optional(&form, "actionName").map(str::to_string),
        operation_key: optional(&form, "operationKey").map(str::to_string),
        reason: optional(&form, "reason").map(str::to_string),
    };
    match app::holds::create(&state, &op.caller, new).await {
        Ok(_) => layout::see_other("/console/holds?done=held"),
        Err(e) => render(&state, mode, &op, None, Some(e)).await,
    }
}

pub async fn release(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
) -> Response {
    let released = match app::holds::parse_id(&id) {
        Ok(id) => app::holds::release(&state, &op.caller, &id).await,
        Err(e) => Err(e),
    };
    match released {
        Ok(_) => layout::see_other("/console/holds?done=released"),
        Err(e) => render(&state, mode, &op, None, Some(e)).await,
    }
}
