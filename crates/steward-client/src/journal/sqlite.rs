//! The embedded journal: one table in the application's SQLite file, WAL mode with
//! `synchronous=FULL`, so a committed transaction's WAL frames are fsync'd before it returns.

use super::row::{decode, json_text, RawRow, COLUMNS};
use super::{Begun, Journal, JournalError};
use crate::operation::{Operation, OperationId};
use crate::state::LocalState;
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use steward_core::{ApprovalId, EffectId, InvocationId, InvocationStatus};

/// How long a writer waits for another connection's lock, in milliseconds: long enough for a
/// second process on the same file (an operator's tool, `steward chaos`) to finish a read.
const BUSY_TIMEOUT_MS: u64 = 5_000;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS steward_operations (
    id                TEXT PRIMARY KEY,
    environment       TEXT NOT NULL,
    action            TEXT NOT NULL,
    operation_key     TEXT NOT NULL,
    input             TEXT NOT NULL,
    input_fingerprint TEXT NOT NULL,
    idempotency_key   TEXT NOT NULL,
    retry_of          TEXT,
    state             TEXT NOT NULL,
    invocation_id     TEXT,
    effect_id         TEXT,
    approval_id       TEXT,
    server_status     TEXT,
    server_record     TEXT,
    result            TEXT,
    last_error        TEXT,
    assignee          TEXT,
    attempt_count     INTEGER NOT NULL,
    version           INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    UNIQUE (environment, action, operation_key)
);
CREATE INDEX IF NOT EXISTS steward_operations_unfinished
    ON steward_operations (state, created_at);
";

/// A journal in a SQLite file (created if missing). Other tables of the application may live in
/// the same file; this one is `steward_operations`.
#[derive(Clone)]
pub struct SqliteJournal {
    conn: Arc<Mutex<Connection>>,
}

fn storage(context: &'static str) -> impl FnOnce(rusqlite::Error) -> JournalError {
    move |e| JournalError::Storage {
        context,
        source: Box::new(e),
    }
}

impl SqliteJournal {
    /// Opens (and if needed creates) the journal in `path`.
    pub fn open(path: &Path) -> Result<SqliteJournal, JournalError> {
        let conn = Connection::open(path).map_err(storage("opening the database"))?;
        conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
            .map_err(storage("setting the busy timeout"))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(storage("enabling WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(JournalError::Storage {
                context: "enabling WAL",
                source: format!("the database stays in {mode} mode").into(),
            });
        }
        conn.execute_batch("PRAGMA synchronous=FULL;")
            .map_err(storage("setting synchronous=FULL"))?;
        conn.execute_batch(SCHEMA)
            .map_err(storage("creating the journal table"))?;
        Ok(SqliteJournal {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `work` on a blocking thread with the connection.
    async fn with<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, JournalError> + Send + 'static,
    ) -> Result<T, JournalError> {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            work(&mut guard)
        })
        .await
        .map_err(|e| JournalError::Storage {
            context: "running a journal task",
            source: Box::new(e),
        })?
    }
}

fn raw(row: &Row<'_>) -> rusqlite::Result<RawRow> {
    let mut text: [Option<String>; 17] = Default::default();
    for (i, slot) in text.iter_mut().enumerate() {
        *slot = row.get(i)?;
    }
    Ok(RawRow {
        text,
        attempt_count: row.get(17)?,
        version: row.get(18)?,
        created_at: row.get(19)?,
        updated_at: row.get(20)?,
    })
}

