//! Connections: one writer behind a mutex (SQLite has one writer at a time anyway) and a small
//! pool of readers, which WAL lets run alongside the writer. All work runs on tokio's blocking
//! pool so the async runtime never waits on disk.

use crate::error::{StoreError, StoreResult};
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// How long a connection waits for another process's write lock (the CLI writing keys while the
/// server runs) before giving up, in milliseconds.
const BUSY_TIMEOUT_MS: u64 = 5_000;
/// Readers kept open for reuse; more are opened on demand and dropped after use.
const READERS_KEPT_MAX: usize = 8;

pub(crate) struct Pool {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
}

pub(crate) fn unavailable(err: rusqlite::Error) -> StoreError {
    StoreError::Unavailable {
        message: err.to_string(),
        source: Some(Box::new(err)),
    }
}

fn open_connection(path: &Path) -> StoreResult<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags).map_err(unavailable)?;
    conn.busy_timeout(std::time::Duration::from_millis(BUSY_TIMEOUT_MS))
        .map_err(unavailable)?;
    // WAL lets readers run during a write. synchronous=FULL fsyncs the WAL on every commit, so
    // a commit that returned survives a power cut, not just a process crash.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(unavailable)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(unavailable)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(unavailable)?;
    Ok(conn)
}

impl Pool {
    pub(crate) fn open(path: &Path) -> StoreResult<Arc<Pool>> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Unavailable {
                message: format!("cannot create {}: {e}", dir.display()),
                source: Some(Box::new(e)),
            })?;
        }
        let writer = open_connection(path)?;
        writer
            .execute_batch(super::schema::SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::APPROVAL_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::GOVERNANCE_SCHEMA)
            .map_err(unavailable)?;
        Ok(Arc::new(Pool {
            path: path.to_path_buf(),
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
        }))
    }

    /// Runs `f` in one IMMEDIATE transaction and commits; nothing is committed if `f` fails.
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut conn = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(unavailable)?;
        let value = f(&tx)?;
        tx.commit().map_err(unavailable)?;
        Ok(value)
    }

    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> StoreResult<T>) -> StoreResult<T> {
        let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => open_connection(&self.path)?,
        };
        let result = f(&conn);
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if readers.len() < READERS_KEPT_MAX {
            readers.push(conn);
        }
        result
    }
}

/// Runs blocking store work off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> StoreResult<T> + Send + 'static,
) -> StoreResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Unavailable {
            message: format!("storage task failed: {e}"),
            source: None,
        })?
}
