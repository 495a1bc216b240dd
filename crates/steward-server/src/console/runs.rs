//! Runs: the list (status, name, start time, paging) and one run with its span tree and the
//! invocations it made. Read from the store as `GET /api/v2/runs` reads them, with the same
//! scope (`runs:read`); the tree is built from the spans' outlines (ids, parents, names, no
//! content), so a run at its span bound is a few hundred kilobytes to read.

use super::filters::{Filters, PAGE_ITEMS};
use super::layout::{self, text};
use super::session::Operator;
use super::ConsoleMode;
use crate::api::views;
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use std::collections::{HashMap, HashSet};
use steward_core::{scopes, RunId};
use steward_store::{RunFilter, RunRecord, RunStatus, SpanOutline};

const PATH: &str = "/console/runs";

/// A run's statuses, as the API names them.
const STATUSES: [&str; 4] = ["running", "succeeded", "failed", "cancelled"];

/// How many spans of one run the tree shows; a run holds at most 10,000, and the rest are a
/// click away in the API (`GET /api/v2/runs/{id}/spans`).
const SPANS_SHOWN_MAX: usize = 2_000;

/// How deep the tree indents: deeper spans are shown at this depth (with their real depth).
const INDENT_DEPTH_MAX: usize = 30;

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
    let runs = match read_runs(&state, &op, &filters).await {
        Ok(runs) => runs,
        Err(e) => return layout::error_page(&e),
    };
    let now = state.clock.now();
    let offset = filters.offset;
    let next = (runs.len() == PAGE_ITEMS as usize).then(|| filters.link(PATH, offset + PAGE_ITEMS));
    let previous = (offset > 0).then(|| filters.link(PATH, offset.saturating_sub(PAGE_ITEMS)));
    let body = html! {
        (filters.form_without_operation_key(PATH, &STATUSES, "Name contains"))
        table #runs {
            tr { th { "Run" } th { "Name" } th { "Agent" } th { "Status" } th { "Started" } th { "Ended" } }
            @for r in &runs {
                tr.run data-run=(r.id.as_str()) {
                    td { a href={ "/console/runs/" (r.id.as_str()) } { (r.id.as_str()) } }
                    td { (r.name.as_deref().unwrap_or("")) }
                    td { (r.agent_id.as_deref().unwrap_or("")) }
                    td { span.tag { (r.status.as_str()) } }
                    td { (layout::when_ms(r.started_at, now)) }
                    td { @if let Some(at) = r.ended_at { (layout::when_ms(at, now)) } }
                }
            }
        }
        p.pager {
            @if let Some(previous) = previous { a #previous-page href=(previous) { "Newer" } }
            @if let Some(next) = next { a #next-page href=(next) { "Older" } }
        }
    };
    layout::html(StatusCode::OK, layout::live_page("Runs", &op, mode, body))
}

async fn read_runs(
    state: &AppState,
    op: &Operator,
    filters: &Filters,
) -> Result<Vec<RunRecord>, ApiError> {
    op.caller.require(scopes::RUNS_READ)?;
    let filter = RunFilter {
        search: filters.action.clone(),
        status: filters.status.as_deref().and_then(RunStatus::parse),
        agent_id: None,
        user_id: None,
        started_after: filters.from,
        started_before: filters.to,
        limit: PAGE_ITEMS,
        offset: filters.offset,
    };
    Ok(state.store.list_runs(&op.caller.env.id, &filter).await?)
}

pub async fn page(
    State(state): State<AppState>,
    Extension(mode): Extension<ConsoleMode>,
    op: Operator,
    Path(id): Path<String>,
) -> Response {
    let read = async {
        op.caller.require(scopes::RUNS_READ)?;
        let id = RunId::parse(&id).map_err(|_| ApiError::not_found("run"))?;
        let env = &op.caller.env.id;
        let run = state
            .store
            .run(env, &id)
            .await?
            .ok_or_else(|| ApiError::not_found("run"))?;
        let outlines = state.store.span_outlines(env, &id).await?;
        let (invocations, _) = state.store.run_timeline(env, &id).await?;
        Ok::<_, ApiError>((run, outlines, invocations))
    };
    let (run, outlines, invocations) = match read.await {
        Ok(read) => read,
        Err(e) => return layout::error_page(&e),
    };
    let now = state.clock.now();
    let tree = tree(&outlines);
    let body = html! {
        p #run-state {
            "Status " span.tag { (run.status.as_str()) }
            @if let Some(name) = &run.name { " · " strong { (name) } }
            @if let Some(agent) = &run.agent_id { " · agent " (agent) }
            " · started " (layout::when_ms(run.started_at, now))
            @if let Some(at) = run.ended_at { " · ended " (layout::when_ms(at, now)) }
            " · trace " code { (run.trace_id) }
        }
        h2 { "Spans (" (outlines.len()) ")" }
        @if tree.is_empty() { p.muted { "No span was reported for this run." } }
        ul #spans .spans.root {
            @for (depth, span) in tree.iter().take(SPANS_SHOWN_MAX) { (span_item(*depth, span)) }
        }
        @if tree.len() > SPANS_SHOWN_MAX {
            p.muted { (tree.len() - SPANS_SHOWN_MAX) " more spans: " code { "GET /api/v2/runs/" (run.id.as_str()) "/spans" } }
        }
        h2 { "Invocations" }
        table #run-invocations {
            tr { th { "Invocation" } th { "Action" } th { "Status" } th { "Created" } }
            @for i in &invocations {
                @let v = serde_json::to_value(views::listed_invocation(i)).unwrap_or_default();
                tr {
                    td { a href={ "/console/invocations/" (text(&v, "id")) } { (text(&v, "id")) } }
                    td { (text(&v, "action")) }
                    td { span.tag { (text(&v, "status")) } }
                    td { (layout::when(text(&v, "createdAt"), now)) }
                }
            }
        }
    };
    let title = format!("Run {}", run.id.as_str());
    layout::html(StatusCode::OK, layout::page(&title, Some(&op), mode, body))
}

