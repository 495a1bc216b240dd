//! The invocations list: filters (status, action, time range), a search by operation key, and
//! paging. Pages come from the API's own list (`GET /api/v2/actions/invocations`, large fields
//! elided as the API elides them); a search by operation key asks the store for the one
//! invocation each action holds under that key (the identity of invariant 2) and shows it as
//! the list would.

use super::filters::{self, Filters, Listing, PAGE_ITEMS};
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
use steward_core::{scopes, Millis, OperationKey};
use steward_store::InvocationRecord;

const PATH: &str = "/console/invocations";

/// The statuses an invocation can have, as the API names them.
pub const STATUSES: [&str; 7] = [
    "pending_approval",
    "running",
    "succeeded",
    "failed",
    "unknown",
    "denied",
    "expired",
];

/// How many actions a search by operation key looks in at most (one store read each): far
/// more than an environment defines in practice; past it, the search asks for an action.
pub const ACTIONS_SEARCHED_MAX: usize = 500;

pub async fn list(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let filters = match Filters::parse(&params, &STATUSES, &[]) {
        Ok(f) => f,
        Err(e) => return layout::error_page(&e),
    };
    let found = match &filters.operation_key {
        Some(key) => searched(&state, &op, &filters, key).await,
        None => paged(&state, &op, &filters).await,
    };
    let (rows, total) = match found {
        Ok(found) => found,
        Err(e) => return layout::error_page(&e),
    };
    let now = state.clock.now();
    let body = html! {
        (filters.form(PATH, &STATUSES, &[], "Action"))
        table #invocations {
            tr { th { "Invocation" } th { "Action" } th { "Operation key" } th { "Status" } th { "Created" } th { "Large fields" } }
            @for i in &rows { (row(i, now)) }
        }
        @if filters.operation_key.is_some() {
            p.muted #page-range { (rows.len()) " found by operation key" }
        } @else {
            (filters::pager(&filters, PATH, rows.len(), total, filters::OFFSET_MAX))
        }
    };
    layout::html(
        StatusCode::OK,
        layout::live_page("Invocations", &op, mode, body),
    )
}

fn row(i: &Value, now: Millis) -> Markup {
    html! {
        tr.invocation data-invocation=(text(i, "id")) {
            td { a href={ "/console/invocations/" (text(i, "id")) } { (text(i, "id")) } }
            td { (text(i, "action")) }
            td { code { (text(i, "operationKey")) } }
            td { span.tag { (text(i, "status")) } }
            td { (layout::when(text(i, "createdAt"), now)) }
            td.muted { (elided_note(i, "input")) " " (elided_note(i, "body")) }
        }
    }
}

/// The list's text for a field a list elided (its size), or "".
fn elided_note(i: &Value, field: &str) -> String {
    i.get(field)
        .filter(|v| v.get("elided").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("bytes").and_then(Value::as_u64))
        .map(|bytes| format!("{field}: {bytes} bytes, on the invocation's page"))
        .unwrap_or_default()
}

/// One page of the filtered list inside the time range, and how many the range holds.
async fn paged(
    state: &AppState,
    op: &Operator,
    filters: &Filters,
) -> Result<(Vec<Value>, u64), ApiError> {
    page_of(Listing::Invocations, state, op, filters).await
}

/// One page of a listing's filtered items inside the time range, and how many the range holds.
pub async fn page_of(
    listing: Listing,
    state: &AppState,
    op: &Operator,
    filters: &Filters,
) -> Result<(Vec<Value>, u64), ApiError> {
    let first = listing
        .read(state, op, filters, filters.offset, PAGE_ITEMS)
        .await?;
    if filters.from.is_none() && filters.to.is_none() {
        return Ok((first.items, first.total));
    }
    let (start, end) = filters::window(listing, state, op, filters, first.total).await?;
    let in_range = end - start;
    let at = start + u64::from(filters.offset);
    if at >= end {
        return Ok((Vec::new(), in_range));
    }
    let limit = (end - at).min(u64::from(PAGE_ITEMS)) as u32;
    let Ok(at) = u32::try_from(at) else {
        return Ok((Vec::new(), in_range));
    };
    let read = listing.read(state, op, filters, at, limit).await?;
    // Items recorded since the window was found shift it; the range itself still decides.
    let items = read
        .items
        .into_iter()
        .filter(|i| filters.in_range(text(i, "createdAt")))
        .collect();
    Ok((items, in_range))
}

/// The invocations recorded under `key` (one per action at most), newest first, as the list
/// shows them, kept when they pass the other filters.
async fn searched(
    state: &AppState,
    op: &Operator,
    filters: &Filters,
    key: &OperationKey,
) -> Result<(Vec<Value>, u64), ApiError> {
    let found = by_operation_key(state, op, filters.action.as_deref(), key).await?;
    let rows: Vec<Value> = found
        .iter()
        .map(|i| serde_json::to_value(views::listed_invocation(i)).unwrap_or(Value::Null))
        .filter(|i| {
            filters
                .status
                .as_deref()
                .is_none_or(|s| text(i, "status") == s)
                && filters.in_range(text(i, "createdAt"))
        })
        .collect();
    let total = rows.len() as u64;
    Ok((rows, total))
}

/// The invocations recorded under operation key `key`, in the action `action` names (name or
/// id) or in each of the environment's actions, newest first.
pub async fn by_operation_key(
    state: &AppState,
    op: &Operator,
    action: Option<&str>,
    key: &OperationKey,
) -> Result<Vec<InvocationRecord>, ApiError> {
    op.caller.require(scopes::ACTIONS_READ)?;
    let env = &op.caller.env.id;
    let actions = match action {
        Some(reference) => state
            .store
            .action(env, reference)
            .await?
            .into_iter()
            .collect(),
        None => state.store.list_actions(env).await?,
    };
    if actions.len() > ACTIONS_SEARCHED_MAX {
        return Err(ApiError::validation(
            "action",
            format!(
                "this environment has more than {ACTIONS_SEARCHED_MAX} actions: name the action to search by operation key"
            ),
        ));
    }
    let mut found = Vec::new();
    for action in &actions {
        if let Some(record) = state
            .store
            .invocation_by_operation_key(env, &action.id, key)
            .await?
        {
            found.push(record);
        }
    }
    found.sort_by_key(|i| std::cmp::Reverse(i.created_at.0));
    Ok(found)
}
