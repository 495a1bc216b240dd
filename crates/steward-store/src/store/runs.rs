//! Runs, their spans and feedback: an agent's trace as its runtime reports it.

use crate::elide::SpanOutline;
use crate::error::StoreResult;
use crate::records::{Actor, InvocationRecord};
use crate::runs::{
    FeedbackRecord, RunApproval, RunEnd, RunEndRefusal, RunFilter, RunRecord, SpanRecord,
    SpansIngested,
};
use async_trait::async_trait;
use steward_core::{EnvironmentId, RunId};

/// Runs and what hangs off them. Each write appends its audit event in its own transaction:
/// `run.started`, `run.ended` (a terminal status) or `run.updated`, `run.spans_ingested`,
/// `run.feedback_added`, each with the run id as subject.
#[async_trait]
pub trait Runs: Send + Sync {
    /// Records a new run, with `run.started`. `Duplicate` if the id exists.
    async fn start_run(&self, run: &RunRecord, actor: &Actor) -> StoreResult<()>;
    /// Reads the run, applies [`RunRecord::ended`] and writes the result with its audit event,
    /// in one transaction. `NotFound` if the environment holds no such run.
    async fn end_run(
        &self,
        env: &EnvironmentId,
        id: &RunId,
        change: &RunEnd,
        actor: &Actor,
    ) -> StoreResult<Result<RunRecord, RunEndRefusal>>;
    async fn run(&self, env: &EnvironmentId, id: &RunId) -> StoreResult<Option<RunRecord>>;
    /// The environment's runs matching `filter`, newest first (`started_at`, then id). Each
    /// of the body's [`crate::RUN_ELIDED_FIELDS`] longer than [`crate::LISTED_FIELD_BYTES_MAX`]
    /// is its elision marker, as the backend reads the row; [`Runs::run`] reads one whole.
    async fn list_runs(
        &self,
        env: &EnvironmentId,
        filter: &RunFilter,
    ) -> StoreResult<Vec<RunRecord>>;
    /// Inserts or replaces (by span id) each span of `run`, unless the run would then hold more
    /// than `spans_max` spans, in which case nothing is written. `NotFound` if the environment
    /// holds no such run.
    async fn ingest_spans(
        &self,
        env: &EnvironmentId,
        run: &RunId,
        spans: &[SpanRecord],
        spans_max: usize,
        actor: &Actor,
    ) -> StoreResult<SpansIngested>;
    /// The run's spans in the order they were first ingested, whole.
    async fn spans(&self, env: &EnvironmentId, run: &RunId) -> StoreResult<Vec<SpanRecord>>;
    /// Every span of the run without its content (ids, parent, name, type, status and the
    /// stored document's size), in ingest order: what a span tree is built from. At most the
    /// run's span bound (10,000) rows of a few hundred bytes.
    async fn span_outlines(
        &self,
        env: &EnvironmentId,
        run: &RunId,
    ) -> StoreResult<Vec<SpanOutline>>;
    /// Up to `limit` spans of the run after the one at `after` (its [`SpanOutline::seq`]; `None`
    /// from the first), in ingest order, each with its place, and with every top-level field
    /// longer than [`crate::LISTED_FIELD_BYTES_MAX`] replaced by its elision marker while the
    /// row is read (`elide.rs`).
    async fn span_page(
        &self,
        env: &EnvironmentId,
        run: &RunId,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<(i64, SpanRecord)>>;
    /// One span of the run, whole.
    async fn span(
        &self,
        env: &EnvironmentId,
        run: &RunId,
        span_id: &str,
    ) -> StoreResult<Option<SpanRecord>>;
    /// Records feedback on an existing run of the environment (`NotFound` otherwise).
    async fn add_feedback(&self, feedback: &FeedbackRecord, actor: &Actor) -> StoreResult<()>;
    /// The run's feedback, oldest first.
    async fn feedback(&self, env: &EnvironmentId, run: &RunId) -> StoreResult<Vec<FeedbackRecord>>;
    /// The invocations and approvals of the environment that name the run, oldest first. The
    /// invocations' input and response body are elided as [`Effects::list_invocations`]
    /// elides them.
    ///
    /// [`Effects::list_invocations`]: crate::store::Effects::list_invocations
    async fn run_timeline(
        &self,
        env: &EnvironmentId,
        run: &RunId,
    ) -> StoreResult<(Vec<InvocationRecord>, Vec<RunApproval>)>;
}
