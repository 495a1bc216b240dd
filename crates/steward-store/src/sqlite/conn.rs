//! Connections: one writer thread with group commit (SQLite has one writer at a time anyway) and
//! a small pool of readers, which WAL lets run alongside the writer. All work runs off the async
//! runtime so it never waits on disk.
//!
//! Group commit: write transactions queue for the writer thread, which takes every queued one (up
//! to [`GROUP_COMMIT_JOBS_MAX`]), runs each inside its own SAVEPOINT of one IMMEDIATE transaction,
//! and commits them together: one fsync for the batch. A transaction that fails is rolled back to
//! its savepoint alone. If SQLite aborts the whole transaction (an I/O error, a full disk) or the
//! commit fails, every transaction of the batch fails: none of them was committed. A caller hears
//! `Ok` only after the commit that made its transaction durable.

use crate::error::{StoreError, StoreResult};
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};
use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

/// How long a connection waits for another process's write lock (the CLI writing keys while the
/// server runs) before giving up, in milliseconds.
const BUSY_TIMEOUT_MS: u64 = 5_000;
/// Reader connections, at most; reads beyond this many at once wait for one (opening a
/// connection costs more than a point read: it reads the schema again).
pub(crate) const READERS_MAX: usize = 8;
/// Prepared statements kept per connection: every statement of the hot paths, so none is parsed
/// twice (rusqlite's default of 16 is fewer than one invoke's transactions use).
const STATEMENT_CACHE_CAPACITY: usize = 256;
/// The most transactions one commit carries: enough to absorb a burst from many connections,
/// few enough that the first in line does not wait long for the rest.
pub(crate) const GROUP_COMMIT_JOBS_MAX: usize = 128;

type JobResult = StoreResult<Box<dyn Any + Send>>;
type Job = Box<dyn FnOnce(&Transaction<'_>) -> JobResult + Send>;

struct Queued {
    job: Job,
    reply: tokio::sync::oneshot::Sender<JobResult>,
}

pub(crate) struct Pool {
    path: PathBuf,
    /// `None` once the pool is dropped: the writer thread then ends.
    jobs: Mutex<Option<mpsc::Sender<Queued>>>,
    /// The writer thread, joined when the pool is dropped.
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    /// One permit per reader connection: see [`READERS_MAX`].
    pub(crate) reader_permits: Arc<tokio::sync::Semaphore>,
}

/// The environment variable that names the test-only write fault: while a file exists at the
/// path it names, every write transaction fails as a failed disk write would (an I/O error
/// before the commit; nothing of the batch is committed). Unset (always, outside tests) it
/// costs one check of a cached `None` per batch. The end-to-end tests set it to fail the
/// commit of an answer after its provider call (docs/DECISIONS.md, "Failover: honest answers
/// and ambiguous commits").
pub const FAIL_WRITES_WHILE_FILE_ENV: &str = "STEWARD_FAIL_WRITES_WHILE_FILE";

/// The path [`FAIL_WRITES_WHILE_FILE_ENV`] names, read once.
fn write_fault_file() -> Option<&'static Path> {
    static FILE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FILE.get_or_init(|| std::env::var_os(FAIL_WRITES_WHILE_FILE_ENV).map(PathBuf::from))
        .as_deref()
}

/// What the file at [`FAIL_WRITES_WHILE_FILE_ENV`] holds to make every write batch commit and
/// then answer `CommitUnknown` (an I/O error after the commit record reached the log): the
/// ambiguous commit whose change did land. Any other content fails the batch before its commit.
pub const COMMIT_UNKNOWN_FAULT: &str = "commit-unknown";

/// An injected write fault.
enum WriteFault {
    /// The batch fails before its commit: nothing is committed (`Unavailable`).
    Fail(String),
    /// The batch commits, and its answer says the commit is unknown (`CommitUnknown`).
    CommittedUnknown(String),
}

