//! The approvals inbox, shown on the overview: pending approvals with what they would run, who
//! asked, how long ago, when they expire and how many approvals they still need, each with its
//! approve and deny forms (`decide.rs`), and the recent decisions.

use super::bridge::items;
use super::layout::{self, csrf_field, json_text, text};
use super::records;
use super::session::Operator;
use super::ConsoleMode;
use crate::api::views::KeyNames;
use crate::app::reads::{self, ApprovalFilters, PageRequest};
use crate::error::ApiError;
use crate::state::AppState;
use maud::{html, Markup};
use serde_json::Value;
use steward_core::Millis;

/// How many pending approvals the inbox shows: the API's largest page.
const INBOX_APPROVALS_MAX: u32 = 200;
/// How many recent approvals (any status) are read to show the decided ones.
const RECENT_APPROVALS_MAX: u32 = 30;

/// A key as a page shows it: its name (from the environment's keys, the API views' one read),
/// then its id.
fn show_key(names: &KeyNames, id: &str) -> Markup {
    html! {
        @match names.name_of(id) {
            Some(name) => { (name) " " span.muted { "(" (id) ")" } },
            None => (id),
        }
    }
}

/// The pending approvals (at most [`INBOX_APPROVALS_MAX`]) as the API lists them, with the
/// pagination that says how many there are in all.
pub async fn pending(state: &AppState, op: &Operator) -> Result<Value, ApiError> {
    let filters = ApprovalFilters {
        status: Some("pending".to_string()),
        ..ApprovalFilters::default()
    };
    list(state, op, filters, INBOX_APPROVALS_MAX).await
}

/// The most recent approvals of any status, for the decided ones.
pub async fn recent(state: &AppState, op: &Operator) -> Result<Value, ApiError> {
    list(state, op, ApprovalFilters::default(), RECENT_APPROVALS_MAX).await
}

/// The inbox: the pending approvals with their approve and deny forms.
pub fn pending_table(
    pending: &Value,
    op: &Operator,
    mode: ConsoleMode,
    now: Millis,
    names: &KeyNames,
) -> Markup {
    html! {
        @if items(pending).is_empty() {
            p.muted { "No approval is waiting." }
        } @else {
            table #inbox {
                tr { th { "" } th { "Action" } th { "Requested by" } th { "Input" } th { "Age" } th { "Expires" } th { "Approvals" } th { "Decide" } }
                @for a in items(pending) { (pending_row(a, op, mode, now, names)) }
            }
            @if mode.writable() {
                // The selected approvals, decided one by one with one note (`decide::batch`).
                // The checkboxes in the rows belong to this form (`form="batch"`): forms do
                // not nest, and each row keeps its own approve and deny forms.
                form #batch method="post" action="/console/approvals/batch" {
                    (csrf_field(op))
                    "Selected: "
                    input type="text" name="note" placeholder="one note for each (optional)";
                    " " button type="submit" name="decision" value="approve" { "Approve selected" }
                    " " button.danger type="submit" name="decision" value="deny" { "Deny selected" }
                }
            }
        }
    }
}

/// The approvals of `recent` that are decided, with their decisions.
pub fn decided_table(recent: &Value, now: Millis, names: &KeyNames) -> Markup {
    html! {
        table #decided {
            tr { th { "Approval" } th { "Status" } th { "Decisions" } th { "Invocation" } }
            @for a in items(recent).iter().filter(|a| text(a, "status") != "pending") {
                tr {
                    td { (text(a, "title")) br; span.muted { (text(a, "id")) } }
                    td { span.tag { (text(a, "status")) } }
                    td { (decisions(a, now, names)) }
                    td { (invocation_link(a)) }
                }
            }
        }
    }
}

async fn list(
    state: &AppState,
    op: &Operator,
    filters: ApprovalFilters,
    limit: u32,
) -> Result<Value, ApiError> {
    let filters = ApprovalFilters {
        page: PageRequest {
            limit: Some(limit),
            ..filters.page
        },
        ..filters
    };
    let found = reads::list_approvals(state, &op.caller, &filters).await?;
    let names = KeyNames::of(state, &op.caller.env.id).await?;
    records::approvals(&found, &names)
}

fn pending_row(
    a: &Value,
    op: &Operator,
    mode: ConsoleMode,
    now: Millis,
    names: &KeyNames,
) -> Markup {
    let id = text(a, "id");
    let payload = a.get("payload").cloned().unwrap_or(Value::Null);
    let input = payload.get("input").cloned().unwrap_or(payload.clone());
    let approved = approvals_given(a);
    let required = a
        .get("requiredApprovals")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    html! {
        tr.approval id=(id) data-approval=(id) {
            td {
                @if mode.writable() {
                    input.select type="checkbox" name="ids" value=(id) form="batch" title="select for a batch decision";
                }
            }
            td {
                strong { (payload.get("action").and_then(Value::as_str).unwrap_or(text(a, "title"))) }
                @if let Some(d) = a.get("description").and_then(Value::as_str) { br; span.description { (d) } }
                br; span.muted { (id) }
                br; (invocation_link(a))
            }
            td {
                (show_key(names, text(a, "requestedBy")))
                @if text(a, "requestedBy") == op.caller.key.id.as_str() {
                    br; span.muted { "(this key: another key must decide)" }
                }
            }
            td {
                pre { (json_text(&input)) }
                @if let Some(edit) = a.get("edit") {
                    div.edited {
                        span.tag { "edited" } " by " (show_key(names, text(edit, "editedBy")))
                        @if text(edit, "editedBy") == op.caller.key.id.as_str() {
                            br; span.muted { "(this key edited it: another key must approve)" }
                        }
                        @if let Some(original) = payload.get("originalInput") {
                            br; span.muted { "as sent:" } pre.original { (json_text(original)) }
                        }
                    }
                }
            }
            td { (layout::when(text(a, "createdAt"), now)) }
            td { @match a.get("expiresAt").and_then(Value::as_str) { Some(at) => time datetime=(at) title=(format!("{at} (UTC)")) { (at) }, None => span.muted { "never" } } }
            td.progress { (approved) " of " (required) (decisions(a, now, names)) }
            td {
                @if mode.writable() {
                    form.inline method="post" action={ "/console/approvals/" (id) "/approve" } {
                        (csrf_field(op))
                        @if let Some(seen) = a.get("inputFingerprint").and_then(Value::as_str) {
                            input type="hidden" name="inputFingerprint" value=(seen);
                        }
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

fn decisions(a: &Value, now: Millis, names: &KeyNames) -> Markup {
    html! {
        @for d in a.get("decisions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            div.decision {
                span.tag { (text(d, "decision")) } " by " (show_key(names, text(d, "keyId"))) " " (layout::when(text(d, "at"), now))
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
