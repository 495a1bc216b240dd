//! `runs`: an agent's trace as its runtime reports it. A run (`run_...`) has a status, an input
//! and an output, a tree of spans (`parentSpanId`) and feedback; the invocations and approvals
//! that name it (`runId`) join its timeline. `GET /runs/{id}/export` answers the run as an
//! OTLP/JSON trace, and `POST /runs/import` makes a run of one. Reading needs `runs:read`;
//! every change needs `runs:write`. A run's user and tags are what approval policies'
//! `matchUserId` and `matchTags` see when an invocation names the run (`gate.rs`).

pub(crate) mod parse;
mod trace;

use super::body;
use super::bounded;
use super::idempotent;
use super::openapi as doc;
use super::query::Query;
use super::views;
use crate::auth::Caller;
use crate::envelope::{ok, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use crate::error::{codes, ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use steward_core::{scopes, FeedbackId, Millis, RunId};
use steward_store::{
    Actor, FeedbackRecord, RunApproval, RunEndRefusal, RunFilter, RunRecord, RunStatus,
    SpanOutline, SpanRecord, SpansIngested,
};

/// A fresh run id.
fn fresh_id() -> RunId {
    RunId::from_unique(&crate::clock::unique())
}

/// A run id from a path or a body; one that cannot be ours names no run.
pub(crate) fn parse_id(id: &str) -> ApiResult<RunId> {
    RunId::parse(id).map_err(|_| ApiError::not_found("run"))
}

/// The W3C trace id of a run started here: the first 16 bytes of SHA-256 over its id, in hex.
/// Derived, not drawn, so the same run always maps to the same trace, and stored on the run so
/// an imported run keeps the trace id it came with.
fn derived_trace_id(id: &RunId) -> String {
    hex::encode(&Sha256::digest(id.as_str().as_bytes())[..16])
}

pub(crate) fn view(r: &RunRecord) -> Value {
    let b = &r.body;
    json!({
        "id": r.id,
        "name": r.name,
        "status": r.status.as_str(),
        "agentId": r.agent_id,
        "agentVersion": b.agent_version,
        "userId": r.user_id,
        "application": b.application,
        "tags": b.tags,
        "input": b.input,
        "output": b.output,
        "error": b.error,
        "tokens": b.tokens,
        "cost": b.cost,
        "metadata": b.metadata,
        "traceId": r.trace_id,
        "startedAt": r.started_at.to_rfc3339(),
        "endedAt": r.ended_at.map(|t| t.to_rfc3339()),
        "updatedAt": r.updated_at.to_rfc3339(),
    })
}

fn span_view(s: &SpanRecord) -> Value {
    let mut v = s.document.clone();
    v["runId"] = json!(s.run_id);
    v["ingestedAt"] = json!(s.created_at.to_rfc3339());
    v["updatedAt"] = json!(s.updated_at.to_rfc3339());
    v
}

/// The path that reads one span of a run alone and whole.
fn span_href(run: &RunId, span: &str) -> String {
    let span: String = form_urlencoded::byte_serialize(span.as_bytes()).collect();
    format!("/api/v2/runs/{run}/spans/{span}")
}

/// A span as a page of spans shows it: its large fields elided, each a link to the span alone.
fn listed_span_view(s: &SpanRecord) -> Value {
    let mut v = span_view(s);
    bounded::mark_elided(&mut v, &span_href(&s.run_id, &s.span_id));
    v
}

/// The spans as a forest of outlines (id, parent, name, type, status, size and the link to
/// read the span whole), each with its `children`; roots first in ingest order. A span whose
/// parent is not (yet) in the run is a root. Built from a map of parent to children in
/// O(n log n), never a scan per node, and iteratively, so no run nests deep enough to
/// overflow a stack.
fn tree(run: &RunId, spans: &[SpanOutline]) -> Vec<Value> {
    use std::collections::{BTreeMap, HashSet};
    let known: HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut children: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut roots = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        match s.parent_span_id.as_deref() {
            Some(p) if known.contains(p) => children.entry(p).or_default().push(i),
            _ => roots.push(i),
        }
    }
    // Ids are unique within a run and a span is never its own parent, but a client can still
    // send a cycle (a -> b -> a): its spans are no one's descendants and show in no tree;
    // `spans` lists them. Depth also stops at SPAN_TREE_DEPTH_MAX.
    fn node(
        run: &RunId,
        spans: &[SpanOutline],
        children: &BTreeMap<&str, Vec<usize>>,
        at: usize,
        depth: usize,
    ) -> Value {
        let s = &spans[at];
        let kids: Vec<Value> = if depth < SPAN_TREE_DEPTH_MAX {
            children
                .get(s.span_id.as_str())
                .map(|list| {
                    list.iter()
                        .map(|&i| node(run, spans, children, i, depth + 1))
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        json!({
            "id": s.span_id,
            "parentSpanId": s.parent_span_id,
            "name": s.name,
            "type": s.kind,
            "status": s.status,
            "bytes": s.bytes,
            "href": span_href(run, &s.span_id),
            "children": kids,
        })
    }
    roots
        .into_iter()
        .map(|i| node(run, spans, &children, i, 0))
        .collect()
}

/// How deep the span tree of `GET /runs/{id}` nests, in levels; deeper spans are listed in
/// `spans` but not nested further. Sixty-four levels of recursion is a few KiB of stack.
const SPAN_TREE_DEPTH_MAX: usize = 64;

/// How many spans `GET /runs/{id}` and a page of `GET /runs/{id}/spans` carry by default, and
/// at most: with large fields elided a span is at most a few tens of KiB, and the answer's byte
/// budget ends a page sooner when they are.
const SPANS_PAGE_DEFAULT: u32 = 100;
const SPANS_PAGE_MAX: u32 = PAGE_LIMIT_MAX;

fn approval_view(a: &RunApproval) -> Value {
    json!({
        "id": a.id,
        "status": a.status,
        "title": a.title,
        "invocationId": a.invocation_id,
        "createdAt": a.created_at.to_rfc3339(),
        "decidedAt": a.decided_at.map(|t| t.to_rfc3339()),
    })
}

fn feedback_view(f: &FeedbackRecord) -> Value {
    let mut v = f.document.clone();
    v["id"] = json!(f.id);
    v["runId"] = json!(f.run_id);
    v["spanId"] = json!(f.span_id);
    v["createdAt"] = json!(f.created_at.to_rfc3339());
    v
}

async fn find(state: &AppState, caller: &Caller, id: &RunId) -> ApiResult<RunRecord> {
    state
        .store
        .run(&caller.env.id, id)
        .await?
        .ok_or_else(|| ApiError::not_found("run"))
}

/// A page of the run's spans after `after` (a span's place), its large fields elided, within
/// `budget` bytes (`strict`: possibly none; otherwise at least one), and the cursor of the next
/// page (`None` at the end).
async fn span_page(
    state: &AppState,
    caller: &Caller,
    run: &RunId,
    after: Option<i64>,
    limit: u32,
    budget: usize,
    strict: bool,
) -> ApiResult<(Vec<Value>, Option<String>)> {
    let page = state
        .store
        .span_page(&caller.env.id, run, after, limit)
        .await?;
    let fetched = page.len();
    let last_seqs: Vec<i64> = page.iter().map(|(seq, _)| *seq).collect();
    let views: Vec<Value> = page.iter().map(|(_, s)| listed_span_view(s)).collect();
    drop(page);
    let (kept, cut) = if strict {
        bounded::fit_strict(views, budget)
    } else {
        bounded::fit(views, budget)
    };
    let more = cut || fetched == limit as usize;
    // After the last span kept; before the first when none fit (`s-1`: every place is after it).
    let next = more.then(|| match kept.len().checked_sub(1) {
        Some(i) => format!("s{}", last_seqs[i]),
        None => format!("s{}", after.unwrap_or(-1)),
    });
    Ok((kept, next))
}

/// The place a span cursor (`s<seq>`) stands for, or a validation error naming `cursor`.
fn span_cursor(cursor: &str) -> ApiResult<i64> {
    cursor
        .strip_prefix('s')
        .and_then(|n| n.parse::<i64>().ok())
        .ok_or_else(|| ApiError::validation("cursor", "is not a cursor this server gave"))
}

/// The run with its first page of spans (large fields elided), the whole span tree as
/// outlines, and the invocations and approvals that name it; under
/// [`bounded::ANSWER_BYTES_MAX`] whatever the run holds.
async fn detail(state: &AppState, caller: &Caller, run: &RunRecord) -> ApiResult<Value> {
    let outlines = state.store.span_outlines(&caller.env.id, &run.id).await?;
    let span_count = outlines.len();
    let run_id = run.id.clone();
    // Up to 10,000 nodes: built on a blocking thread so no async worker stalls on it.
    let span_tree = tokio::task::spawn_blocking(move || tree(&run_id, &outlines))
        .await
        .map_err(|e| ApiError::internal("building a run's span tree", &e))?;
    let (invocations, approvals) = state.store.run_timeline(&caller.env.id, &run.id).await?;
    let mut v = view(run);
    v["approvals"] = Value::Array(approvals.iter().map(approval_view).collect());
    // The run's own fields are bounded by what was accepted (well under the bound); the rest
    // of the answer shares what is left: half for the tree, a quarter for the invocations,
    // the remainder for the first spans. A part cut short says so.
    let left = bounded::ANSWER_BYTES_MAX.saturating_sub(bounded::json_len(&v) + 1024);
    let (span_tree, tree_cut) = bounded::fit_strict(span_tree, left / 2);
    let invocations: Vec<Value> = invocations
        .iter()
        .map(|i| {
            let mut view =
                serde_json::to_value(views::listed_invocation(i)).expect("a view is plain JSON");
            view["parentSpanId"] = json!(i.parent_span_id);
            view
        })
        .collect();
    let (invocations, invocations_cut) = bounded::fit_strict(invocations, left / 4);
    let used = bounded::json_len(&Value::Array(span_tree.clone()))
        + bounded::json_len(&Value::Array(invocations.clone()));
    let (spans, next) = span_page(
        state,
        caller,
        &run.id,
        None,
        SPANS_PAGE_DEFAULT,
        left.saturating_sub(used),
        true,
    )
    .await?;
    v["spanTree"] = Value::Array(span_tree);
    v["spanTreeComplete"] = json!(!tree_cut);
    v["invocations"] = Value::Array(invocations);
    v["invocationsComplete"] = json!(!invocations_cut);
    v["spans"] = Value::Array(spans);
    v["spanCount"] = json!(span_count);
    v["spansNextCursor"] = json!(next);
    Ok(v)
}

#[utoipa::path(
    post,
    path = "/runs",
    operation_id = "runs_start",
    tag = "runs",
    params(doc::IdempotencyHeader),
    request_body = doc::RunStartBody,
    responses(
        (status = 201, description = "the run, started", body = doc::Single<doc::Run>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn start(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_WRITE)?;
    let map = body::object(&bytes)?;
    let start = parse::start(&map)?;
    let request = json!({"op": "run.start", "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let now = state.clock.now();
        let id = fresh_id();
        let run = RunRecord {
            trace_id: derived_trace_id(&id),
            id,
            env_id: caller.env.id.clone(),
            status: RunStatus::Running,
            name: start.name,
            agent_id: start.agent_id,
            user_id: start.user_id,
            body: start.body,
            started_at: now,
            ended_at: None,
            updated_at: now,
        };
        state
            .store
            .start_run(&run, &Actor::key(&caller.key.id, now))
            .await?;
        Ok((StatusCode::CREATED, view(&run)))
    })
    .await
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Runs whose name holds this text (case-insensitive).
    search: Option<String>,
    #[param(value_type = Option<doc::RunStatusParam>, inline)]
    status: Option<String>,
    #[serde(rename = "agentId")]
    agent_id: Option<String>,
    #[serde(rename = "userId")]
    user_id: Option<String>,
    /// Runs started after this RFC 3339 time.
    #[serde(rename = "startedAfter")]
    started_after: Option<String>,
    /// Runs started before this RFC 3339 time.
    #[serde(rename = "startedBefore")]
    started_before: Option<String>,
    /// Page size: 1 to 200 (default 50); out-of-range values are clamped. A page ends early
    /// rather than pass 4 MiB; the answer then has `pagination` with `hasMore` and
    /// `nextOffset`.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// How many to skip.
    offset: Option<u32>,
}

fn query_time(field: &str, value: Option<&str>) -> ApiResult<Option<Millis>> {
    value
        .map(|t| {
            parse::rfc3339(t).ok_or_else(|| ApiError::validation(field, "must be an RFC 3339 time"))
        })
        .transpose()
}

#[utoipa::path(
    get,
    path = "/runs",
    operation_id = "runs_list",
    tag = "runs",
    params(ListQuery),
    responses(
        (status = 200, description = "the environment's runs, newest first", body = doc::List<doc::Run>),
        doc::Guarded,
        doc::Invalid,
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_READ)?;
    let status = q
        .status
        .as_deref()
        .map(|s| {
            RunStatus::parse(s).ok_or_else(|| {
                ApiError::validation("status", format!("`{s}` is not a known status"))
            })
        })
        .transpose()?;
    let filter = RunFilter {
        search: q.search.filter(|s| !s.is_empty()),
        status,
        agent_id: q.agent_id,
        user_id: q.user_id,
        started_after: query_time("startedAfter", q.started_after.as_deref())?,
        started_before: query_time("startedBefore", q.started_before.as_deref())?,
        limit: q
            .limit
            .unwrap_or(PAGE_LIMIT_DEFAULT)
            .clamp(1, PAGE_LIMIT_MAX),
        offset: q.offset.unwrap_or(0),
    };
    let runs = state.store.list_runs(&caller.env.id, &filter).await?;
    let listed: Vec<Value> = runs
        .iter()
        .map(|r| {
            let mut v = view(r);
            bounded::mark_elided(&mut v, &format!("/api/v2/runs/{}", r.id));
            v
        })
        .collect();
    drop(runs);
    // A page ends early rather than pass the bound; `pagination` then says where to go on
    // (the runs list has no total, so it appears only then).
    let (listed, cut) = bounded::fit(listed, bounded::ANSWER_BYTES_MAX - 1024);
    if !cut {
        return Ok(ok(Value::Array(listed)));
    }
    let next = u64::from(filter.offset) + listed.len() as u64;
    let body = json!({
        "success": true,
        "data": listed,
        "pagination": {"limit": filter.limit, "offset": filter.offset, "hasMore": true, "nextOffset": next},
    });
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}

#[utoipa::path(
    get,
    path = "/runs/{id}",
    operation_id = "runs_get",
    tag = "runs",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the run with its spans, invocations and approvals", body = doc::Single<doc::RunDetail>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Busy,
    )
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_READ)?;
    let _read = state.heavy_reads.admit(caller.key.id.as_str())?;
    let run = find(&state, &caller, &parse_id(&id)?).await?;
    Ok(ok(detail(&state, &caller, &run).await?))
}

#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SpansQuery {
    /// Page size: 1 to 200 (default 100); out-of-range values are clamped. A page also ends
    /// before its answer passes 4 MiB.
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// Where to start: the `pagination.nextCursor` of the page before (or a run's
    /// `spansNextCursor`).
    #[param(max_length = 24)]
    cursor: Option<String>,
}

