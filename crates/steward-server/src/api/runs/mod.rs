//! `runs`: an agent's trace as its runtime reports it. A run (`run_...`) has a status, an input
//! and an output, a tree of spans (`parentSpanId`) and feedback; the invocations and approvals
//! that name it (`runId`) join its timeline. `GET /runs/{id}/export` answers the run as an
//! OTLP/JSON trace, and `POST /runs/import` makes a run of one. Reading needs `runs:read`;
//! every change needs `runs:write`. A run's user and tags are what approval policies'
//! `matchUserId` and `matchTags` see when an invocation names the run (`gate.rs`).

pub(crate) mod parse;
mod trace;
mod views;

use super::body;
use super::bounded;
use super::idempotent;
use super::openapi as doc;
use super::query::Query;
use crate::app;
use crate::auth::Caller;
use crate::envelope::{ok, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use steward_core::{scopes, Millis, RunId};
use steward_store::{RunFilter, RunRecord, RunStatus};
use steward_wire as wire;

/// A run id from a path or a body; one that cannot be ours names no run.
pub(crate) fn parse_id(id: &str) -> ApiResult<RunId> {
    RunId::parse(id).map_err(|_| ApiError::not_found("run"))
}

/// How many spans `GET /runs/{id}` and a page of `GET /runs/{id}/spans` carry by default, and
/// at most: with large fields elided a span is at most a few tens of KiB, and the answer's byte
/// budget ends a page sooner when they are.
const SPANS_PAGE_DEFAULT: u32 = 100;
const SPANS_PAGE_MAX: u32 = PAGE_LIMIT_MAX;

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
) -> ApiResult<(Vec<wire::Span>, Option<String>)> {
    let page = app::runs::span_page(state, caller, run, after, limit).await?;
    let fetched = page.len();
    let last_seqs: Vec<i64> = page.iter().map(|(seq, _)| *seq).collect();
    let views: Vec<wire::Span> = page
        .into_iter()
        .map(|(_, s)| views::listed_span(s))
        .collect();
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
async fn detail(state: &AppState, caller: &Caller, run: &RunRecord) -> ApiResult<wire::RunDetail> {
    let timeline = app::runs::timeline(state, caller, &run.id).await?;
    let span_count = timeline.outlines.len();
    let (run_id, outlines) = (run.id.clone(), timeline.outlines);
    // Up to 10,000 nodes: built on a blocking thread so no async worker stalls on it.
    let span_tree = tokio::task::spawn_blocking(move || views::tree(&run_id, &outlines))
        .await
        .map_err(|e| ApiError::internal("building a run's span tree", &e))?;
    let approvals: Vec<wire::RunApproval> =
        timeline.approvals.iter().map(views::approval).collect();
    // The run's own fields are bounded by what was accepted (well under the bound); the rest
    // of the answer shares what is left: half for the tree, a quarter for the invocations,
    // the remainder for the first spans. A part cut short says so. The run's own part is
    // measured as the run's fields and `approvals`, as it always was.
    let own = views::run(run);
    let own_len = views::run_and_approvals_len(&own, &approvals);
    let mut v = wire::RunDetail::of(own);
    let left = bounded::ANSWER_BYTES_MAX.saturating_sub(own_len + 1024);
    let (span_tree, tree_cut) = bounded::fit_strict(span_tree, left / 2);
    // An invocation's view with the span it was made under: any JSON here, as the
    // invocations list shows it plus one field.
    let invocations: Vec<Value> = timeline
        .invocations
        .iter()
        .map(|i| {
            let mut view = serde_json::to_value(super::views::listed_invocation(i))
                .expect("a view is plain JSON");
            view["parentSpanId"] = json!(i.parent_span_id);
            view
        })
        .collect();
    let (invocations, invocations_cut) = bounded::fit_strict(invocations, left / 4);
    let used = bounded::view_len(&span_tree) + bounded::view_len(&invocations);
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
    v.approvals = approvals;
    v.span_tree = span_tree;
    v.span_tree_complete = !tree_cut;
    v.invocations = invocations;
    v.invocations_complete = !invocations_cut;
    v.spans = spans;
    v.span_count = span_count as u64;
    v.spans_next_cursor = next;
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
    let start = parse::start(body::typed(&map)?)?;
    let request = json!({"op": "run.start", "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let run = app::runs::start(&state, &caller, start).await?;
        Ok((StatusCode::CREATED, views::run(&run)))
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
    let runs = app::runs::list(&state, &caller, &filter).await?;
    let listed: Vec<wire::Run> = runs.iter().map(views::listed_run).collect();
    drop(runs);
    // A page ends early rather than pass the bound; `pagination` then says where to go on
    // (the runs list has no total, so it appears only then).
    let (listed, cut) = bounded::fit(listed, bounded::ANSWER_BYTES_MAX - 1024);
    if !cut {
        return Ok(ok(listed));
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
    let run = app::runs::get(&state, &caller, &parse_id(&id)?).await?;
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
    app::runs::get(&state, &caller, &id).await?;
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
    let span = app::runs::span(&state, &caller, &id, &span_id).await?;
    Ok(ok(views::span(span)))
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
    let change = parse::end(body::typed(&map)?)?;
    let request = json!({"op": "run.end", "run": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let run = app::runs::end(&state, &caller, &id, &change).await?;
        Ok((StatusCode::OK, views::run(&run)))
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
    let spans = parse::spans(body::typed(&map)?)?;
    let request = json!({"op": "run.spans", "run": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let ingested = app::runs::ingest_spans(&state, &caller, &id, spans).await?;
        let answer = wire::SpansIngested {
            run_id: id.clone(),
            created: ingested.created as u64,
            replaced: ingested.replaced as u64,
        };
        Ok((StatusCode::OK, answer))
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
    let feedback = parse::feedback(body::typed(&map)?)?;
    let request = json!({"op": "run.feedback", "run": id, "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let record = app::runs::add_feedback(&state, &caller, &id, feedback).await?;
        Ok((StatusCode::CREATED, views::feedback(&record)))
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
    let feedback = app::runs::feedback(&state, &caller, &id).await?;
    let views: Vec<wire::Feedback> = feedback.iter().map(views::feedback).collect();
    Ok(ok(views))
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
    // A trace carries every span whole: refused, before anything large is read, when the
    // spans alone would take the answer past the bound.
    let (run, spans) =
        app::runs::trace(&state, &caller, &parse_id(&id)?, bounded::ANSWER_BYTES_MAX).await?;
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
    let imported = trace::import(body::typed(&map)?)?;
    let request = json!({"op": "run.import", "body": map});
    idempotent::run(&state, &caller, &headers, request, || async {
        let run = app::runs::import(&state, &caller, imported).await?;
        Ok((StatusCode::CREATED, views::run(&run)))
    })
    .await
}
