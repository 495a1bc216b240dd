//! An invocation's timeline: the intent, the policy decision, the approval and its decisions,
//! every attempt with its times and outcome, the evidence, and the audit events about the
//! invocation, its effect and its approval, in one order by time. Each entry is read through
//! the application layer's reads (`app/reads.rs`) and rendered as the API's views
//! (`GET /api/v2/actions/invocations/{id}`, `/actions/effects/{id}`, `/approvals/{id}`), so the
//! timeline says what the API says.

use super::audit;
use super::bridge::items;
use super::layout::{self, json_text, text};
use super::records;
use super::session::Operator;
use super::ConsoleMode;
use crate::api::views::KeyNames;
use crate::app::reads;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::html;
use serde_json::{json, Value};
use steward_core::Millis;

/// How many audit events one timeline shows at most (its newest).
const TIMELINE_AUDIT_EVENTS_MAX: usize = 200;

/// One line of the timeline.
struct Entry {
    at: String,
    what: &'static str,
    summary: String,
    detail: Option<Value>,
}

pub async fn page(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
) -> Response {
    let read = reads::invocation(&state, &op.caller, &id).await;
    let invocation = match read.and_then(|found| records::invocation(&found)) {
        Ok(v) => v,
        Err(e) => return layout::error_page(&e),
    };
    let mut entries = vec![Entry {
        at: text(&invocation, "createdAt").to_string(),
        what: "intent",
        summary: format!(
            "invocation of {} recorded (operation key {})",
            text(&invocation, "action"),
            invocation
                .get("operationKey")
                .and_then(Value::as_str)
                .unwrap_or("none")
        ),
        detail: invocation.get("input").cloned(),
    }];
    if let Some(decision) = invocation.get("decision").filter(|d| !d.is_null()) {
        entries.push(Entry {
            at: text(&invocation, "createdAt").to_string(),
            what: "policy",
            summary: format!(
                "policy decision: {} ({}) by policy {} version {}: {}",
                text(decision, "effect"),
                text(decision, "code"),
                decision
                    .pointer("/policy/name")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                decision
                    .pointer("/policy/version")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                text(decision, "explanation")
            ),
            detail: Some(decision.clone()),
        });
    }
    // Shadow (log-only) policies: what each would have decided; the call was not affected.
    for shadow in invocation
        .get("shadowDecisions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        entries.push(Entry {
            at: text(&invocation, "createdAt").to_string(),
            what: "shadow",
            summary: format!(
                "shadow policy {} version {} would have decided {} (log-only: not applied)",
                text(shadow, "policyName"),
                shadow.get("version").and_then(Value::as_u64).unwrap_or(0),
                text(shadow, "decision"),
            ),
            detail: Some(shadow.clone()),
        });
    }
    if let Some(edited) = invocation.get("editedInput") {
        entries.push(Entry {
            at: text(&invocation, "editedAt").to_string(),
            what: "edit",
            summary: format!(
                "input edited by {} before approval; the call runs with the edit",
                text(&invocation, "editedBy")
            ),
            detail: Some(
                json!({"editedInput": edited, "inputEdits": invocation.get("inputEdits")}),
            ),
        });
    }
    let names = match KeyNames::of(&state, &op.caller.env.id).await {
        Ok(names) => names,
        Err(e) => return layout::error_page(&e),
    };
    let mut subjects = vec![id.clone()];
    let mut effect = Value::Null;
    if let Some(effect_id) = invocation.get("effectId").and_then(Value::as_str) {
        subjects.push(effect_id.to_string());
        let read = reads::effect(&state, &op.caller, effect_id).await;
        match read.and_then(|found| records::effect(&found, &names)) {
            Ok(v) => effect = v,
            Err(e) => return layout::error_page(&e),
        }
    }
    if let Some(approval_id) = invocation.get("approvalId").and_then(Value::as_str) {
        subjects.push(approval_id.to_string());
        // No wait: the approval as it stands.
        let read = reads::approval(&state, &op.caller, approval_id, 0).await;
        match read.and_then(|found| records::approval(&found, &names)) {
            Ok(a) => approval_entries(&a, &mut entries),
            Err(e) => return layout::error_page(&e),
        }
    }
    effect_entries(&effect, &mut entries);
    let scan = audit::scan(
        &state,
        op.caller.env.id.as_str(),
        TIMELINE_AUDIT_EVENTS_MAX,
        |e| subjects.iter().any(|s| s == &e.subject),
    )
    .await;
    let scan = match scan {
        Ok(scan) => scan,
        Err(e) => return layout::error_page(&e),
    };
    for event in &scan.events {
        entries.push(Entry {
            at: Millis(event.at).to_rfc3339(),
            what: "audit",
            summary: format!(
                "{} on {} by {}",
                event.kind,
                event.subject,
                event.actor.as_deref().unwrap_or("steward")
            ),
            detail: event.after.clone(),
        });
    }
    // One order: by time, and among equal times in the order they were added (the intent
    // first, then what followed from it).
    entries.sort_by(|a, b| a.at.cmp(&b.at));
    let body = html! {
        p {
            "Status: " span.tag #status { (text(&invocation, "status")) }
            @if let Some(outcome) = invocation.get("outcome").and_then(Value::as_str) { " · outcome " (outcome) }
            @if let Some(grade) = invocation.get("grade").and_then(Value::as_str) { " · grade " (grade) }
        }
        table #timeline {
            tr { th { "Time" } th { "What" } th { "Summary" } th { "Detail" } }
            @for e in &entries {
                tr data-kind=(e.what) {
                    td { (e.at) }
                    td { span.tag { (e.what) } }
                    td { (e.summary) }
                    td { @if let Some(d) = &e.detail { pre { (json_text(d)) } } }
                }
            }
        }
    };
    let title = format!("Timeline of {id}");
    layout::html(StatusCode::OK, layout::page(&title, Some(&op), mode, body))
}