/// The injected write fault, when [`FAIL_WRITES_WHILE_FILE_ENV`] is armed.
fn write_fault() -> Option<WriteFault> {
    let file = write_fault_file()?;
    let content = std::fs::read(file).ok()?;
    let message = format!("disk I/O error (injected: {} exists)", file.display());
    Some(if content.trim_ascii() == COMMIT_UNKNOWN_FAULT.as_bytes() {
        WriteFault::CommittedUnknown(message)
    } else {
        WriteFault::Fail(message)
    })
}

/// A failed `COMMIT` of a write batch. SQLite's commit is atomic: a full disk (or a busy or
/// read-only database) stops it before the commit record is written, and nothing is committed
/// (`Unavailable`). An I/O error may strike after the commit record reached the log (while it
/// is synced, say), and then whether the batch is durable is known only once the database is
/// read again (`CommitUnknown`).
pub(crate) fn commit_failed(err: &rusqlite::Error) -> StoreError {
    match err.sqlite_error_code() {
        Some(ErrorCode::SystemIoFailure) => StoreError::CommitUnknown {
            message: format!("the commit failed with an I/O error: {err}"),
            source: None,
        },
        _ => StoreError::Unavailable {
            message: err.to_string(),
            source: None,
        },
    }
}

/// The same failure for every transaction of a batch that was not committed.
fn batch_failed(message: &str, n: usize) -> Vec<JobResult> {
    (0..n)
        .map(|_| {
            Err(StoreError::Unavailable {
                message: message.to_string(),
                source: None,
            })
        })
        .collect()
}

fn stopped() -> StoreError {
    StoreError::Unavailable {
        message: "the storage writer stopped".into(),
        source: None,
    }
}

fn downcast<T: 'static>(value: Box<dyn Any + Send>) -> StoreResult<T> {
    value
        .downcast::<T>()
        .map(|v| *v)
        .map_err(|_| StoreError::Corrupt("a storage transaction answered the wrong type".into()))
}

/// Runs one batch in one transaction; returns each job's result, in order.
///
/// The first job of the transaction runs without a savepoint: were it to fail, the transaction
/// holds nothing else, so it is rolled back whole and a new one begins for the rest. Every later
/// job runs inside its own SAVEPOINT, so that its failure undoes it alone. A savepoint costs
/// more than its two statements: SQLite keeps the original of every page the job changes in a
/// sub-journal, which spills to a temporary file past 64 KiB (one governed invoke's commit
/// changes about 16 pages): a file created, written and deleted per commit. At one transaction
/// per batch (c=1) no savepoint is taken at all.
fn commit_batch(conn: &mut Connection, jobs: Vec<Job>) -> Vec<JobResult> {
    let n = jobs.len();
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return batch_failed(&e.to_string(), n),
    };
    // Whether `tx` holds a job that succeeded (and so later jobs need savepoints).
    let mut holds_work = false;
    let mut results = Vec::with_capacity(n);
    for job in jobs {
        if holds_work {
            if let Err(e) = execute_cached(&tx, "SAVEPOINT job", []) {
                return batch_failed(&e.to_string(), n);
            }
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&tx)))
            .unwrap_or_else(|_| Err(StoreError::Corrupt("a storage transaction panicked".into())));
        if tx.is_autocommit() {
            // SQLite rolled the whole transaction back: nothing of this batch will be committed.
            let why = outcome.err().map(|e| e.to_string()).unwrap_or_default();
            return batch_failed(&format!("the transaction was rolled back: {why}"), n);
        }
        let end = match (holds_work, outcome.is_ok()) {
            (true, true) => execute_cached(&tx, "RELEASE job", []).map(|_| ()),
            (true, false) => tx.execute_batch("ROLLBACK TO job; RELEASE job"),
            (false, true) => {
                holds_work = true;
                Ok(())
            }
            // The failed job is alone in the transaction: roll it back, begin again.
            (false, false) => tx.execute_batch("ROLLBACK; BEGIN IMMEDIATE"),
        };
        if let Err(e) = end {
            return batch_failed(&e.to_string(), n);
        }
        results.push(outcome);
    }
    match write_fault() {
        // Dropping `tx` rolls the batch back: nothing of it is committed.
        Some(WriteFault::Fail(fault)) => return batch_failed(&fault, n),
        Some(WriteFault::CommittedUnknown(fault)) => {
            let committed = tx
                .commit()
                .map_or_else(|e| e.to_string(), |()| "committed".into());
            return (0..n)
                .map(|_| {
                    Err(StoreError::CommitUnknown {
                        message: format!(
                            "the commit failed with an I/O error: {fault} ({committed})"
                        ),
                        source: None,
                    })
                })
                .collect();
        }
        None => {}
    }
    match tx.commit() {
        Ok(()) => results,
        Err(e) => {
            let failed = commit_failed(&e);
            let message = failed.to_string();
            (0..n)
                .map(|_| {
                    Err(match &failed {
                        StoreError::CommitUnknown { .. } => StoreError::CommitUnknown {
                            message: message.clone(),
                            source: None,
                        },
                        _ => StoreError::Unavailable {
                            message: message.clone(),
                            source: None,
                        },
                    })
                })
                .collect()
        }
    }
}