#[utoipa::path(
    get,
    path = "/runs/{id}/spans",
    operation_id = "runs_list_spans",
    tag = "runs",
    params(doc::IdPath, SpansQuery),
    responses(
        (status = 200, description = "a page of the run's spans in ingest order, large fields elided", body = doc::CursorPage<doc::Span>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Busy,
    )
)]
pub async fn list_spans(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<SpansQuery>,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_READ)?;
    let _read = state.heavy_reads.admit(caller.key.id.as_str())?;
    let id = parse_id(&id)?;
    find(&state, &caller, &id).await?;
    let after = q.cursor.as_deref().map(span_cursor).transpose()?;
    let limit = q
        .limit
        .unwrap_or(SPANS_PAGE_DEFAULT)
        .clamp(1, SPANS_PAGE_MAX);
    let (spans, next) = span_page(
        &state,
        &caller,
        &id,
        after,
        limit,
        bounded::ANSWER_BYTES_MAX - 1024,
        false,
    )
    .await?;
    let page = steward_wire::CursorPage::new(spans, limit, next);
    Ok((StatusCode::OK, axum::Json(page)).into_response())
}

#[utoipa::path(
    get,
    path = "/runs/{id}/spans/{spanId}",
    operation_id = "runs_get_span",
    tag = "runs",
    params(doc::IdPath, ("spanId" = String, Path, description = "The span's id within the run.")),
    responses(
        (status = 200, description = "the span, whole", body = doc::Single<doc::Span>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn get_span(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, span_id)): Path<(String, String)>,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_READ)?;
    let id = parse_id(&id)?;
    let span = state
        .store
        .span(&caller.env.id, &id, &span_id)
        .await?
        .ok_or_else(|| ApiError::not_found("span"))?;
    Ok(ok(span_view(&span)))
}

