//! Runs, spans and feedback on PostgreSQL: the same rules as the embedded store.

use super::audit_log::append;
use super::conn::{in_transaction, Mode, Tx};
use super::rows::{self, col};
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::records::{Actor, InvocationRecord};
use crate::run_rows::{self, body_text, filter_terms, FilterValue, RUN_COLUMNS};
use crate::runs::*;
use crate::store::Runs;
use async_trait::async_trait;
use steward_core::{EnvironmentId, RunId};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// [`RUN_COLUMNS`] for a list: each of the body's [`crate::RUN_ELIDED_FIELDS`] longer than
/// [`crate::LISTED_FIELD_BYTES_MAX`] replaced, in the query, by its elision marker.
fn listed_run_columns() -> String {
    let names = crate::RUN_ELIDED_FIELDS
        .iter()
        .map(|f| format!("'{f}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let body = format!(
        "CASE WHEN octet_length(body) <= {max} THEN body ELSE
           (SELECT COALESCE(json_object_agg(e.key, CASE WHEN e.key IN ({names})
                AND octet_length(e.value::text) > {max}
                THEN json_build_object('{key}', octet_length(e.value::text)) ELSE e.value END), '{{}}'::json)::text
            FROM json_each(body::json) e) END",
        max = crate::LISTED_FIELD_BYTES_MAX,
        key = crate::ELIDED_KEY,
    );
    RUN_COLUMNS.replace(" body,", &format!(" {body},"))
}

fn listed_span_row(row: &Row) -> StoreResult<(i64, SpanRecord)> {
    Ok((col(row, 6)?, run_rows::span(row)?))
}

/// A span's document as a list carries it: each top-level field longer than
/// [`crate::LISTED_FIELD_BYTES_MAX`] replaced, in the query, by its elision marker. `json` (not
/// `jsonb`) keeps each field's text as stored, so the sizes are those SQLite counts.
fn listed_document() -> String {
    format!(
        "CASE WHEN octet_length(s.document) <= {max} THEN s.document ELSE
           (SELECT COALESCE(json_object_agg(e.key, CASE WHEN octet_length(e.value::text) > {max}
                THEN json_build_object('{key}', octet_length(e.value::text)) ELSE e.value END), '{{}}'::json)::text
            FROM json_each(s.document::json) e) END",
        max = crate::LISTED_FIELD_BYTES_MAX,
        key = crate::ELIDED_KEY,
    )
}

async fn run(tx: &Tx<'_>, env: &EnvironmentId, id: &RunId) -> StoreResult<Option<RunRecord>> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE env_id = $1 AND id = $2");
    tx.one(&sql, &[&env.as_str(), &id.as_str()], run_rows::run)
        .await
}

async fn require_run(tx: &Tx<'_>, env: &EnvironmentId, id: &RunId) -> StoreResult<RunRecord> {
    run(tx, env, id)
        .await?
        .ok_or(StoreError::NotFound { what: "run" })
}

#[async_trait]
impl Runs for PostgresStore {
    async fn start_run(&self, r: &RunRecord, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            let ended_at = r.ended_at.map(|t| t.0);
            tx.execute_unique(
                "run",
                &format!(
                    "INSERT INTO runs ({RUN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
                ),
                &[
                    &r.id.as_str(), &r.env_id.as_str(), &r.status.as_str(), &r.name, &r.agent_id,
                    &r.user_id, &r.trace_id, &body_text(&r.body), &r.started_at.0, &ended_at,
                    &r.updated_at.0,
                ],
            )
            .await?;
            append(&tx, actor, run_rows::started(r)).await
        })
    }

    async fn end_run(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
        change: &RunEnd,
        actor: &Actor,
    ) -> StoreResult<Result<RunRecord, RunEndRefusal>> {
        in_transaction!(self, Mode::Write, |tx| async {
            // Serializes ends of the same run: the second reads what the first wrote.
            tx.execute(
                "SELECT 1 FROM runs WHERE env_id = $1 AND id = $2 FOR UPDATE",
                &[&env.as_str(), &run_id.as_str()],
            )
            .await?;
            let before = require_run(&tx, env, run_id).await?;
            let after = match before.ended(change, actor.now) {
                Ok(after) => after,
                Err(refusal) => return Ok(Err(refusal)),
            };
            let ended_at = after.ended_at.map(|t| t.0);
            tx.execute(
                "UPDATE runs SET status = $1, body = $2, ended_at = $3, updated_at = $4
                 WHERE env_id = $5 AND id = $6",
                &[
                    &after.status.as_str(),
                    &body_text(&after.body),
                    &ended_at,
                    &after.updated_at.0,
                    &env.as_str(),
                    &run_id.as_str(),
                ],
            )
            .await?;
            append(&tx, actor, run_rows::changed(&before, &after)).await?;
            Ok(Ok(after))
        })
    }

    async fn run(&self, env: &EnvironmentId, run_id: &RunId) -> StoreResult<Option<RunRecord>> {
        in_transaction!(self, Mode::Read, |tx| run(&tx, env, run_id))
    }

    async fn list_runs(&self, env: &EnvironmentId, f: &RunFilter) -> StoreResult<Vec<RunRecord>> {
        let mut sql = format!(
            "SELECT {} FROM runs WHERE env_id = $1",
            listed_run_columns()
        );
        let mut values: Vec<Box<dyn ToSql + Sync + Send>> =
            vec![Box::new(env.as_str().to_string())];
        let search = " AND strpos(lower(coalesce(name, '')), lower(?)) > 0";
        for (clause, value) in filter_terms(f, search) {
            values.push(match value {
                FilterValue::Text(text) => Box::new(text),
                FilterValue::Integer(n) => Box::new(n),
            });
            sql.push_str(&clause.replace('?', &format!("${}", values.len())));
        }
        let refs: Vec<&(dyn ToSql + Sync)> = values
            .iter()
            .map(|v| v.as_ref() as &(dyn ToSql + Sync))
            .collect();
        in_transaction!(self, Mode::Read, |tx| tx.all(&sql, &refs, run_rows::run))
    }

    async fn ingest_spans(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
        spans: &[SpanRecord],
        spans_max: usize,
        actor: &Actor,
    ) -> StoreResult<SpansIngested> {
        in_transaction!(self, Mode::Write, |tx| async {
            // Serializes ingests into the same run, so the bound holds.
            tx.execute(
                "SELECT 1 FROM runs WHERE env_id = $1 AND id = $2 FOR UPDATE",
                &[&env.as_str(), &run_id.as_str()],
            )
            .await?;
            require_run(&tx, env, run_id).await?;
            let existing = tx
                .count(
                    "SELECT count(*) FROM run_spans WHERE run_id = $1",
                    &[&run_id.as_str()],
                )
                .await?;
            let existing = usize::try_from(existing).unwrap_or(usize::MAX);
            let mut created = 0;
            for s in spans {
                let known = tx
                    .count(
                        "SELECT count(*) FROM run_spans WHERE run_id = $1 AND span_id = $2",
                        &[&run_id.as_str(), &s.span_id],
                    )
                    .await?;
                if known == 0 {
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
                     VALUES ($1, $2, $3, $4, $5, $5, $6)
                     ON CONFLICT (run_id, span_id) DO UPDATE SET
                       parent_span_id = excluded.parent_span_id,
                       document = excluded.document,
                       updated_at = excluded.updated_at",
                    &[
                        &run_id.as_str(),
                        &s.span_id,
                        &s.parent_span_id,
                        &s.document.to_string(),
                        &actor.now.0,
                        &seq,
                    ],
                )
                .await?;
            }
            let replaced = spans.len() - created;
            append(
                &tx,
                actor,
                run_rows::spans_ingested(env, run_id, created, replaced),
            )
            .await?;
            Ok(SpansIngested::Stored { created, replaced })
        })
    }

    async fn spans(&self, env: &EnvironmentId, run_id: &RunId) -> StoreResult<Vec<SpanRecord>> {
        in_transaction!(self, Mode::Read, |tx| tx.all(
            "SELECT s.run_id, s.span_id, s.parent_span_id, s.document, s.created_at, s.updated_at
             FROM run_spans s JOIN runs r ON r.id = s.run_id
             WHERE r.env_id = $1 AND s.run_id = $2 ORDER BY s.seq",
            &[&env.as_str(), &run_id.as_str()],
            run_rows::span,
        ))
    }

    async fn span_outlines(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
    ) -> StoreResult<Vec<crate::SpanOutline>> {
        // `->>` answers the text of a string and the JSON text of anything else; a name that
        // is not a string is refused at ingest.
        in_transaction!(self, Mode::Read, |tx| tx.all(
            "SELECT s.seq, s.span_id, s.parent_span_id, s.document::json->>'name',
                    s.document::json->>'type', s.document::json->>'status',
                    octet_length(s.document)::BIGINT
             FROM run_spans s JOIN runs r ON r.id = s.run_id
             WHERE r.env_id = $1 AND s.run_id = $2 ORDER BY s.seq",
            &[&env.as_str(), &run_id.as_str()],
            run_rows::outline,
        ))
    }

    async fn span_page(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
        after: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<(i64, SpanRecord)>> {
        let sql = format!(
            "SELECT s.run_id, s.span_id, s.parent_span_id, {}, s.created_at, s.updated_at, s.seq
             FROM run_spans s JOIN runs r ON r.id = s.run_id
             WHERE r.env_id = $1 AND s.run_id = $2 AND ($3::bigint IS NULL OR s.seq > $3)
             ORDER BY s.seq LIMIT $4",
            listed_document()
        );
        let limit = i64::from(limit);
        in_transaction!(self, Mode::Read, |tx| tx.all(
            &sql,
            &[&env.as_str(), &run_id.as_str(), &after, &limit],
            listed_span_row,
        ))
    }

    async fn span(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
        span_id: &str,
    ) -> StoreResult<Option<SpanRecord>> {
        in_transaction!(self, Mode::Read, |tx| tx.one(
            "SELECT s.run_id, s.span_id, s.parent_span_id, s.document, s.created_at, s.updated_at
             FROM run_spans s JOIN runs r ON r.id = s.run_id
             WHERE r.env_id = $1 AND s.run_id = $2 AND s.span_id = $3",
            &[&env.as_str(), &run_id.as_str(), &span_id],
            run_rows::span,
        ))
    }

    async fn add_feedback(&self, f: &FeedbackRecord, actor: &Actor) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            require_run(&tx, &f.env_id, &f.run_id).await?;
            tx.execute_unique(
                "feedback",
                "INSERT INTO run_feedback (id, env_id, run_id, span_id, document, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &f.id.as_str(),
                    &f.env_id.as_str(),
                    &f.run_id.as_str(),
                    &f.span_id,
                    &f.document.to_string(),
                    &f.created_at.0,
                ],
            )
            .await?;
            append(&tx, actor, run_rows::feedback_added(f)).await
        })
    }

    async fn feedback(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
    ) -> StoreResult<Vec<FeedbackRecord>> {
        in_transaction!(self, Mode::Read, |tx| tx.all(
            "SELECT id, env_id, run_id, span_id, document, created_at FROM run_feedback
             WHERE env_id = $1 AND run_id = $2 ORDER BY created_at, id",
            &[&env.as_str(), &run_id.as_str()],
            run_rows::feedback,
        ))
    }

    async fn run_timeline(
        &self,
        env: &EnvironmentId,
        run_id: &RunId,
    ) -> StoreResult<(Vec<InvocationRecord>, Vec<RunApproval>)> {
        let sql = format!(
            "SELECT {} FROM invocations WHERE env_id = $1 AND run_id = $2 ORDER BY created_at, id",
            rows::invocation_listed_columns()
        );
        in_transaction!(self, Mode::Read, |tx| async {
            let invocations = tx
                .all(&sql, &[&env.as_str(), &run_id.as_str()], rows::invocation)
                .await?;
            let approvals = tx
                .all(
                    "SELECT id, status, title, invocation_id, created_at, decided_at FROM approvals
                     WHERE env_id = $1 AND run_id = $2 ORDER BY created_at, id",
                    &[&env.as_str(), &run_id.as_str()],
                    run_rows::approval,
                )
                .await?;
            Ok((invocations, approvals))
        })
    }
}
