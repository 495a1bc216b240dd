//! Runs, spans and feedback on PostgreSQL: the same rules as the embedded store.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::{in_transaction, Mode, Tx};
use super::rows::{self, col, corrupt, id, id_opt, millis, millis_opt};
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::records::{Actor, InvocationRecord};
use crate::runs::*;
use crate::store::Runs;
use async_trait::async_trait;
use serde_json::{json, Value};
use steward_core::{EnvironmentId, FeedbackId, InvocationId, RunId};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

const RUN_COLUMNS: &str =
    "id, env_id, status, name, agent_id, user_id, trace_id, body, started_at, ended_at, updated_at";

fn run_row(row: &Row) -> StoreResult<RunRecord> {
    let status: &str = col(row, 2)?;
    let body: &str = col(row, 7)?;
    Ok(RunRecord {
        id: id(row, 0, RunId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        status: RunStatus::parse(status).ok_or_else(|| corrupt("run status", status))?,
        name: col(row, 3)?,
        agent_id: col(row, 4)?,
        user_id: col(row, 5)?,
        trace_id: col(row, 6)?,
        body: serde_json::from_str(body).map_err(|e| corrupt("run body", e))?,
        started_at: millis(row, 8)?,
        ended_at: millis_opt(row, 9)?,
        updated_at: millis(row, 10)?,
    })
}

fn span_row(row: &Row) -> StoreResult<SpanRecord> {
    let document: &str = col(row, 3)?;
    Ok(SpanRecord {
        run_id: id(row, 0, RunId::parse)?,
        span_id: col(row, 1)?,
        parent_span_id: col(row, 2)?,
        document: serde_json::from_str(document).map_err(|e| corrupt("span", e))?,
        created_at: millis(row, 4)?,
        updated_at: millis(row, 5)?,
    })
}

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
    Ok((col(row, 6)?, span_row(row)?))
}

fn outline_row(row: &Row) -> StoreResult<crate::SpanOutline> {
    Ok(crate::SpanOutline {
        seq: col(row, 0)?,
        span_id: col(row, 1)?,
        parent_span_id: col(row, 2)?,
        name: col(row, 3)?,
        kind: col(row, 4)?,
        status: col(row, 5)?,
        bytes: u64::try_from(col::<i32>(row, 6)?).unwrap_or(0),
    })
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

fn feedback_row(row: &Row) -> StoreResult<FeedbackRecord> {
    let document: &str = col(row, 4)?;
    Ok(FeedbackRecord {
        id: id(row, 0, FeedbackId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        run_id: id(row, 2, RunId::parse)?,
        span_id: col(row, 3)?,
        document: serde_json::from_str(document).map_err(|e| corrupt("feedback", e))?,
        created_at: millis(row, 5)?,
    })
}

fn approval_row(row: &Row) -> StoreResult<RunApproval> {
    Ok(RunApproval {
        id: col(row, 0)?,
        status: col(row, 1)?,
        title: col(row, 2)?,
        invocation_id: id_opt(row, 3, InvocationId::parse)?,
        created_at: millis(row, 4)?,
        decided_at: millis_opt(row, 5)?,
    })
}

fn body_text(body: &RunBody) -> String {
    serde_json::to_string(body).expect("a run body always serializes")
}

/// The audit record of a run's change: `runId`, `name`, `status`.
fn run_audit(r: &RunRecord) -> Value {
    json!({"runId": r.id, "name": r.name, "status": r.status.as_str()})
}

async fn run(tx: &Tx<'_>, env: &EnvironmentId, id: &RunId) -> StoreResult<Option<RunRecord>> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE env_id = $1 AND id = $2");
    tx.one(&sql, &[&env.as_str(), &id.as_str()], run_row).await
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
            append(
                &tx,
                actor,
                AuditEntry::new(AuditKind::RunStarted, r.env_id.as_str(), r.id.as_str())
                    .after(run_audit(r)),
            )
            .await
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
            append(
                &tx,
                actor,
                AuditEntry::new(
                    if after.status.is_terminal() {
                        AuditKind::RunEnded
                    } else {
                        AuditKind::RunUpdated
                    },
                    env.as_str(),
                    run_id.as_str(),
                )
                .before(run_audit(&before))
                .after(run_audit(&after)),
            )
            .await?;
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
        let mut term = |clause: &str, value: Box<dyn ToSql + Sync + Send>| {
            values.push(value);
            sql.push_str(&clause.replace('?', &format!("${}", values.len())));
        };
        if let Some(s) = &f.search {
            term(
                " AND strpos(lower(coalesce(name, '')), lower(?)) > 0",
                Box::new(s.clone()),
            );
        }
        if let Some(s) = f.status {
            term(" AND status = ?", Box::new(s.as_str()));
        }
        if let Some(a) = &f.agent_id {
            term(" AND agent_id = ?", Box::new(a.clone()));
        }
        if let Some(u) = &f.user_id {
            term(" AND user_id = ?", Box::new(u.clone()));
        }
        if let Some(t) = f.started_after {
            term(" AND started_at > ?", Box::new(t.0));
        }
        if let Some(t) = f.started_before {
            term(" AND started_at < ?", Box::new(t.0));
        }
        term(
            " ORDER BY started_at DESC, id DESC LIMIT ?",
            Box::new(i64::from(f.limit)),
        );
        term(" OFFSET ?", Box::new(i64::from(f.offset)));
        let refs: Vec<&(dyn ToSql + Sync)> = values
            .iter()
            .map(|v| v.as_ref() as &(dyn ToSql + Sync))
            .collect();
        in_transaction!(self, Mode::Read, |tx| tx.all(&sql, &refs, run_row))
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
            if existing.saturating_add(created) > spans_max {
                return Ok(SpansIngested::TooMany { existing });
            }
            for (i, s) in spans.iter().enumerate() {
                // `seq` orders the run's spans by first ingest; a replacement keeps its own.
                let seq = i64::try_from(existing + i).unwrap_or(i64::MAX);
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
                AuditEntry::new(AuditKind::RunSpansIngested, env.as_str(), run_id.as_str())
                    .after(json!({"runId": run_id, "created": created, "replaced": replaced})),
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
            span_row,
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
                    s.document::json->>'type', s.document::json->>'status', octet_length(s.document)
             FROM run_spans s JOIN runs r ON r.id = s.run_id
             WHERE r.env_id = $1 AND s.run_id = $2 ORDER BY s.seq",
            &[&env.as_str(), &run_id.as_str()],
            outline_row,
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
            span_row,
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
            append(
                &tx,
                actor,
                AuditEntry::new(
                    AuditKind::RunFeedbackAdded,
                    f.env_id.as_str(),
                    f.run_id.as_str(),
                )
                .after(json!({"runId": f.run_id, "feedbackId": f.id, "spanId": f.span_id})),
            )
            .await
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
            feedback_row,
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
                    approval_row,
                )
                .await?;
            Ok((invocations, approvals))
        })
    }
}
