//! The approvals inbox: pending approvals with what they would run, who asked, how old they
//! are, when they expire and how many approvals they still need; approve or deny with a note
//! (`app::approvals::decide`, as `POST /api/v2/approvals/{id}/approve|deny`), and the recent
//! decisions.

use super::bridge::{full, items, optional, query};
use super::layout::{self, csrf_field, json_text, text};
use super::overview::{self, Notice};
use super::session::Operator;
use super::ConsoleMode;
use crate::api::approvals;
use crate::app;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::{Extension, Form};
use maud::{html, Markup};
use serde_json::Value;
use std::collections::HashMap;
use steward_core::{scopes, ApprovalId, Decision, Millis};

/// How many pending approvals the inbox shows: the API's largest page.
const INBOX_APPROVALS_MAX: u32 = 200;
/// How many recent approvals (any status) are read to show the decided ones.
const RECENT_APPROVALS_MAX: u32 = 30;

/// The pending approvals (at most [`INBOX_APPROVALS_MAX`]) as the API lists them, with the
/// pagination that says how many there are in all.
pub async fn pending(state: &AppState, op: &Operator) -> Result<Value, ApiError> {
    list(state, op, "status=pending", INBOX_APPROVALS_MAX).await
}

/// The most recent approvals of any status, for the decided ones.
pub async fn recent(state: &AppState, op: &Operator) -> Result<Value, ApiError> {
    list(state, op, "", RECENT_APPROVALS_MAX).await
}

/// The inbox: the pending approvals with their approve and deny forms.
pub fn pending_table(pending: &Value, op: &Operator, mode: ConsoleMode, now: Millis) -> Markup {
    html! {
        @if items(pending).is_empty() {
            p.muted { "No approval is waiting." }
        } @else {
            table #inbox {
                tr { th { "Action" } th { "Requested by" } th { "Input" } th { "Age" } th { "Expires" } th { "Approvals" } th { "Decide" } }
                @for a in items(pending) { (pending_row(a, op, mode, now)) }
            }
        }
    }
}

/// The approvals of `recent` that are decided, with their decisions.
pub fn decided_table(recent: &Value, now: Millis) -> Markup {
    html! {
        table #decided {
            tr { th { "Approval" } th { "Status" } th { "Decisions" } th { "Invocation" } }
            @for a in items(recent).iter().filter(|a| text(a, "status") != "pending") {
                tr {
                    td { (text(a, "title")) br; span.muted { (text(a, "id")) } }
                    td { span.tag { (text(a, "status")) } }
                    td { (decisions(a, now)) }
                    td { (invocation_link(a)) }
                }
            }
        }
    }
}

async fn list(
    state: &AppState,
    op: &Operator,
    filter: &str,
    limit: u32,
) -> Result<Value, ApiError> {
    let q = format!(
        "{filter}{}limit={limit}",
        if filter.is_empty() { "" } else { "&" }
    );
    full(approvals::list(State(state.clone()), op.caller.clone(), query(&q)?).await).await
}