#[utoipa::path(
    patch,
    path = "/runs/{id}",
    operation_id = "runs_end",
    tag = "runs",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::RunEndBody,
    responses(
        (status = 200, description = "the run after the change", body = doc::Single<doc::Run>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn end(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_WRITE)?;
    let id = parse_id(&id)?;
    let map = body::object(&bytes)?;
    let change = parse::end(&map)?;
    let request = json!({"op": "run.end", "run": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let now = state.clock.now();
        match state
            .store
            .end_run(
                &caller.env.id,
                &id,
                &change,
                &Actor::key(&caller.key.id, now),
            )
            .await?
        {
            Ok(run) => Ok((StatusCode::OK, view(&run))),
            Err(RunEndRefusal::AlreadyEnded { status }) => Err(ApiError::of(
                codes::RUN_ALREADY_ENDED,
                format!("the run has already ended `{}`", status.as_str()),
            )),
        }
    })
    .await
}

#[utoipa::path(
    post,
    path = "/runs/{id}/spans",
    operation_id = "runs_ingest_spans",
    tag = "runs",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::SpansBody,
    responses(
        (status = 200, description = "how many spans were created and replaced", body = doc::Single<doc::SpansIngested>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn ingest_spans(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_WRITE)?;
    let id = parse_id(&id)?;
    let map = body::object(&bytes)?;
    body::only_known(&map, &parse::SPANS_FIELDS)?;
    let Some(Value::Array(list)) = map.get("spans") else {
        return Err(ApiError::validation("spans", "must be a list of spans"));
    };
    if list.is_empty() || list.len() > parse::SPANS_PER_INGEST_MAX {
        return Err(ApiError::validation(
            "spans",
            format!("must hold 1 to {} spans", parse::SPANS_PER_INGEST_MAX),
        ));
    }
    let mut spans: Vec<parse::Span> = Vec::with_capacity(list.len());
    for (i, value) in list.iter().enumerate() {
        let span = parse::span(i, value, || format!("spn_{}", crate::clock::unique()))?;
        if spans.iter().any(|s| s.id == span.id) {
            return Err(ApiError::validation(
                format!("spans[{i}].id"),
                "repeats an id given earlier in this request",
            ));
        }
        spans.push(span);
    }
    let request = json!({"op": "run.spans", "run": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let now = state.clock.now();
        let records: Vec<SpanRecord> = spans
            .into_iter()
            .map(|s| SpanRecord {
                run_id: id.clone(),
                span_id: s.id,
                parent_span_id: s.parent,
                document: s.document,
                created_at: now,
                updated_at: now,
            })
            .collect();
        let ingested = state
            .store
            .ingest_spans(
                &caller.env.id,
                &id,
                &records,
                parse::SPANS_PER_RUN_MAX,
                &Actor::key(&caller.key.id, now),
            )
            .await?;
        match ingested {
            SpansIngested::Stored { created, replaced } => {
                if let Some(run) = state.store.run(&caller.env.id, &id).await? {
                    crate::telemetry::export_run_spans(&run, &records);
                }
                Ok((
                    StatusCode::OK,
                    json!({"runId": id, "created": created, "replaced": replaced}),
                ))
            }
            SpansIngested::TooMany { existing } => Err(ApiError::of(
                codes::RUN_SPANS_LIMIT_REACHED,
                format!(
                    "the run holds {existing} spans; these would take it past {}",
                    parse::SPANS_PER_RUN_MAX
                ),
            )
            .with_details(json!({"spansMax": parse::SPANS_PER_RUN_MAX}))),
        }
    })
    .await
}

#[utoipa::path(
    post,
    path = "/runs/{id}/feedback",
    operation_id = "runs_add_feedback",
    tag = "runs",
    params(doc::IdPath, doc::IdempotencyHeader),
    request_body = doc::FeedbackBody,
    responses(
        (status = 201, description = "the feedback recorded", body = doc::Single<doc::Feedback>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn add_feedback(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_WRITE)?;
    let id = parse_id(&id)?;
    let map = body::object(&bytes)?;
    let (span_id, document) = parse::feedback(&map)?;
    let request = json!({"op": "run.feedback", "run": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        find(&state, &caller, &id).await?;
        if let Some(span) = &span_id {
            if state.store.span(&caller.env.id, &id, span).await?.is_none() {
                return Err(ApiError::validation("spanId", "names no span of this run"));
            }
        }
        let now = state.clock.now();
        let record = FeedbackRecord {
            id: FeedbackId::from_unique(&crate::clock::unique()),
            env_id: caller.env.id.clone(),
            run_id: id.clone(),
            span_id,
            document,
            created_at: now,
        };
        state
            .store
            .add_feedback(&record, &Actor::key(&caller.key.id, now))
            .await?;
        Ok((StatusCode::CREATED, feedback_view(&record)))
    })
    .await
}

#[utoipa::path(
    get,
    path = "/runs/{id}/feedback",
    operation_id = "runs_list_feedback",
    tag = "runs",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the run's feedback, oldest first", body = doc::List<doc::Feedback>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
    )
)]
pub async fn list_feedback(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_READ)?;
    let id = parse_id(&id)?;
    find(&state, &caller, &id).await?;
    let feedback = state.store.feedback(&caller.env.id, &id).await?;
    Ok(ok(Value::Array(
        feedback.iter().map(feedback_view).collect(),
    )))
}