fn span_item(depth: usize, span: &SpanOutline) -> Markup {
    let indent = format!(
        "margin-left:{}rem",
        depth.min(INDENT_DEPTH_MAX) as f32 * 1.2
    );
    html! {
        li.span data-span=(span.span_id) data-depth=(depth) style=(indent) {
            @if depth > 0 { span.muted { "└ " } }
            strong { (span.name.as_deref().unwrap_or("(unnamed)")) }
            @if let Some(kind) = &span.kind { " " span.tag { (kind) } }
            @if let Some(status) = &span.status { " " (status) }
            " " span.muted { (span.span_id) " · " (span.bytes) " bytes" }
        }
    }
}

/// The spans in tree order (each after its parent, children in ingest order) with their depth.
/// A span whose parent is not in the run is a root; spans caught in a parent cycle (which no
/// root reaches) are shown as roots too, once each.
fn tree(outlines: &[SpanOutline]) -> Vec<(usize, &SpanOutline)> {
    let ids: HashSet<&str> = outlines.iter().map(|s| s.span_id.as_str()).collect();
    let mut children: HashMap<&str, Vec<&SpanOutline>> = HashMap::new();
    let mut roots = Vec::new();
    for span in outlines {
        match span.parent_span_id.as_deref() {
            Some(parent) if ids.contains(parent) && parent != span.span_id => {
                children.entry(parent).or_default().push(span)
            }
            _ => roots.push(span),
        }
    }
    let mut out = Vec::with_capacity(outlines.len());
    let mut seen: HashSet<&str> = HashSet::new();
    // The roots first, then whatever no root reached, each in ingest order.
    for start in roots.into_iter().chain(outlines.iter()) {
        let mut stack = vec![(0usize, start)];
        while let Some((depth, span)) = stack.pop() {
            if !seen.insert(span.span_id.as_str()) {
                continue;
            }
            out.push((depth, span));
            if let Some(kids) = children.get(span.span_id.as_str()) {
                stack.extend(kids.iter().rev().map(|kid| (depth + 1, *kid)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: &str, parent: Option<&str>) -> SpanOutline {
        SpanOutline {
            seq: 0,
            span_id: id.to_string(),
            parent_span_id: parent.map(str::to_string),
            name: Some(id.to_string()),
            kind: None,
            status: None,
            bytes: 10,
        }
    }

    fn shape(outlines: &[SpanOutline]) -> Vec<(usize, String)> {
        tree(outlines)
            .into_iter()
            .map(|(d, s)| (d, s.span_id.clone()))
            .collect()
    }

    #[test]
    fn children_follow_their_parent_in_ingest_order_and_orphans_are_roots() {
        let spans = [
            span("b", Some("a")),
            span("a", None),
            span("c", Some("a")),
            span("d", Some("b")),
            span("orphan", Some("missing")),
        ];
        assert_eq!(
            shape(&spans),
            vec![
                (0, "a".to_string()),
                (1, "b".to_string()),
                (2, "d".to_string()),
                (1, "c".to_string()),
                (0, "orphan".to_string()),
            ]
        );
    }

    #[test]
    fn a_parent_cycle_or_a_self_parent_shows_every_span_once() {
        let spans = [
            span("x", Some("y")),
            span("y", Some("x")),
            span("z", Some("z")),
        ];
        let shown = shape(&spans);
        assert_eq!(shown.len(), 3, "{shown:?}");
        let ids: HashSet<String> = shown.into_iter().map(|(_, id)| id).collect();
        assert_eq!(ids.len(), 3);
    }
}