/// The writer thread: takes every queued transaction, commits them together, answers each.
fn writer_loop(mut conn: Connection, queue: mpsc::Receiver<Queued>) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < GROUP_COMMIT_JOBS_MAX {
            match queue.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let (jobs, replies): (Vec<Job>, Vec<_>) =
            batch.into_iter().map(|q| (q.job, q.reply)).unzip();
        for (result, reply) in commit_batch(&mut conn, jobs).into_iter().zip(replies) {
            // A caller that went away no longer needs its answer; its transaction stands.
            let _ = reply.send(result);
        }
    }
}

/// `execute` with a cached prepared statement: the hot write paths run the same statements for
/// every invocation, and preparing each time costs more than running them.
pub(crate) fn execute_cached(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}

/// `query_row` with a cached prepared statement.
pub(crate) trait CachedQuery {
    fn query_row_cached<
        T,
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    >(
        &self,
        sql: &str,
        params: P,
        f: F,
    ) -> rusqlite::Result<T>;
}

impl CachedQuery for Connection {
    fn query_row_cached<
        T,
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    >(
        &self,
        sql: &str,
        params: P,
        f: F,
    ) -> rusqlite::Result<T> {
        self.prepare_cached(sql)?.query_row(params, f)
    }
}

pub(crate) fn unavailable(err: rusqlite::Error) -> StoreError {
    StoreError::Unavailable {
        message: err.to_string(),
        source: Some(Box::new(err)),
    }
}

/// SQLite's extended result codes for the constraints Steward relies on.
const SQLITE_CONSTRAINT_FOREIGNKEY: i32 = 787;
const SQLITE_CONSTRAINT_PRIMARYKEY: i32 = 1555;
const SQLITE_CONSTRAINT_UNIQUE: i32 = 2067;

/// Maps a failed insert or update: a uniqueness rule is `Duplicate`, a missing parent row
/// (an environment that does not exist) is `NotFound`, anything else is `Unavailable`.
pub(crate) fn constraint(err: rusqlite::Error, what: &'static str) -> StoreError {
    match &err {
        rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::ConstraintViolation => {
            match e.extended_code {
                SQLITE_CONSTRAINT_UNIQUE | SQLITE_CONSTRAINT_PRIMARYKEY => {
                    StoreError::Duplicate { what }
                }
                SQLITE_CONSTRAINT_FOREIGNKEY => StoreError::NotFound {
                    what: "environment",
                },
                _ => unavailable(err),
            }
        }
        _ => unavailable(err),
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
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    Ok(conn)
}

pub(crate) fn has_column(conn: &Connection, table: &str, column: &str) -> StoreResult<bool> {
    let present: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
            rusqlite::params![table, column],
            |r| r.get(0),
        )
        .map_err(unavailable)?;
    Ok(present > 0)
}

