//! Runs: an agent's trace as its runtime reports it. A run (`run_...`) has a status, an input
//! and an output, a tree of spans (`parentSpanId`) and feedback; the invocations and approvals
//! that name it (`runId`) join its timeline. `POST|GET|PATCH /runs...` (`api/runs/`) call
//! these. Reading needs `runs:read`; every change needs `runs:write`.
//!
//! The inputs are checked by the front end that parsed them (`api/runs/parse.rs`, with the
//! bounds named there); these functions apply the rules that need the store: the run must be
//! the principal environment's, a span's feedback must name a span of the run, a run holds at
//! most [`SPANS_PER_RUN_MAX`] spans, and an ended run stays ended.

use super::{Error, Principal, Result};
use crate::error::codes;
use crate::state::AppState;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use steward_core::{scopes, EnvironmentId, FeedbackId, Millis, RunId};
use steward_store::{
    Actor, FeedbackRecord, InvocationRecord, RunApproval, RunBody, RunEnd, RunEndRefusal,
    RunFilter, RunRecord, RunStatus, SpanOutline, SpanRecord, SpansIngested,
};

/// The most spans one run may hold, counting each span id once. Past it, an ingest that would
/// add spans is refused whole (`run_spans_limit_reached`); replacing existing spans still works.
pub const SPANS_PER_RUN_MAX: usize = 10_000;

/// A run to start, checked.
#[derive(Debug, Clone, Default)]
pub struct Start {
    pub name: Option<String>,
    pub agent_id: Option<String>,
    pub user_id: Option<String>,
    pub body: RunBody,
}

/// One checked span: its id, its parent, and its normalized document.
#[derive(Debug, Clone)]
pub struct Span {
    pub id: String,
    pub parent: Option<String>,
    pub document: Value,
}

/// Feedback to record, checked: the span it is about (if any) and its document.
#[derive(Debug, Clone)]
pub struct Feedback {
    pub span_id: Option<String>,
    pub document: Value,
}

/// A trace read back (`POST /runs/import`): the root span's fields and the other spans, with
/// Steward's ids.
#[derive(Debug, Clone)]
pub struct Imported {
    pub trace_id: String,
    pub name: Option<String>,
    pub status: RunStatus,
    pub agent_id: Option<String>,
    pub user_id: Option<String>,
    pub body: RunBody,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub spans: Vec<Span>,
}

/// What an ingest stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    /// Spans whose id the run did not hold.
    pub created: usize,
    /// Spans that replaced one of the same id.
    pub replaced: usize,
}

/// A run's timeline as the run read shows it: every span's outline, and the invocations and
/// approvals that name the run.
#[derive(Debug)]
pub struct Timeline {
    pub outlines: Vec<SpanOutline>,
    pub invocations: Vec<InvocationRecord>,
    pub approvals: Vec<RunApproval>,
}

/// A fresh run id.
fn fresh_id() -> RunId {
    RunId::from_unique(&crate::clock::unique())
}

/// A fresh span id, for a span sent without one.
pub fn fresh_span_id() -> String {
    format!("spn_{}", crate::clock::unique())
}

/// The W3C trace id of a run started here: the first 16 bytes of SHA-256 over its id, in hex.
/// Derived, not drawn, so the same run always maps to the same trace, and stored on the run so
/// an imported run keeps the trace id it came with.
fn derived_trace_id(id: &RunId) -> String {
    hex::encode(&Sha256::digest(id.as_str().as_bytes())[..16])
}

/// The principal's run `id`; 404 when its environment holds none.
async fn find(state: &AppState, principal: &Principal, id: &RunId) -> Result<RunRecord> {
    state
        .store
        .run(&principal.env.id, id)
        .await?
        .ok_or_else(|| Error::not_found("run"))
}

