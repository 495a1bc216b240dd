//! The embedded store: SQLite on disk, WAL, `synchronous=FULL`. Each part of the store is
//! implemented in the module of its name, beside its SQL: `impl Identity for SqliteStore` in
//! `identity.rs`, and so on; a method runs on the writer thread (`write`) or a reader (`read`).

/// The embedded store's file in a data directory.
pub const DATABASE_FILE: &str = "steward.db";

mod approvals;
mod audit_log;
mod backup;
mod budgets;
mod catalog;
mod conn;
mod connections;
mod effects;
mod figures;
mod holds;
mod idempotency;
mod identity;
mod kill_switch;
mod limits;
mod links;
mod policies;
mod previews;
mod receipts;
mod replicas;
mod rows;
mod runs;
mod schema;
mod version;
mod webhooks;

use crate::error::{StoreError, StoreResult};
pub use backup::BackupReport;
use conn::{blocking, Pool};
pub use conn::{COMMIT_UNKNOWN_FAULT, FAIL_WRITES_WHILE_FILE_ENV};
use std::path::Path;
use std::sync::Arc;

/// The embedded default store. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct SqliteStore {
    pool: Arc<Pool>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and applies the schema.
    pub fn open(path: &Path) -> StoreResult<Self> {
        Ok(Self {
            pool: Pool::open(path)?,
        })
    }

    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.pool.write(f).await
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let pool = self.pool.clone();
        let permit = pool
            .reader_permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Unavailable {
                message: "the store is closed".into(),
                source: None,
            })?;
        blocking(move || {
            let _permit = permit;
            pool.read(f)
        })
        .await
    }

    /// A short read run on the calling task's thread, with no hand-off to the blocking pool and
    /// back: for the one read of the governed invoke's hot path (`invoke_context`), a handful
    /// of point lookups by key over pages SQLite or the OS has in memory, which costs less than
    /// the two thread wake-ups a blocking-pool hop takes. When every reader connection is taken
    /// it waits for one as [`Self::read`] does.
    async fn read_here<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        match self.pool.reader_permits.try_acquire() {
            Ok(_permit) => self.pool.read(f),
            Err(_) => self.read(f).await,
        }
    }
}