fn pending_row(a: &Value, op: &Operator, mode: ConsoleMode, now: Millis) -> Markup {
    let id = text(a, "id");
    let payload = a.get("payload").cloned().unwrap_or(Value::Null);
    let input = payload.get("input").cloned().unwrap_or(payload.clone());
    let approved = approvals_given(a);
    let required = a
        .get("requiredApprovals")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    html! {
        tr.approval data-approval=(id) {
            td {
                strong { (payload.get("action").and_then(Value::as_str).unwrap_or(text(a, "title"))) }
                @if let Some(d) = a.get("description").and_then(Value::as_str) { br; span.description { (d) } }
                br; span.muted { (id) }
                br; (invocation_link(a))
            }
            td {
                (text(a, "requestedBy"))
                @if text(a, "requestedBy") == op.caller.key.id.as_str() {
                    br; span.muted { "(this key: another key must decide)" }
                }
            }
            td { pre { (json_text(&input)) } }
            td { (layout::when(text(a, "createdAt"), now)) }
            td { @match a.get("expiresAt").and_then(Value::as_str) { Some(at) => time datetime=(at) title=(format!("{at} (UTC)")) { (at) }, None => span.muted { "never" } } }
            td.progress { (approved) " of " (required) (decisions(a, now)) }
            td {
                @if mode.writable() {
                    form.inline method="post" action={ "/console/approvals/" (id) "/approve" } {
                        (csrf_field(op))
                        input type="text" name="note" placeholder="note (optional)";
                        " " button type="submit" { "Approve" }
                    }
                    form.inline method="post" action={ "/console/approvals/" (id) "/deny" } {
                        (csrf_field(op))
                        input type="text" name="note" placeholder="why (shown to the agent)";
                        " " button.danger type="submit" { "Deny" }
                    }
                } @else { span.muted { "read-only" } }
            }
        }
    }
}

fn approvals_given(a: &Value) -> usize {
    a.get("decisions").and_then(Value::as_array).map_or(0, |d| {
        d.iter()
            .filter(|d| text(d, "decision") == "approve")
            .count()
    })
}

fn decisions(a: &Value, now: Millis) -> Markup {
    html! {
        @for d in a.get("decisions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            div.decision {
                span.tag { (text(d, "decision")) } " by " (text(d, "keyId")) " " (layout::when(text(d, "at"), now))
                @if let Some(note) = d.get("note").and_then(Value::as_str) { ": " span.note { (note) } }
            }
        }
    }
}

fn invocation_link(a: &Value) -> Markup {
    html! {
        @if let Some(inv) = a.get("invocationId").and_then(Value::as_str) {
            a href={ "/console/invocations/" (inv) } { "timeline" }
        }
    }
}

pub async fn approve(
    state: State<AppState>,
    mode: Extension<ConsoleMode>,
    op: Operator,
    id: Path<String>,
    form: Form<HashMap<String, String>>,
) -> Response {
    decide(state, mode, op, id, form, true).await
}

pub async fn deny(
    state: State<AppState>,
    mode: Extension<ConsoleMode>,
    op: Operator,
    id: Path<String>,
    form: Form<HashMap<String, String>>,
) -> Response {
    decide(state, mode, op, id, form, false).await
}

async fn decide(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
    Form(form): Form<HashMap<String, String>>,
    approve: bool,
) -> Response {
    let refused = |e| overview::render(&state, mode, &op, Notice::refused(e));
    let decide = match decision(&op, &id, &form, approve) {
        Ok(decide) => decide,
        Err(e) => return refused(e).await,
    };
    let decided = match app::approvals::decide(&state, &op.caller, decide).await {
        Ok(decided) => decided,
        Err(e) => return refused(e).await,
    };
    if let Some(reason) = decided.unchanged {
        return refused(reason.error()).await;
    }
    // The overview then reads the invocation the decision released (or ended) and says what
    // its dispatch did.
    let done = if approve { "approved" } else { "denied" };
    match &decided.invocation {
        Some(invocation) => layout::see_other(&format!(
            "/console/?done={done}&invocation={}",
            invocation.id
        )),
        None => layout::see_other(&format!("/console/?done={done}")),
    }
}

/// The decision the form asks for. The operator must be able to read approvals as well as
/// decide them, as on the page the form is on.
fn decision(
    op: &Operator,
    id: &str,
    form: &HashMap<String, String>,
    approve: bool,
) -> Result<app::approvals::Decide, ApiError> {
    op.caller.require(scopes::APPROVALS_READ)?;
    let approval = ApprovalId::parse(id).map_err(|_| ApiError::not_found("approval"))?;
    Ok(app::approvals::Decide {
        approval,
        decision: if approve {
            Decision::Approve
        } else {
            Decision::Deny
        },
        note: optional(form, "note").map(str::to_string),
    })
}