#[utoipa::path(
    get,
    path = "/runs/{id}/export",
    operation_id = "runs_export_trace",
    tag = "runs",
    params(doc::IdPath),
    responses(
        (status = 200, description = "the run as one OTLP/JSON trace (`resourceSpans`)", body = doc::Single<doc::Trace>),
        doc::Guarded,
        doc::Invalid,
        doc::Missing,
        doc::Busy,
        (status = 422, description = "the run's spans hold more than one answer carries (`ANSWER_TOO_LARGE`); read them from `/runs/{id}/spans`", body = doc::ErrorEnvelope),
    )
)]
pub async fn export_trace(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_READ)?;
    let _read = state.heavy_reads.admit(caller.key.id.as_str())?;
    let run = find(&state, &caller, &parse_id(&id)?).await?;
    // A trace carries every span whole: refused, before anything large is read, when the
    // spans alone would take the answer past the bound.
    let stored: u64 = state
        .store
        .span_outlines(&caller.env.id, &run.id)
        .await?
        .iter()
        .map(|s| s.bytes)
        .sum();
    if stored > bounded::ANSWER_BYTES_MAX as u64 {
        return Err(ApiError::of(
            codes::ANSWER_TOO_LARGE,
            format!(
                "the run's spans hold {stored} bytes, more than one answer carries ({} bytes); read them page by page from /runs/{}/spans",
                bounded::ANSWER_BYTES_MAX,
                run.id
            ),
        )
        .with_details(json!({"bytes": stored, "limitBytes": bounded::ANSWER_BYTES_MAX})));
    }
    let spans = state.store.spans(&caller.env.id, &run.id).await?;
    Ok(ok(trace::export(&run, &spans)))
}