/// Adds a nullable column of `kind` to a table created by an earlier schema.
fn add_column_if_missing(
    conn: &Connection,
    table: &str,
    column: &str,
    kind: &str,
) -> StoreResult<()> {
    if !has_column(conn, table, column)? {
        conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))
            .map_err(unavailable)?;
    }
    Ok(())
}

/// True when `table` is stored with a rowid: a table of [`super::schema::ROWLESS`] created
/// before it was `WITHOUT ROWID`.
fn has_rowid(conn: &Connection, table: &str) -> StoreResult<bool> {
    let without_rowid: Option<bool> = conn
        .query_row(
            "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?1",
            [table],
            |r| r.get(0),
        )
        .optional()
        .map_err(unavailable)?;
    Ok(without_rowid == Some(false))
}

/// Rebuilds each table of [`super::schema::ROWLESS`] that still has a rowid, inside the caller's
/// transaction: every row is copied, column for column, into the table as it is created now.
/// Dropping the old table drops its indexes; the caller creates them again. True when a table
/// was rebuilt.
fn rebuild_rowless(tx: &Transaction<'_>) -> StoreResult<bool> {
    let mut rebuilt = false;
    for t in super::schema::ROWLESS {
        if !has_rowid(tx, t.table)? {
            continue;
        }
        let (table, create, columns) = (t.table, t.create, t.columns);
        tx.execute_batch(&format!(
            "{create};
             INSERT INTO {table}_rowless ({columns}) SELECT {columns} FROM {table};
             DROP TABLE {table};
             ALTER TABLE {table}_rowless RENAME TO {table};"
        ))
        .map_err(unavailable)?;
        rebuilt = true;
    }
    Ok(rebuilt)
}

