//! Runs, spans and feedback, the same in every backend: the columns read, how a row becomes a
//! record, the terms a run list filters by, how many spans a batch may add, and what the audit
//! log records. The backends keep only their SQL and their locking (`sqlite/runs.rs`,
//! `postgres/runs.rs`).

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::columns::Columns;
use crate::error::{StoreError, StoreResult};

use crate::elide::SpanOutline;
use crate::runs::*;
use serde_json::{json, Value};
use steward_core::{EnvironmentId, FeedbackId, InvocationId, Millis, RunId};

/// The columns [`run`] reads, in its order.
pub(crate) const RUN_COLUMNS: &str =
    "id, env_id, status, name, agent_id, user_id, trace_id, body, started_at, ended_at, updated_at";

fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {detail}"))
}

/// One row of [`RUN_COLUMNS`], its body read whole.
pub(crate) fn run(row: &impl Columns) -> StoreResult<RunRecord> {
    let body: String = row.get(7)?;
    let body = serde_json::from_str(&body).map_err(|e| corrupt("run body", e))?;
    run_with(row, body)
}

/// One row of [`RUN_COLUMNS`] with `body` as its body (read whole or elided by the caller).
pub(crate) fn run_with(row: &impl Columns, body: RunBody) -> StoreResult<RunRecord> {
    let status: String = row.get(2)?;
    Ok(RunRecord {
        id: row.id(0, RunId::parse)?,
        env_id: row.id(1, EnvironmentId::parse)?,
        status: RunStatus::parse(&status).ok_or_else(|| corrupt("run status", &status))?,
        name: row.get(3)?,
        agent_id: row.get(4)?,
        user_id: row.get(5)?,
        trace_id: row.get(6)?,
        body,
        started_at: row.millis(8)?,
        ended_at: row.get::<Option<i64>>(9)?.map(Millis),
        updated_at: row.millis(10)?,
    })
}

/// A span's row (`run_id, span_id, parent_span_id, document, created_at, updated_at`), its
/// document as `read` turns the stored text into JSON (whole, or elided for a list).
pub(crate) fn span_with(
    row: &impl Columns,
    read: impl FnOnce(&str) -> Result<Value, String>,
) -> StoreResult<SpanRecord> {
    let document: String = row.get(3)?;
    Ok(SpanRecord {
        run_id: row.id(0, RunId::parse)?,
        span_id: row.get(1)?,
        parent_span_id: row.get(2)?,
        document: read(&document).map_err(|e| corrupt("span", e))?,
        created_at: row.millis(4)?,
        updated_at: row.millis(5)?,
    })
}

/// A span's row, its document read whole.
pub(crate) fn span(row: &impl Columns) -> StoreResult<SpanRecord> {
    span_with(row, |text| {
        serde_json::from_str(text).map_err(|e| e.to_string())
    })
}

/// A span's outline (`seq, span_id, parent_span_id, name, type, status, bytes`).
pub(crate) fn outline(row: &impl Columns) -> StoreResult<SpanOutline> {
    Ok(SpanOutline {
        seq: row.get(0)?,
        span_id: row.get(1)?,
        parent_span_id: row.get(2)?,
        name: row.get(3)?,
        kind: row.get(4)?,
        status: row.get(5)?,
        bytes: u64::try_from(row.get::<i64>(6)?).unwrap_or(0),
    })
}

/// A feedback's row (`id, env_id, run_id, span_id, document, created_at`).
pub(crate) fn feedback(row: &impl Columns) -> StoreResult<FeedbackRecord> {
    let document: String = row.get(4)?;
    Ok(FeedbackRecord {
        id: row.id(0, FeedbackId::parse)?,
        env_id: row.id(1, EnvironmentId::parse)?,
        run_id: row.id(2, RunId::parse)?,
        span_id: row.get(3)?,
        document: serde_json::from_str(&document).map_err(|e| corrupt("feedback", e))?,
        created_at: row.millis(5)?,
    })
}

/// An approval on a run's timeline (`id, status, title, invocation_id, created_at, decided_at`).
pub(crate) fn approval(row: &impl Columns) -> StoreResult<RunApproval> {
    Ok(RunApproval {
        id: row.get(0)?,
        status: row.get(1)?,
        title: row.get(2)?,
        invocation_id: row
            .get::<Option<String>>(3)?
            .map(|i| InvocationId::parse(&i).map_err(|e| corrupt("approval invocation", e)))
            .transpose()?,
        created_at: row.millis(4)?,
        decided_at: row.get::<Option<i64>>(5)?.map(Millis),
    })
}

/// A run's body as it is stored.
pub(crate) fn body_text(body: &RunBody) -> String {
    serde_json::to_string(body).expect("a run body always serializes")
}

/// A value a run list is filtered, limited or offset by.
pub(crate) enum FilterValue {
    Text(String),
    Integer(i64),
}

