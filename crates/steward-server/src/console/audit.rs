//! Reading the audit log for the console: the whole log verified as `steward audit verify`
//! does (the sealed chain and each unsealed event's own hash), and the environment's events
//! kept (all, or those about some subjects). The audit view pages through them newest first,
//! filtered by event type, time range or operation key, each event's JSON folded away.

use super::filters::{Filters, PAGE_ITEMS};
use super::invocations::by_operation_key;
use super::layout::{self, folded_json};
use super::session::Operator;
use super::ConsoleMode;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::html;
use std::collections::HashMap;
use steward_core::{scopes, Millis};
use steward_store::{verify_log, AuditEvent, ChainError, LogReport};

/// Events read per page while scanning, as `steward audit verify` reads them.
const AUDIT_PAGE_EVENTS: u32 = 5_000;

/// How far back the audit view pages, in events: every view scans (and verifies) the whole
/// log and keeps the newest `offset + PAGE_ITEMS` matching events in memory, so the offset is
/// bounded; a time range or a filter reaches older events.
pub const AUDIT_OFFSET_MAX: u32 = 10_000;

const PATH: &str = "/console/audit";

/// What a scan found.
pub struct Scan {
    /// The sealed chain's length and head and the unsealed events, or where the log broke.
    pub verified: Result<LogReport, ChainError>,
    /// The caller's environment's matching events, newest last (sealed in chain order, then
    /// unsealed in insertion order), at most `keep` of them.
    pub events: Vec<AuditEvent>,
    /// How many of the environment's events matched, kept or not.
    pub matched: u64,
}

/// Verifies the whole log and keeps the last `keep` events of `env` that `wanted` accepts.
/// Other environments' events are verified (the chain is one line) but never kept.
pub async fn scan(
    state: &AppState,
    env: &str,
    keep: usize,
    wanted: impl Fn(&AuditEvent) -> bool,
) -> Result<Scan, ApiError> {
    let mut events = std::collections::VecDeque::new();
    let mut matched = 0;
    let verified = verify_log(state.store.as_ref(), AUDIT_PAGE_EVENTS, |event| {
        if event.env_id.as_deref() == Some(env) && wanted(event) {
            matched += 1;
            if events.len() == keep {
                events.pop_front();
            }
            if keep > 0 {
                events.push_back(event.clone());
            }
        }
    })
    .await?;
    Ok(Scan {
        verified,
        events: events.into(),
        matched,
    })
}

/// The subjects an operation key names: each invocation recorded under it, its effect and its
/// approval.
async fn subjects_of(
    state: &AppState,
    op: &Operator,
    filters: &Filters,
) -> Result<Option<Vec<String>>, ApiError> {
    let Some(key) = &filters.operation_key else {
        return Ok(None);
    };
    // The `action` field of the audit view filters event types, not actions.
    let found = by_operation_key(state, op, None, key).await?;
    let mut subjects = Vec::new();
    for i in found {
        subjects.push(i.id.to_string());
        subjects.push(i.effect_id.to_string());
        subjects.extend(i.approval_id);
    }
    Ok(Some(subjects))
}

/// `GET /console/audit`: the whole log verified, and a page of the environment's events.
pub async fn page(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    if let Err(e) = op.caller.require(scopes::AUDIT_READ) {
        return layout::error_page(&e);
    }
    let filters = match Filters::parse(&params, &[], &[]) {
        Ok(f) if f.offset > AUDIT_OFFSET_MAX => {
            return layout::error_page(&ApiError::validation(
                "offset",
                format!("the audit view pages back at most {AUDIT_OFFSET_MAX} events; filter by time to go further"),
            ))
        }
        Ok(f) => f,
        Err(e) => return layout::error_page(&e),
    };
    let subjects = match subjects_of(&state, &op, &filters).await {
        Ok(s) => s,
        Err(e) => return layout::error_page(&e),
    };
    let wanted = |e: &AuditEvent| {
        filters
            .action
            .as_deref()
            .is_none_or(|k| e.kind.starts_with(k))
            && filters.from.is_none_or(|f| e.at >= f.0)
            && filters.to.is_none_or(|t| e.at <= t.0)
            && subjects.as_ref().is_none_or(|s| s.contains(&e.subject))
    };
    let keep = (filters.offset + PAGE_ITEMS) as usize;
    let scan = match scan(&state, op.caller.env.id.as_str(), keep, wanted).await {
        Ok(scan) => scan,
        Err(e) => return layout::error_page(&e),
    };
    let shown: Vec<&AuditEvent> = scan
        .events
        .iter()
        .rev()
        .skip(filters.offset as usize)
        .take(PAGE_ITEMS as usize)
        .collect();
    let now = state.clock.now();
    let body = html! {
        @match &scan.verified {
            Ok(report) => div.banner.ok #chain role="status" {
                "Audit chain intact: " (report.sealed) " sealed events verified, head " code { (report.head) }
                @if report.unsealed > 0 {
                    "; " (report.unsealed) " newer events verified by their own hashes, not sealed yet"
                }
            },
            Err(broken) => div.banner.error #chain role="alert" { "Audit chain BROKEN: " (broken.to_string()) },
        }
        (filters.form(PATH, &[], &[], "Event type (or its start)"))
        table #audit {
            tr { th { "#" } th { "Time" } th { "Event" } th { "Subject" } th { "Actor" } th { "After" } }
            @for e in &shown {
                tr.event {
                    td { @match e.seq() { Some(seq) => (seq), None => span.tag title="not sealed into the chain yet" { "unsealed" } } }
                    td { (layout::when_ms(Millis(e.at), now)) }
                    td { (e.kind) }
                    td { (e.subject) }
                    td { (e.actor.as_deref().unwrap_or("steward")) }
                    td { @if let Some(after) = &e.after { (folded_json(after)) } }
                }
            }
        }
        (super::filters::pager(&filters, PATH, shown.len(), scan.matched, AUDIT_OFFSET_MAX))
    };
    layout::html(
        StatusCode::OK,
        layout::page("Audit log", Some(&op), mode, body),
    )
}
