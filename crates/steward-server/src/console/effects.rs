//! The effects list: filters (outcome, stage, action, time range), a search by operation key,
//! and paging, from the API's own list (`GET /api/v2/actions/effects`). The unknown queue
//! (`unknown.rs`) is where unresolved effects are worked; this is where any effect is found.

use super::filters::{Filters, Listing};
use super::invocations::{by_operation_key, page_of};
use super::layout::{self, text};
use super::session::Operator;
use super::ConsoleMode;
use crate::api::views;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use serde_json::Value;
use std::collections::HashMap;
use steward_core::{Millis, OperationKey};

const PATH: &str = "/console/effects";

/// An effect's outcomes, as the API names them (`outcome=`).
pub const OUTCOMES: [&str; 5] = [
    "not_dispatched",
    "pending",
    "succeeded",
    "failed",
    "unknown",
];

/// An effect's stages, as the API names them (`stage=`).
pub const STAGES: [&str; 6] = [
    "awaiting_approval",
    "ready",
    "dispatching",
    "reconciling",
    "settled",
    "rejected",
];

pub async fn list(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let filters = match Filters::parse(&params, &OUTCOMES, &STAGES) {
        Ok(f) => f,
        Err(e) => return layout::error_page(&e),
    };
    let found = match &filters.operation_key {
        Some(key) => searched(&state, &op, &filters, key).await,
        None => page_of(Listing::Effects, &state, &op, &filters).await,
    };
    let (rows, total) = match found {
        Ok(found) => found,
        Err(e) => return layout::error_page(&e),
    };
    let now = state.clock.now();
    let body = html! {
        (filters.form(PATH, &OUTCOMES, &STAGES, "Action"))
        table #effects {
            tr { th { "Effect" } th { "Action" } th { "Operation key" } th { "Outcome" } th { "Stage" } th { "Attempts" } th { "Created" } }
            @for e in &rows { (row(e, now)) }
        }
        @if filters.operation_key.is_some() {
            p.muted #page-range { (rows.len()) " found by operation key" }
        } @else {
            (super::filters::pager(&filters, PATH, rows.len(), total, super::filters::OFFSET_MAX))
        }
    };
    layout::html(
        StatusCode::OK,
        layout::live_page("Effects", &op, mode, body),
    )
}

fn row(e: &Value, now: Millis) -> Markup {
    html! {
        tr.effect data-effect=(text(e, "id")) {
            td { (text(e, "id")) br; a href={ "/console/invocations/" (text(e, "invocationId")) } { "timeline" } }
            td { (text(e, "action")) }
            td { code { (text(e, "operationKey")) } }
            td { span.tag { (text(e, "outcome")) } }
            td { (text(e, "stage")) }
            td { (e.get("attemptCount").and_then(Value::as_u64).unwrap_or(0)) }
            td { (layout::when(text(e, "createdAt"), now)) }
        }
    }
}

/// The effects of the invocations recorded under `key`, kept when they pass the other filters.
async fn searched(
    state: &AppState,
    op: &Operator,
    filters: &Filters,
    key: &OperationKey,
) -> Result<(Vec<Value>, u64), ApiError> {
    let env = &op.caller.env.id;
    let mut rows = Vec::new();
    for invocation in by_operation_key(state, op, filters.action.as_deref(), key).await? {
        if let Some(detail) = state.store.effect(env, &invocation.effect_id).await? {
            let view = serde_json::to_value(views::effect(&detail.effect)).unwrap_or(Value::Null);
            let kept = filters
                .status
                .as_deref()
                .is_none_or(|s| text(&view, "outcome") == s)
                && filters
                    .stage
                    .as_deref()
                    .is_none_or(|s| text(&view, "stage") == s)
                && filters.in_range(text(&view, "createdAt"));
            if kept {
                rows.push(view);
            }
        }
    }
    let total = rows.len() as u64;
    Ok((rows, total))
}
