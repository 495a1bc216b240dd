//! The overview, the console's landing page (`/console/`): what needs an operator now. Counts of
//! pending approvals, unknown and reconciling effects and failed effects, whether the
//! environment is halted, the approvals inbox itself (approve or deny in place), the recent
//! failures and the recent decisions. After a decision it says what the dispatch did, read from
//! the invocation as it stands. Every count is the `pagination.total` of the API's own list, so
//! the page says what the API says; the page refreshes itself as events arrive (`live.rs`).

use super::bridge::items;
use super::inbox;
use super::layout::{self, text};
use super::records;
use super::session::Operator;
use super::ConsoleMode;
use crate::app::reads::{self, EffectFilters, PageRequest};
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use serde_json::Value;
use std::collections::HashMap;
use steward_core::{InvocationId, Millis};

/// How many recent failed effects the overview lists (the count covers them all).
const RECENT_FAILURES_SHOWN: u32 = 5;

/// What the page says above its content: what the last form did, or why it was refused.
#[derive(Debug, Default)]
pub struct Notice {
    /// The fixed message of a `?done=` code.
    pub done: Option<&'static str>,
    /// The invocation a decision released or ended, whose dispatch the page reports.
    pub invocation: Option<InvocationId>,
    pub error: Option<ApiError>,
    /// What each decision of a batch (`decide::batch`) came to: the approval's id and a
    /// sentence, in the order decided.
    pub batch: Vec<(String, String)>,
}

impl Notice {
    pub fn refused(error: ApiError) -> Self {
        Self {
            error: Some(error),
            ..Self::default()
        }
    }
}

pub async fn page(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let notice = Notice {
        done: params.get("done").and_then(|d| layout::done_message(d)),
        // Only an id of the right shape is read; anything else shows nothing.
        invocation: params
            .get("invocation")
            .and_then(|id| InvocationId::parse(id).ok()),
        error: None,
        batch: Vec::new(),
    };
    render(&state, mode, &op, notice).await
}

/// The counts the overview shows, each the total of an API list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    pending: u64,
    unknown: u64,
    reconciling: u64,
    failed: u64,
}

pub async fn render(
    state: &AppState,
    mode: ConsoleMode,
    op: &Operator,
    notice: Notice,
) -> Response {
    let read = async {
        let pending = inbox::pending(state, op).await?;
        let recent = inbox::recent(state, op).await?;
        let failures = effects(state, op, outcome("failed"), RECENT_FAILURES_SHOWN).await?;
        let reconciling = EffectFilters {
            stage: Some("reconciling".to_string()),
            ..EffectFilters::default()
        };
        let counts = Counts {
            pending: total(&pending),
            unknown: total(&effects(state, op, outcome("unknown"), 1).await?),
            reconciling: total(&effects(state, op, reconciling, 1).await?),
            failed: total(&failures),
        };
        let names = crate::api::views::KeyNames::of(state, &op.caller.env.id).await?;
        Ok::<_, ApiError>((pending, recent, failures, counts, names))
    };
    let (pending, recent, failures, counts, names) = match read.await {
        Ok(read) => read,
        Err(e) => return layout::error_page(&e),
    };
    let dispatch = match &notice.invocation {
        Some(id) => dispatched(state, op, id).await,
        None => None,
    };
    let now = state.clock.now();
    let status = notice.error.as_ref().map_or(StatusCode::OK, |e| e.status);
    let body = html! {
        (layout::notice(notice.done, notice.error.as_ref()))
        @if let Some(dispatch) = dispatch { (dispatch) }
        @if !notice.batch.is_empty() {
            ul #batch-outcomes {
                @for (id, outcome) in &notice.batch {
                    li data-approval=(id) { code { (id) } ": " (outcome) }
                }
            }
        }
        (cards(counts, op.caller.env.halted))
        h2 { "Waiting for approval" }
        (inbox::pending_table(&pending["data"], op, mode, now, &names))
        h2 { "Recent failures" }
        (failures_table(&failures["data"], now))
        h2 { "Recently decided" }
        (inbox::decided_table(&recent["data"], now, &names))
    };
    // An answer to a form is not refreshed in place: its URL is the form's, not a page's.
    let page = if notice.error.is_some() {
        layout::page("Overview", Some(op), mode, body)
    } else {
        layout::live_page("Overview", op, mode, body)
    };
    layout::html(status, page)
}