/// What a run list adds after `env_id = <its first parameter>`: each term a clause with `?`
/// where its value goes (the backend numbers it), in order, ending with the order, the limit
/// and the offset. `search` is the backend's clause for "the name contains `?`, ignoring case".
pub(crate) fn filter_terms<'a>(f: &RunFilter, search: &'a str) -> Vec<(&'a str, FilterValue)> {
    let mut terms = Vec::new();
    if let Some(s) = &f.search {
        terms.push((search, FilterValue::Text(s.clone())));
    }
    if let Some(s) = f.status {
        terms.push((" AND status = ?", FilterValue::Text(s.as_str().to_string())));
    }
    if let Some(a) = &f.agent_id {
        terms.push((" AND agent_id = ?", FilterValue::Text(a.clone())));
    }
    if let Some(u) = &f.user_id {
        terms.push((" AND user_id = ?", FilterValue::Text(u.clone())));
    }
    if let Some(t) = f.started_after {
        terms.push((" AND started_at > ?", FilterValue::Integer(t.0)));
    }
    if let Some(t) = f.started_before {
        terms.push((" AND started_at < ?", FilterValue::Integer(t.0)));
    }
    terms.push((
        " ORDER BY started_at DESC, id DESC LIMIT ?",
        FilterValue::Integer(i64::from(f.limit)),
    ));
    terms.push((" OFFSET ?", FilterValue::Integer(i64::from(f.offset))));
    terms
}

/// `Some(TooMany)` when a batch adding `created` spans to a run holding `existing` would hold
/// more than `spans_max`: the batch writes nothing.
pub(crate) fn spans_refused(
    existing: usize,
    created: usize,
    spans_max: usize,
) -> Option<SpansIngested> {
    (existing.saturating_add(created) > spans_max).then_some(SpansIngested::TooMany { existing })
}

/// The `seq` of the `i`th span of a batch into a run holding `existing`: `seq` orders the run's
/// spans by first ingest; a replacement keeps its own.
pub(crate) fn span_seq(existing: usize, i: usize) -> i64 {
    i64::try_from(existing + i).unwrap_or(i64::MAX)
}

/// The audit record of a run's change: `runId`, `name`, `status`.
pub(crate) fn run_audit(r: &RunRecord) -> Value {
    json!({"runId": r.id, "name": r.name, "status": r.status.as_str()})
}

/// A run started.
pub(crate) fn started(r: &RunRecord) -> AuditEntry {
    AuditEntry::new(AuditKind::RunStarted, r.env_id.as_str(), r.id.as_str()).after(run_audit(r))
}

/// A run changed from `before` to `after`: ended if `after` is terminal, updated otherwise.
pub(crate) fn changed(before: &RunRecord, after: &RunRecord) -> AuditEntry {
    let kind = if after.status.is_terminal() {
        AuditKind::RunEnded
    } else {
        AuditKind::RunUpdated
    };
    AuditEntry::new(kind, after.env_id.as_str(), after.id.as_str())
        .before(run_audit(before))
        .after(run_audit(after))
}

/// A batch of spans stored: how many were new and how many replaced one of the same id.
pub(crate) fn spans_ingested(
    env: &EnvironmentId,
    run_id: &RunId,
    created: usize,
    replaced: usize,
) -> AuditEntry {
    AuditEntry::new(AuditKind::RunSpansIngested, env.as_str(), run_id.as_str())
        .after(json!({"runId": run_id, "created": created, "replaced": replaced}))
}

/// Feedback added to a run.
pub(crate) fn feedback_added(f: &FeedbackRecord) -> AuditEntry {
    AuditEntry::new(
        AuditKind::RunFeedbackAdded,
        f.env_id.as_str(),
        f.run_id.as_str(),
    )
    .after(json!({"runId": f.run_id, "feedbackId": f.id, "spanId": f.span_id}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clauses(f: &RunFilter) -> Vec<&str> {
        filter_terms(f, " SEARCH ?")
            .into_iter()
            .map(|(c, _)| c)
            .collect()
    }

    #[test]
    fn a_run_list_filters_by_what_is_given_then_orders_limits_and_offsets() {
        let bare = RunFilter {
            limit: 10,
            offset: 20,
            ..RunFilter::default()
        };
        assert_eq!(
            clauses(&bare),
            [" ORDER BY started_at DESC, id DESC LIMIT ?", " OFFSET ?"]
        );
        let full = RunFilter {
            search: Some("nightly".into()),
            status: Some(RunStatus::Failed),
            agent_id: Some("agent".into()),
            user_id: Some("user".into()),
            started_after: Some(Millis(1)),
            started_before: Some(Millis(2)),
            ..bare
        };
        assert_eq!(
            clauses(&full),
            [
                " SEARCH ?",
                " AND status = ?",
                " AND agent_id = ?",
                " AND user_id = ?",
                " AND started_at > ?",
                " AND started_at < ?",
                " ORDER BY started_at DESC, id DESC LIMIT ?",
                " OFFSET ?",
            ]
        );
        let values: Vec<String> = filter_terms(&full, " SEARCH ?")
            .into_iter()
            .map(|(_, v)| match v {
                FilterValue::Text(t) => t,
                FilterValue::Integer(n) => n.to_string(),
            })
            .collect();
        assert_eq!(
            values,
            ["nightly", "failed", "agent", "user", "1", "2", "10", "20"]
        );
    }

    #[test]
    fn a_batch_over_the_bound_is_refused_with_what_the_run_holds() {
        assert_eq!(spans_refused(3, 2, 5), None);
        assert_eq!(
            spans_refused(3, 3, 5),
            Some(SpansIngested::TooMany { existing: 3 })
        );
        assert_eq!(
            spans_refused(usize::MAX, 1, 5),
            Some(SpansIngested::TooMany {
                existing: usize::MAX
            })
        );
        assert_eq!(span_seq(4, 1), 5);
    }
}