/// Creates the data directory readable by its owner only (0700): it holds the database, whose
/// rows include sealed secrets, hashed keys and the audit log.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Creates the database file 0600 before SQLite opens it (SQLite gives its `-wal` and `-shm`
/// files the database file's mode), and narrows an existing one to 0600.
fn private_file(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        for suffix in ["", "-wal", "-shm"] {
            let file = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
            match std::fs::metadata(&file) {
                Ok(meta) if meta.permissions().mode() & 0o077 != 0 => {
                    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?
                }
                _ => {}
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

impl Pool {
    pub(crate) fn open(path: &Path) -> StoreResult<Arc<Pool>> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            private_dir(dir).map_err(|e| StoreError::Unavailable {
                message: format!("cannot create {}: {e}", dir.display()),
                source: Some(Box::new(e)),
            })?;
        }
        private_file(path).map_err(|e| StoreError::Unavailable {
            message: format!("cannot create {}: {e}", path.display()),
            source: Some(Box::new(e)),
        })?;
        let writer = open_connection(path)?;
        super::version::refuse_newer(&writer, path)?;
        writer
            .execute_batch(super::schema::SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::APPROVAL_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::GOVERNANCE_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::REPLICA_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::SETTINGS_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::CONSOLE_SESSION_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::LINKS_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::BUDGET_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::CONNECTION_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::CONNECTION_SESSION_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::webhooks::WEBHOOK_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::RUN_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::RECEIPT_SCHEMA)
            .map_err(unavailable)?;
        writer
            .execute_batch(super::schema::HOLD_SCHEMA)
            .map_err(unavailable)?;
        // One IMMEDIATE transaction, so that two processes opening an older store at once
        // (the server and `steward keys`) add each column once.
        let mut writer = writer;
        let tx = writer
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(unavailable)?;
        for (table, column) in super::schema::OWNER_COLUMNS {
            add_column_if_missing(&tx, table, column, "TEXT")?;
        }
        for (table, column, kind) in super::schema::KEY_LIFECYCLE_COLUMNS {
            add_column_if_missing(&tx, table, column, kind)?;
        }
        add_column_if_missing(&tx, "impact_limits", "resource_prefix", "TEXT")?;
        // Schema version 2: the environment's `unkeyedInvokes` (NULL: accept).
        add_column_if_missing(&tx, "environments", "unkeyed_invokes", "TEXT")?;
        for (table, column, kind) in super::webhooks::WEBHOOK_COLUMNS {
            add_column_if_missing(&tx, table, column, kind)?;
        }
        tx.execute_batch(super::webhooks::WEBHOOK_INDEXES)
            .map_err(unavailable)?;
        for (table, column) in super::schema::RUN_COLUMNS {
            add_column_if_missing(&tx, table, column, "TEXT")?;
        }
        // Schema version 3: edit-and-approve, shadow policies.
        for (table, column) in super::schema::EDIT_COLUMNS {
            add_column_if_missing(&tx, table, column, "TEXT")?;
        }
        if !has_column(&tx, "idempotency", "key_id")? {
            tx.execute_batch(super::schema::SCOPE_IDEMPOTENCY)
                .map_err(unavailable)?;
        }
        // `attempts`, `evidence` and `impact_reservations` become `WITHOUT ROWID` (issue #13).
        // Their indexes went with the old tables: the schemas that define them create them again.
        // Schema version 3: the fencing epochs, once `audit_head` exists (the audit log's
        // migration creates it) and before `attempts` is rebuilt, which copies them.
        super::audit_log::migrate(&tx)?;
        for (table, column, kind) in super::schema::FENCE_COLUMNS {
            add_column_if_missing(&tx, table, column, kind)?;
        }
        let rebuilt = rebuild_rowless(&tx)?;
        if rebuilt {
            for schema in [super::schema::SCHEMA, super::schema::GOVERNANCE_SCHEMA] {
                tx.execute_batch(schema).map_err(unavailable)?;
            }
        }
        tx.execute_batch(super::schema::DROPPED_INDEXES)
            .map_err(unavailable)?;
        tx.execute_batch(super::schema::OWNER_INDEXES)
            .map_err(unavailable)?;
        super::version::record(&tx)?;
        tx.commit().map_err(unavailable)?;
        tracing::info!(
            version = super::version::SCHEMA_VERSION,
            "embedded schema is current"
        );
        if rebuilt {
            // The rebuild wrote every row of those tables to the WAL once more: copy it into
            // the database file and give the space back. Best effort: a reader in another
            // process may hold the WAL, and then the next checkpoints do it.
            let _ = writer.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
        // Savepoint journals in memory: every transaction after the first in a group commit runs
        // in a savepoint, whose journal would otherwise spill to a temporary file past 64 KiB
        // (created, written and deleted per batch). Only the writer takes savepoints, and the
        // schema work above, which may rebuild whole tables, ran before this.
        writer
            .pragma_update(None, "temp_store", "MEMORY")
            .map_err(unavailable)?;
        let (jobs, queue) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("steward-sqlite-writer".into())
            .spawn(move || writer_loop(writer, queue))
            .map_err(|e| StoreError::Unavailable {
                message: format!("cannot start the writer thread: {e}"),
                source: Some(Box::new(e)),
            })?;
        Ok(Arc::new(Pool {
            path: path.to_path_buf(),
            jobs: Mutex::new(Some(jobs)),
            writer: Mutex::new(Some(writer)),
            readers: Mutex::new(Vec::new()),
            reader_permits: Arc::new(tokio::sync::Semaphore::new(READERS_MAX)),
        }))
    }

    /// Runs `f` as one transaction (in a group commit, see the module doc) and returns once it
    /// is committed; nothing of it is committed if `f` fails. The task waits for the writer
    /// thread's answer without holding a thread of its own.
    pub(crate) async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.enqueue(f, reply)?;
        answer.await.map_err(|_| stopped())?.and_then(downcast)
    }

    fn enqueue<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
        reply: tokio::sync::oneshot::Sender<JobResult>,
    ) -> StoreResult<()> {
        let job: Job = Box::new(move |tx| f(tx).map(|v| Box::new(v) as Box<dyn Any + Send>));
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .ok_or_else(stopped)?
            .send(Queued { job, reply })
            .map_err(|_| stopped())
    }

    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> StoreResult<T>) -> StoreResult<T> {
        let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => open_connection(&self.path)?,
        };
        let result = f(&conn);
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if readers.len() < READERS_MAX {
            readers.push(conn);
        }
        result
    }
}

