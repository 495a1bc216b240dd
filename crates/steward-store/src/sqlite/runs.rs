//! Runs, spans and feedback on SQLite.

use super::audit_log::append;
use super::conn::{constraint, unavailable};
use super::rows::{self, col, corrupt, query_all, query_one};
use super::SqliteStore;
use crate::error::{StoreError, StoreResult};
use crate::records::{Actor, InvocationRecord};
use crate::run_rows::{self, body_text, filter_terms, FilterValue, RUN_COLUMNS};
use crate::runs::*;
use crate::store::Runs;
use async_trait::async_trait;
use rusqlite::{params, Connection, Row, ToSql};
use steward_core::{EnvironmentId, RunId};

/// A run as a list carries it: the large documents of its body elided while the row is read.
fn listed_run_row(row: &Row<'_>) -> StoreResult<RunRecord> {
    let body: String = col(row, 7)?;
    let elided = crate::elide_fields(&body, Some(&crate::RUN_ELIDED_FIELDS))
        .map_err(|e| corrupt("run body", e))?;
    let mut run = run_rows::run_with(row, RunBody::default())?;
    run.body = serde_json::from_value(elided).map_err(|e| corrupt("run body", e))?;
    Ok(run)
}

/// A span as a list or tree carries it: its large fields elided while the row is read.
fn listed_span_row(row: &Row<'_>) -> StoreResult<(i64, SpanRecord)> {
    let span = run_rows::span_with(row, |text| {
        crate::elide_document(text).map_err(|e| e.to_string())
    })?;
    Ok((col(row, 6)?, span))
}

/// A top-level text field of a span's document, or NULL when it is absent or not text.
fn text_field(name: &str) -> String {
    format!(
        "CASE WHEN json_type(s.document, '$.{name}') = 'text' THEN json_extract(s.document, '$.{name}') END"
    )
}

fn run(conn: &Connection, env: &EnvironmentId, id: &RunId) -> StoreResult<Option<RunRecord>> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE env_id = ?1 AND id = ?2");
    query_one(conn, &sql, &[&env.as_str(), &id.as_str()], |row| {
        run_rows::run(row)
    })
}

fn require_run(conn: &Connection, env: &EnvironmentId, id: &RunId) -> StoreResult<RunRecord> {
    run(conn, env, id)?.ok_or(StoreError::NotFound { what: "run" })
}

#[async_trait]
impl Runs for SqliteStore {
    async fn start_run(&self, r: &RunRecord, actor: &Actor) -> StoreResult<()> {
        let (r, actor) = (r.clone(), actor.clone());
        self.write(move |tx| {
            tx.execute(
                &format!(
                    "INSERT INTO runs ({RUN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
                ),
                params![
                    r.id.as_str(),
                    r.env_id.as_str(),
                    r.status.as_str(),
                    r.name,
                    r.agent_id,
                    r.user_id,
                    r.trace_id,
                    body_text(&r.body),
                    r.started_at.0,
                    r.ended_at.map(|t| t.0),
                    r.updated_at.0,
                ],
            )
            .map_err(|e| constraint(e, "run"))?;
            append(
                tx,
                &actor,
                run_rows::started(&r),
            )
        })
        .await
    }

    async fn end_run(
        &self,
        env: &EnvironmentId,
        id: &RunId,
        change: &RunEnd,
        actor: &Actor,
    ) -> StoreResult<Result<RunRecord, RunEndRefusal>> {
        let (env, id, change, actor) = (env.clone(), id.clone(), change.clone(), actor.clone());
        self.write(move |tx| {
            let before = require_run(tx, &env, &id)?;
            let after = match before.ended(&change, actor.now) {
                Ok(after) => after,
                Err(refusal) => return Ok(Err(refusal)),
            };
            tx.execute(
                "UPDATE runs SET status = ?1, body = ?2, ended_at = ?3, updated_at = ?4
                 WHERE env_id = ?5 AND id = ?6",
                params![
                    after.status.as_str(),
                    body_text(&after.body),
                    after.ended_at.map(|t| t.0),
                    after.updated_at.0,
                    env.as_str(),
                    id.as_str(),
                ],
            )
            .map_err(unavailable)?;
            append(tx, &actor, run_rows::changed(&before, &after))?;
            Ok(Ok(after))
        })
        .await
    }