fn approval_entries(a: &Value, entries: &mut Vec<Entry>) {
    entries.push(Entry {
        at: text(a, "createdAt").to_string(),
        what: "approval",
        summary: format!(
            "approval {} requested by {}: {} of them needed",
            text(a, "id"),
            text(a, "requestedBy"),
            a.get("requiredApprovals")
                .and_then(Value::as_u64)
                .unwrap_or(1)
        ),
        detail: None,
    });
    for d in items(a.get("decisions").unwrap_or(&Value::Null)) {
        entries.push(Entry {
            at: text(d, "at").to_string(),
            what: "approval",
            summary: format!("{} by {}", text(d, "decision"), text(d, "keyId")),
            detail: d
                .get("note")
                .filter(|n| !n.is_null())
                .map(|n| json!({"note": n})),
        });
    }
    if let Some(at) = a.get("decidedAt").and_then(Value::as_str) {
        entries.push(Entry {
            at: at.to_string(),
            what: "approval",
            summary: format!("approval {}", text(a, "status")),
            detail: None,
        });
    }
}

fn effect_entries(effect: &Value, entries: &mut Vec<Entry>) {
    for attempt in items(effect.get("attempts").unwrap_or(&Value::Null)) {
        let n = attempt.get("number").and_then(Value::as_u64).unwrap_or(0);
        entries.push(Entry {
            at: text(attempt, "startedAt").to_string(),
            what: "attempt",
            summary: format!(
                "attempt {n} started (deadline {})",
                text(attempt, "deadlineAt")
            ),
            detail: None,
        });
        if let Some(at) = attempt.get("finishedAt").and_then(Value::as_str) {
            entries.push(Entry {
                at: at.to_string(),
                what: "attempt",
                summary: format!(
                    "attempt {n} finished: {} (HTTP {})",
                    text(attempt, "status"),
                    attempt
                        .get("responseStatus")
                        .and_then(Value::as_u64)
                        .map_or("none".to_string(), |s| s.to_string())
                ),
                detail: attempt.get("error").filter(|e| !e.is_null()).cloned(),
            });
        }
    }
    for evidence in items(effect.get("evidence").unwrap_or(&Value::Null)) {
        entries.push(Entry {
            at: text(evidence, "at").to_string(),
            what: "evidence",
            summary: format!(
                "{} ({}): {}",
                text(evidence, "kind"),
                text(evidence, "source"),
                text(evidence, "message")
            ),
            detail: evidence.get("data").filter(|d| !d.is_null()).cloned(),
        });
    }
}