/// Dropping the pool ends the writer thread and waits for it: once the last handle to a store
/// is gone, its connections are closed (SQLite checkpoints the WAL into the database file as
/// the last one closes), so the files can be copied or reopened.
impl Drop for Pool {
    fn drop(&mut self) {
        drop(self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(writer) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = writer.join();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(value: i64, fail: bool) -> Job {
        Box::new(move |tx| {
            tx.execute("INSERT INTO t (v) VALUES (?1)", [value])
                .map_err(unavailable)?;
            if fail {
                return Err(StoreError::NotFound { what: "test" });
            }
            Ok(Box::new(value) as Box<dyn Any + Send>)
        })
    }

    #[test]
    fn a_commit_that_fails_on_io_is_ambiguous_and_a_full_disk_is_not() {
        let failure =
            |code: i32| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        // SQLITE_IOERR_FSYNC: the commit record may be in the log already.
        assert!(commit_failed(&failure(1024 + 10)).commit_unknown());
        assert!(commit_failed(&failure(rusqlite::ffi::SQLITE_IOERR)).commit_unknown());
        for code in [
            rusqlite::ffi::SQLITE_FULL,
            rusqlite::ffi::SQLITE_BUSY,
            rusqlite::ffi::SQLITE_READONLY,
        ] {
            let failed = commit_failed(&failure(code));
            assert!(
                matches!(failed, StoreError::Unavailable { .. }),
                "{code}: {failed}"
            );
        }
    }

    /// The values the test table `t` holds, in order.
    fn stored_values(conn: &Connection) -> Vec<i64> {
        conn.prepare("SELECT v FROM t ORDER BY v")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn a_failing_transaction_rolls_back_alone_and_the_batch_commits_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = open_connection(&dir.path().join("t.db")).unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
        let results = commit_batch(&mut conn, vec![job(1, false), job(2, true), job(3, false)]);
        assert!(results[0].is_ok() && results[2].is_ok());
        assert!(matches!(results[1], Err(StoreError::NotFound { .. })));
        let stored = stored_values(&conn);
        assert_eq!(
            stored,
            vec![1, 3],
            "the failed transaction left nothing behind"
        );
    }

    #[test]
    fn a_failing_first_transaction_rolls_back_alone_and_the_rest_commit() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = open_connection(&dir.path().join("t.db")).unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
        let results = commit_batch(
            &mut conn,
            vec![
                job(1, true),
                job(2, true),
                job(3, false),
                job(4, true),
                job(5, false),
            ],
        );
        let failed: Vec<bool> = results.iter().map(Result::is_err).collect();
        assert_eq!(failed, vec![true, true, false, true, false]);
        let stored = stored_values(&conn);
        assert_eq!(
            stored,
            vec![3, 5],
            "each failed transaction left nothing behind"
        );
        assert!(conn.is_autocommit(), "the batch's transaction ended");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writers_all_commit() {
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::open(&dir.path().join("steward.db")).unwrap();
        pool.write(|tx| {
            tx.execute_batch("CREATE TABLE t (v INTEGER)")
                .map_err(unavailable)
        })
        .await
        .unwrap();
        let tasks: Vec<_> = (0..32)
            .map(|i| {
                let pool = pool.clone();
                tokio::spawn(async move {
                    pool.write(move |tx| {
                        tx.execute("INSERT INTO t (v) VALUES (?1)", [i])
                            .map_err(unavailable)
                    })
                    .await
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), 1);
        }
        let n: i64 = pool
            .read(|c| {
                c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
                    .map_err(unavailable)
            })
            .unwrap();
        assert_eq!(n, 32);
    }
}