    async fn run(&self, env: &EnvironmentId, id: &RunId) -> StoreResult<Option<RunRecord>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |conn| run(conn, &env, &id)).await
    }

    async fn list_runs(
        &self,
        env: &EnvironmentId,
        filter: &RunFilter,
    ) -> StoreResult<Vec<RunRecord>> {
        let (env, f) = (env.clone(), filter.clone());
        self.read(move |conn| {
            let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE env_id = ?1");
            let mut values: Vec<Box<dyn ToSql>> = vec![Box::new(env.as_str().to_string())];
            let search = " AND instr(lower(coalesce(name, '')), lower(?)) > 0";
            for (clause, value) in filter_terms(&f, search) {
                values.push(match value {
                    FilterValue::Text(text) => Box::new(text),
                    FilterValue::Integer(n) => Box::new(n),
                });
                sql.push_str(&clause.replace('?', &format!("?{}", values.len())));
            }
            let refs: Vec<&dyn ToSql> = values.iter().map(|v| v.as_ref()).collect();
            query_all(conn, &sql, &refs, listed_run_row)
        })
        .await
    }

    async fn ingest_spans(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
        spans: &[SpanRecord],
        spans_max: usize,
        actor: &Actor,
    ) -> StoreResult<SpansIngested> {
        let (env, run_id, spans, actor) =
            (env.clone(), run_id.clone(), spans.to_vec(), actor.clone());
        self.write(move |tx| {
            require_run(tx, &env, &run_id)?;
            let existing: i64 = tx
                .query_row(
                    "SELECT count(*) FROM run_spans WHERE run_id = ?1",
                    [run_id.as_str()],
                    |r| r.get(0),
                )
                .map_err(unavailable)?;
            let existing = usize::try_from(existing).unwrap_or(usize::MAX);
            let mut created = 0;
            for s in &spans {
                let known: bool = tx
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM run_spans WHERE run_id = ?1 AND span_id = ?2)",
                        params![run_id.as_str(), s.span_id],
                        |r| r.get(0),
                    )
                    .map_err(unavailable)?;
                if !known {
                    created += 1;
                }
            }
            if let Some(refused) = run_rows::spans_refused(existing, created, spans_max) {
                return Ok(refused);
            }
            for (i, s) in spans.iter().enumerate() {
                let seq = run_rows::span_seq(existing, i);
                tx.execute(
                    "INSERT INTO run_spans (run_id, span_id, parent_span_id, document, created_at, updated_at, seq)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)
                     ON CONFLICT (run_id, span_id) DO UPDATE SET
                       parent_span_id = excluded.parent_span_id,
                       document = excluded.document,
                       updated_at = excluded.updated_at",
                    params![
                        run_id.as_str(),
                        s.span_id,
                        s.parent_span_id,
                        s.document.to_string(),
                        actor.now.0,
                        seq,
                    ],
                )
                .map_err(unavailable)?;
            }
            let replaced = spans.len() - created;
            append(
                tx,
                &actor,
                run_rows::spans_ingested(&env, &run_id, created, replaced),
            )?;
            Ok(SpansIngested::Stored { created, replaced })
        })
        .await
    }

    async fn spans(&self, env: &EnvironmentId, run_id: &RunId) -> StoreResult<Vec<SpanRecord>> {
        let (env, run_id) = (env.clone(), run_id.clone());
        self.read(move |conn| {
            query_all(
                conn,
                "SELECT s.run_id, s.span_id, s.parent_span_id, s.document, s.created_at, s.updated_at
                 FROM run_spans s JOIN runs r ON r.id = s.run_id
                 WHERE r.env_id = ?1 AND s.run_id = ?2 ORDER BY s.seq",
                &[&env.as_str(), &run_id.as_str()],
                |row| run_rows::span(row),
            )
        })
        .await
    }

    async fn span_outlines(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
    ) -> StoreResult<Vec<crate::SpanOutline>> {
        let (env, run_id) = (env.clone(), run_id.clone());
        let sql = format!(
            "SELECT s.seq, s.span_id, s.parent_span_id, {}, {}, {}, length(CAST(s.document AS BLOB))
             FROM run_spans s JOIN runs r ON r.id = s.run_id
             WHERE r.env_id = ?1 AND s.run_id = ?2 ORDER BY s.seq",
            text_field("name"),
            text_field("type"),
            text_field("status"),
        );
        self.read(move |conn| {
            query_all(conn, &sql, &[&env.as_str(), &run_id.as_str()], |row| {
                run_rows::outline(row)
            })
        })
        .await
    }

    async fn span_page(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<(i64, SpanRecord)>> {
        let (env, run_id) = (env.clone(), run_id.clone());
        self.read(move |conn| {
            // Rows are decoded one at a time: each large document is parsed, elided and
            // dropped before the next is read.
            query_all(
                conn,
                "SELECT s.run_id, s.span_id, s.parent_span_id, s.document, s.created_at, s.updated_at, s.seq
                 FROM run_spans s JOIN runs r ON r.id = s.run_id
                 WHERE r.env_id = ?1 AND s.run_id = ?2 AND (?3 IS NULL OR s.seq > ?3)
                 ORDER BY s.seq LIMIT ?4",
                &[&env.as_str(), &run_id.as_str(), &after, &limit],
                listed_span_row,
            )
        })
        .await
    }

    async fn span(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
        span_id: &str,
    ) -> StoreResult<Option<SpanRecord>> {
        let (env, run_id, span_id) = (env.clone(), run_id.clone(), span_id.to_string());
        self.read(move |conn| {
            query_one(
                conn,
                "SELECT s.run_id, s.span_id, s.parent_span_id, s.document, s.created_at, s.updated_at
                 FROM run_spans s JOIN runs r ON r.id = s.run_id
                 WHERE r.env_id = ?1 AND s.run_id = ?2 AND s.span_id = ?3",
                &[&env.as_str(), &run_id.as_str(), &span_id],
                |row| run_rows::span(row),
            )
        })
        .await
    }

    async fn add_feedback(&self, f: &FeedbackRecord, actor: &Actor) -> StoreResult<()> {
        let (f, actor) = (f.clone(), actor.clone());
        self.write(move |tx| {
            require_run(tx, &f.env_id, &f.run_id)?;
            tx.execute(
                "INSERT INTO run_feedback (id, env_id, run_id, span_id, document, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    f.id.as_str(),
                    f.env_id.as_str(),
                    f.run_id.as_str(),
                    f.span_id,
                    f.document.to_string(),
                    f.created_at.0,
                ],
            )
            .map_err(|e| constraint(e, "feedback"))?;
            append(tx, &actor, run_rows::feedback_added(&f))
        })
        .await
    }

    async fn feedback(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
    ) -> StoreResult<Vec<FeedbackRecord>> {
        let (env, run_id) = (env.clone(), run_id.clone());
        self.read(move |conn| {
            query_all(
                conn,
                "SELECT id, env_id, run_id, span_id, document, created_at FROM run_feedback
                 WHERE env_id = ?1 AND run_id = ?2 ORDER BY created_at, id",
                &[&env.as_str(), &run_id.as_str()],
                |row| run_rows::feedback(row),
            )
        })
        .await
    }

    async fn run_timeline(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
    ) -> StoreResult<(Vec<InvocationRecord>, Vec<RunApproval>)> {
        let (env, run_id) = (env.clone(), run_id.clone());
        self.read(move |conn| {
            let sql = format!(
                "SELECT {} FROM invocations WHERE env_id = ?1 AND run_id = ?2 ORDER BY created_at, id",
                rows::invocation_listed_columns()
            );
            let invocations = query_all(
                conn,
                &sql,
                &[&env.as_str(), &run_id.as_str()],
                rows::invocation,
            )?;
            let approvals = query_all(
                conn,
                "SELECT id, status, title, invocation_id, created_at, decided_at FROM approvals
                 WHERE env_id = ?1 AND run_id = ?2 ORDER BY created_at, id",
                &[&env.as_str(), &run_id.as_str()],
                |row| run_rows::approval(row),
            )?;
            Ok((invocations, approvals))
        })
        .await
    }
}