/// Starts a run, `running` from now.
pub async fn start(state: &AppState, principal: &Principal, start: Start) -> Result<RunRecord> {
    principal.require(scopes::RUNS_WRITE)?;
    let now = state.clock.now();
    let id = fresh_id();
    let run = RunRecord {
        trace_id: derived_trace_id(&id),
        id,
        env_id: principal.env.id.clone(),
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
        .start_run(&run, &Actor::key(&principal.key.id, now))
        .await?;
    Ok(run)
}

/// The principal's runs that `filter` selects, newest first (large fields as the store's
/// elision markers).
pub async fn list(
    state: &AppState,
    principal: &Principal,
    filter: &RunFilter,
) -> Result<Vec<RunRecord>> {
    principal.require(scopes::RUNS_READ)?;
    Ok(state.store.list_runs(&principal.env.id, filter).await?)
}

/// One run, whole.
pub async fn get(state: &AppState, principal: &Principal, id: &RunId) -> Result<RunRecord> {
    principal.require(scopes::RUNS_READ)?;
    find(state, principal, id).await
}

/// The timeline of a run the caller has read (`get`).
pub async fn timeline(state: &AppState, principal: &Principal, run: &RunId) -> Result<Timeline> {
    principal.require(scopes::RUNS_READ)?;
    let outlines = state.store.span_outlines(&principal.env.id, run).await?;
    let (invocations, approvals) = state.store.run_timeline(&principal.env.id, run).await?;
    Ok(Timeline {
        outlines,
        invocations,
        approvals,
    })
}

/// Up to `limit` spans of a run the caller has read, after the place `after`, each with its
/// place, large fields as the store's elision markers.
pub async fn span_page(
    state: &AppState,
    principal: &Principal,
    run: &RunId,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<(i64, SpanRecord)>> {
    principal.require(scopes::RUNS_READ)?;
    Ok(state
        .store
        .span_page(&principal.env.id, run, after, limit)
        .await?)
}

/// One span of a run, whole; 404 when the run does not hold it.
pub async fn span(
    state: &AppState,
    principal: &Principal,
    run: &RunId,
    span_id: &str,
) -> Result<SpanRecord> {
    principal.require(scopes::RUNS_READ)?;
    state
        .store
        .span(&principal.env.id, run, span_id)
        .await?
        .ok_or_else(|| Error::not_found("span"))
}

/// Ends a run (a terminal status) or updates a running one; an ended run stays ended (409).
pub async fn end(
    state: &AppState,
    principal: &Principal,
    id: &RunId,
    change: &RunEnd,
) -> Result<RunRecord> {
    principal.require(scopes::RUNS_WRITE)?;
    let now = state.clock.now();
    let actor = Actor::key(&principal.key.id, now);
    match state
        .store
        .end_run(&principal.env.id, id, change, &actor)
        .await?
    {
        Ok(run) => Ok(run),
        Err(RunEndRefusal::AlreadyEnded { status }) => Err(Error::of(
            codes::RUN_ALREADY_ENDED,
            format!("the run has already ended `{}`", status.as_str()),
        )),
    }
}

/// Stores `spans` in run `id` (a span of an id the run holds replaces it), all or none, and
/// exports them to the OTLP exporter when one is configured.
pub async fn ingest_spans(
    state: &AppState,
    principal: &Principal,
    id: &RunId,
    spans: Vec<Span>,
) -> Result<Ingested> {
    principal.require(scopes::RUNS_WRITE)?;
    let now = state.clock.now();
    let records = span_records(id, spans, now);
    let ingested = state
        .store
        .ingest_spans(
            &principal.env.id,
            id,
            &records,
            SPANS_PER_RUN_MAX,
            &Actor::key(&principal.key.id, now),
        )
        .await?;
    match ingested {
        SpansIngested::Stored { created, replaced } => {
            if let Some(run) = state.store.run(&principal.env.id, id).await? {
                crate::telemetry::export_run_spans(&run, &records);
            }
            Ok(Ingested { created, replaced })
        }
        SpansIngested::TooMany { existing } => Err(Error::of(
            codes::RUN_SPANS_LIMIT_REACHED,
            format!("the run holds {existing} spans; these would take it past {SPANS_PER_RUN_MAX}"),
        )
        .with_details(json!({ "spansMax": SPANS_PER_RUN_MAX }))),
    }
}

fn span_records(run: &RunId, spans: Vec<Span>, now: Millis) -> Vec<SpanRecord> {
    spans
        .into_iter()
        .map(|s| SpanRecord {
            run_id: run.clone(),
            span_id: s.id,
            parent_span_id: s.parent,
            document: s.document,
            created_at: now,
            updated_at: now,
        })
        .collect()
}

/// Records feedback on run `id`, or on one of its spans (a span it does not hold is refused,
/// naming `spanId`).
pub async fn add_feedback(
    state: &AppState,
    principal: &Principal,
    id: &RunId,
    feedback: Feedback,
) -> Result<FeedbackRecord> {
    principal.require(scopes::RUNS_WRITE)?;
    find(state, principal, id).await?;
    if let Some(span) = &feedback.span_id {
        if state
            .store
            .span(&principal.env.id, id, span)
            .await?
            .is_none()
        {
            return Err(Error::validation("spanId", "names no span of this run"));
        }
    }
    let now = state.clock.now();
    let record = FeedbackRecord {
        id: FeedbackId::from_unique(&crate::clock::unique()),
        env_id: principal.env.id.clone(),
        run_id: id.clone(),
        span_id: feedback.span_id,
        document: feedback.document,
        created_at: now,
    };
    state
        .store
        .add_feedback(&record, &Actor::key(&principal.key.id, now))
        .await?;
    Ok(record)
}

/// The feedback on run `id`, oldest first.
pub async fn feedback(
    state: &AppState,
    principal: &Principal,
    id: &RunId,
) -> Result<Vec<FeedbackRecord>> {
    principal.require(scopes::RUNS_READ)?;
    find(state, principal, id).await?;
    Ok(state.store.feedback(&principal.env.id, id).await?)
}

/// Run `id` with every span whole, for an export that carries at most `bytes_max` bytes: a run
/// whose spans alone hold more is refused (`ANSWER_TOO_LARGE`) before anything large is read.
pub async fn trace(
    state: &AppState,
    principal: &Principal,
    id: &RunId,
    bytes_max: usize,
) -> Result<(RunRecord, Vec<SpanRecord>)> {
    principal.require(scopes::RUNS_READ)?;
    let run = find(state, principal, id).await?;
    let stored: u64 = state
        .store
        .span_outlines(&principal.env.id, &run.id)
        .await?
        .iter()
        .map(|s| s.bytes)
        .sum();
    if stored > bytes_max as u64 {
        return Err(Error::of(
            codes::ANSWER_TOO_LARGE,
            format!(
                "the run's spans hold {stored} bytes, more than one answer carries ({bytes_max} bytes); read them page by page from /runs/{}/spans",
                run.id
            ),
        )
        .with_details(json!({"bytes": stored, "limitBytes": bytes_max})));
    }
    let spans = state.store.spans(&principal.env.id, &run.id).await?;
    Ok((run, spans))
}

/// Makes a run of an imported trace, then stores its spans.
pub async fn import(
    state: &AppState,
    principal: &Principal,
    imported: Imported,
) -> Result<RunRecord> {
    principal.require(scopes::RUNS_WRITE)?;
    let now = state.clock.now();
    let actor = Actor::key(&principal.key.id, now);
    let id = fresh_id();
    let (run, spans) = imported.into_records(id.clone(), principal.env.id.clone(), now);
    state.store.start_run(&run, &actor).await?;
    if !spans.is_empty() {
        // Two transactions: a failure here leaves the run without its spans, which a second
        // import (a new run) or an ingest into this one repairs.
        state
            .store
            .ingest_spans(&principal.env.id, &id, &spans, SPANS_PER_RUN_MAX, &actor)
            .await?;
    }
    Ok(run)
}

impl Imported {
    /// The run and its spans as records of run `id` in `env`, made `now`.
    fn into_records(
        self,
        id: RunId,
        env: EnvironmentId,
        now: Millis,
    ) -> (RunRecord, Vec<SpanRecord>) {
        let spans = span_records(&id, self.spans, now);
        let ended_at = if self.status.is_terminal() {
            Some(self.ended_at.unwrap_or(now))
        } else {
            None
        };
        let run = RunRecord {
            id,
            env_id: env,
            status: self.status,
            name: self.name,
            agent_id: self.agent_id,
            user_id: self.user_id,
            trace_id: self.trace_id,
            body: self.body,
            started_at: self.started_at.unwrap_or(now),
            ended_at,
            updated_at: now,
        };
        (run, spans)
    }
}