fn select(
    conn: &Connection,
    filter: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<Vec<Operation>, JournalError> {
    let sql = format!("SELECT {COLUMNS} FROM steward_operations {filter}");
    let mut stmt = conn.prepare(&sql).map_err(storage("reading operations"))?;
    let rows = stmt
        .query_map(args, raw)
        .map_err(storage("reading operations"))?
        .collect::<rusqlite::Result<Vec<RawRow>>>()
        .map_err(storage("reading operations"))?;
    rows.into_iter().map(decode).collect()
}

fn insert(conn: &Connection, op: &Operation) -> rusqlite::Result<usize> {
    conn.execute(
        &format!(
            "INSERT INTO steward_operations ({COLUMNS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"
        ),
        params![
            op.id.as_str(),
            op.environment,
            op.action,
            op.operation_key.as_str(),
            op.input.to_string(),
            op.input_fingerprint,
            op.idempotency_key.as_str(),
            op.retry_of.as_ref().map(InvocationId::as_str),
            op.state.as_str(),
            op.invocation_id.as_ref().map(InvocationId::as_str),
            op.effect_id.as_ref().map(EffectId::as_str),
            op.approval_id.as_ref().map(ApprovalId::as_str),
            op.server_status.map(InvocationStatus::as_str),
            json_text(&op.server_record),
            json_text(&op.result),
            op.last_error,
            op.assignee,
            op.attempt_count,
            op.version as i64,
            op.created_at.0,
            op.updated_at.0,
        ],
    )
}

#[async_trait]
impl Journal for SqliteJournal {
    async fn begin(&self, intended: &Operation) -> Result<Begun, JournalError> {
        assert_eq!(
            intended.state,
            LocalState::Intended,
            "begin records intents only ({})",
            intended.id
        );
        let op = intended.clone();
        self.with(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(storage("beginning an operation"))?;
            let existing = select(
                &tx,
                "WHERE environment = ?1 AND action = ?2 AND operation_key = ?3",
                &[&op.environment, &op.action, &op.operation_key.as_str()],
            )?
            .into_iter()
            .next();
            if let Some(existing) = existing {
                return if existing.input_fingerprint == op.input_fingerprint {
                    Ok(Begun::Existing(existing))
                } else {
                    Err(JournalError::KeyConflict {
                        action: op.action.clone(),
                        key: op.operation_key.as_str().to_string(),
                        existing: existing.id,
                    })
                };
            }
            insert(&tx, &op).map_err(storage("recording an intent"))?;
            tx.commit().map_err(storage("committing an intent"))?;
            Ok(Begun::Created(op))
        })
        .await
    }

    async fn save(&self, op: &Operation) -> Result<Operation, JournalError> {
        let mut next = op.clone();
        next.version = op.version + 1;
        self.with(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE steward_operations SET state = ?1, invocation_id = ?2, effect_id = ?3, \
                     approval_id = ?4, server_status = ?5, server_record = ?6, result = ?7, \
                     last_error = ?8, assignee = ?9, attempt_count = ?10, version = ?11, \
                     updated_at = ?12 WHERE id = ?13 AND version = ?14",
                    params![
                        next.state.as_str(),
                        next.invocation_id.as_ref().map(InvocationId::as_str),
                        next.effect_id.as_ref().map(EffectId::as_str),
                        next.approval_id.as_ref().map(ApprovalId::as_str),
                        next.server_status.map(InvocationStatus::as_str),
                        json_text(&next.server_record),
                        json_text(&next.result),
                        next.last_error,
                        next.assignee,
                        next.attempt_count,
                        next.version as i64,
                        next.updated_at.0,
                        next.id.as_str(),
                        (next.version - 1) as i64,
                    ],
                )
                .map_err(storage("saving an operation"))?;
            if changed == 1 {
                return Ok(next);
            }
            let exists: Option<i64> = conn
                .query_row(
                    "SELECT version FROM steward_operations WHERE id = ?1",
                    [next.id.as_str()],
                    |r| r.get(0),
                )
                .optional()
                .map_err(storage("checking an operation's version"))?;
            Err(match exists {
                Some(_) => JournalError::Stale {
                    id: next.id.clone(),
                    expected: next.version - 1,
                },
                None => JournalError::NotFound {
                    id: next.id.clone(),
                },
            })
        })
        .await
    }

    async fn get(&self, id: &OperationId) -> Result<Option<Operation>, JournalError> {
        let id = id.as_str().to_string();
        self.with(move |conn| Ok(select(conn, "WHERE id = ?1", &[&id])?.into_iter().next()))
            .await
    }

    async fn unfinished(&self) -> Result<Vec<Operation>, JournalError> {
        self.with(|conn| {
            select(
                conn,
                "WHERE state <> 'continued' ORDER BY created_at, id",
                &[],
            )
        })
        .await
    }

    async fn all(&self) -> Result<Vec<Operation>, JournalError> {
        self.with(|conn| select(conn, "ORDER BY created_at, id", &[]))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_sqlite_journal_passes_the_conformance_suite() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = 0;
        super::super::conformance::run_all(|| {
            n += 1;
            SqliteJournal::open(&dir.path().join(format!("journal-{n}.db"))).unwrap()
        })
        .await;
    }

    #[tokio::test]
    async fn records_survive_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.db");
        let op = super::super::conformance::sample("order-1", serde_json::json!({"amount": 5}));
        {
            let journal = SqliteJournal::open(&path).unwrap();
            journal.begin(&op).await.unwrap();
        }
        let reopened = SqliteJournal::open(&path).unwrap();
        assert_eq!(reopened.unfinished().await.unwrap(), vec![op]);
        let mode: String = reopened
            .conn
            .lock()
            .unwrap()
            .query_row("PRAGMA synchronous", [], |r| {
                r.get::<_, i64>(0).map(|v| v.to_string())
            })
            .unwrap();
        assert_eq!(mode, "2", "synchronous=FULL");
    }
}
