//! The kill switch (`POST /api/v2/environment/halt|resume`, the same handlers), with a
//! confirmation and a reason.

use super::bridge::{optional, required};
use super::layout::{self, csrf_field};
use super::session::Operator;
use super::ConsoleMode;
use crate::app;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::html;
use std::collections::HashMap;

pub async fn page(
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let done = params.get("done").and_then(|d| layout::done_message(d));
    render(mode, &op, done, None)
}

fn render(
    mode: ConsoleMode,
    op: &Operator,
    done: Option<&str>,
    error: Option<ApiError>,
) -> Response {
    let env = &op.caller.env;
    let status = error.as_ref().map_or(StatusCode::OK, |e| e.status);
    let body = html! {
        (layout::notice(done, error.as_ref()))
        p #halt-state {
            "Environment " strong { (env.name) } " is "
            @if env.halted { strong { "halted" } } @else { strong { "running" } } "."
        }
        p.muted { "While halted, invokes are refused and nothing is sent to any provider; approvals can still be decided and approved work waits. Resume dispatches parked work once." }
        @if mode.writable() {
            @if env.halted {
                form method="post" action="/console/environment/resume" {
                    (csrf_field(op))
                    label { input type="checkbox" name="confirm" value="yes"; " I want to resume this environment" }
                    br; button type="submit" { "Resume" }
                }
            } @else {
                form method="post" action="/console/environment/halt" {
                    (csrf_field(op))
                    label { "Reason (recorded in the audit log) " br; textarea name="reason" rows="2" cols="50" {} }
                    br; label { input type="checkbox" name="confirm" value="yes"; " I want to stop every provider call in this environment" }
                    br; button.danger type="submit" { "Halt" }
                }
            }
        } @else { p.muted { "read-only" } }
    };
    layout::html(status, layout::page("Kill switch", Some(op), mode, body))
}

fn confirmed(form: &HashMap<String, String>) -> Result<(), ApiError> {
    match optional(form, "confirm") {
        Some("yes") => Ok(()),
        _ => Err(ApiError::validation(
            "confirm",
            "tick the confirmation to go ahead",
        )),
    }
}

pub async fn halt(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let reason = match confirmed(&form).and_then(|()| required(&form, "reason")) {
        Ok(reason) => reason,
        Err(e) => return render(mode, &op, None, Some(e)),
    };
    match app::environment::halt(&state, &op.caller, Some(reason)).await {
        Ok(_) => layout::see_other("/console/environment?done=halted"),
        Err(e) => render(mode, &op, None, Some(e)),
    }
}

pub async fn resume(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if let Err(e) = confirmed(&form) {
        return render(mode, &op, None, Some(e));
    }
    match app::environment::resume(&state, &op.caller).await {
        Ok(_) => layout::see_other("/console/environment?done=resumed"),
        Err(e) => render(mode, &op, None, Some(e)),
    }
}