#[utoipa::path(
    post,
    path = "/runs/import",
    operation_id = "runs_import_trace",
    tag = "runs",
    params(doc::IdempotencyHeader),
    request_body = doc::TraceBody,
    responses(
        (status = 201, description = "the run made of the trace", body = doc::Single<doc::Run>),
        doc::Guarded,
        doc::Invalid,
        doc::Idempotent,
        doc::TooLarge,
    )
)]
pub async fn import_trace(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    bytes: Bytes,
) -> ApiResult<Response> {
    caller.require(scopes::RUNS_WRITE)?;
    let map = body::object(&bytes)?;
    let imported = trace::import(&map)?;
    let request = json!({"op": "run.import", "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let now = state.clock.now();
        let actor = Actor::key(&caller.key.id, now);
        let id = fresh_id();
        let run = imported.run(id.clone(), caller.env.id.clone(), now);
        state.store.start_run(&run, &actor).await?;
        let spans = imported.spans(&id, now);
        if !spans.is_empty() {
            // Two transactions: a failure here leaves the run without its spans, which a
            // second import (a new run) or an ingest into this one repairs.
            state
                .store
                .ingest_spans(
                    &caller.env.id,
                    &id,
                    &spans,
                    parse::SPANS_PER_RUN_MAX,
                    &actor,
                )
                .await?;
        }
        Ok((StatusCode::CREATED, view(&run)))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outline(seq: i64, id: &str, parent: Option<&str>) -> SpanOutline {
        SpanOutline {
            seq,
            span_id: id.to_string(),
            parent_span_id: parent.map(str::to_string),
            name: Some(id.to_string()),
            kind: None,
            status: None,
            bytes: 10,
        }
    }

    fn count(nodes: &[Value]) -> usize {
        nodes
            .iter()
            .map(|n| 1 + count(n["children"].as_array().unwrap()))
            .sum()
    }

    #[test]
    fn the_tree_nests_by_parent_keeps_ingest_order_and_orphans_are_roots() {
        let run = fresh_id();
        let spans = [
            outline(0, "root", None),
            outline(1, "b", Some("root")),
            outline(2, "a", Some("root")),
            outline(3, "leaf", Some("b")),
            outline(4, "orphan", Some("not-here")),
        ];
        let forest = tree(&run, &spans);
        let ids: Vec<&str> = forest.iter().map(|n| n["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["root", "orphan"]);
        let kids: Vec<&str> = forest[0]["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].as_str().unwrap())
            .collect();
        assert_eq!(kids, ["b", "a"], "ingest order, not id order");
        assert_eq!(forest[0]["children"][0]["children"][0]["id"], "leaf");
        assert_eq!(
            forest[0]["href"],
            json!(format!("/api/v2/runs/{run}/spans/root"))
        );
        assert!(
            forest[0].get("input").is_none(),
            "outlines carry no content"
        );
    }

    /// Ten thousand spans (the per-run bound) in a wide and a deep shape: every span appears
    /// once, a chain stops nesting at the depth bound, and a cycle is in no tree.
    #[test]
    fn ten_thousand_spans_build_once_each_and_cycles_and_depth_stay_bounded() {
        let run = fresh_id();
        let wide: Vec<SpanOutline> = (0..10_000)
            .map(|i| outline(i, &format!("s{i}"), None))
            .collect();
        let started = std::time::Instant::now();
        assert_eq!(count(&tree(&run, &wide)), 10_000);
        // A scan per node (the old O(n^2) build) took most of a second here in a release
        // build; the map takes milliseconds. Generous for a loaded debug build.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));

        let chain: Vec<SpanOutline> = (0..200)
            .map(|i| {
                let parent = (i > 0).then(|| format!("c{}", i - 1));
                outline(i, &format!("c{i}"), parent.as_deref())
            })
            .collect();
        let forest = tree(&run, &chain);
        assert_eq!(count(&forest), SPAN_TREE_DEPTH_MAX + 1);

        let cycle = [outline(0, "x", Some("y")), outline(1, "y", Some("x"))];
        assert!(tree(&run, &cycle).is_empty());
    }
}