fn total(list: &Value) -> u64 {
    list.pointer("/pagination/total")
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The effects with one outcome.
fn outcome(outcome: &str) -> EffectFilters {
    EffectFilters {
        outcome: Some(outcome.to_string()),
        ..EffectFilters::default()
    }
}

/// A page of the effects `filters` selects, whole (`data` and `pagination`), as the API lists
/// them.
async fn effects(
    state: &AppState,
    op: &Operator,
    filters: EffectFilters,
    limit: u32,
) -> Result<Value, ApiError> {
    let filters = EffectFilters {
        page: PageRequest {
            limit: Some(limit),
            ..filters.page
        },
        ..filters
    };
    records::effects(&reads::list_effects(state, &op.caller, &filters).await?)
}

fn cards(counts: Counts, halted: bool) -> Markup {
    let card = |id: &str, href: &str, count: u64, label: &str| {
        html! {
            a.card.attention[count > 0] id=(id) href=(href) {
                span.count data-count=(count) { (count) } (label)
            }
        }
    };
    html! {
        div.cards {
            (card("count-pending", "#inbox", counts.pending, "pending approvals"))
            (card("count-unknown", "/console/effects?status=unknown", counts.unknown, "unknown effects"))
            (card("count-reconciling", "/console/effects?stage=reconciling", counts.reconciling, "reconciling"))
            (card("count-failed", "/console/effects?status=failed", counts.failed, "failed effects"))
            a.card.halted[halted] #environment-state href="/console/environment" {
                span.count { @if halted { "Halted" } @else { "Running" } } "environment"
            }
        }
    }
}

fn failures_table(failures: &Value, now: Millis) -> Markup {
    html! {
        @if items(failures).is_empty() {
            p.muted #failures { "No effect has failed." }
        } @else {
            table #failures {
                tr { th { "Action" } th { "Effect" } th { "Operation key" } th { "When" } th { "" } }
                @for e in items(failures) {
                    tr {
                        td { (text(e, "action")) }
                        td { (text(e, "id")) }
                        td { code { (text(e, "operationKey")) } }
                        td { (layout::when(text(e, "updatedAt"), now)) }
                        td { a href={ "/console/invocations/" (text(e, "invocationId")) } { "timeline" } }
                    }
                }
            }
        }
    }
}

/// What the dispatch of the invocation a decision released (or ended) did, as the invocation
/// stands now; nothing when it cannot be read.
async fn dispatched(state: &AppState, op: &Operator, id: &InvocationId) -> Option<Markup> {
    let found = reads::invocation(state, &op.caller, id.as_str())
        .await
        .ok()?;
    let invocation = records::invocation(&found).ok()?;
    let status = text(&invocation, "status");
    let said = match status {
        "succeeded" => "the provider accepted it",
        "failed" => "the provider refused it",
        "unknown" => "its outcome is unknown: the reconciler will ask the provider",
        "running" => "it is being sent",
        "pending_approval" => "it still waits for more approvals",
        "denied" => "it will not be sent",
        _ => "",
    };
    Some(html! {
        div.banner.ok #dispatch role="status" {
            "Dispatch: invocation " a href={ "/console/invocations/" (text(&invocation, "id")) } { (text(&invocation, "id")) }
            " of " (text(&invocation, "action")) " is " strong { (status) }
            @if let Some(code) = invocation.get("responseStatus").and_then(Value::as_u64) { " (HTTP " (code) ")" }
            @if !said.is_empty() { ": " (said) }
            "."
        }
    })
}
