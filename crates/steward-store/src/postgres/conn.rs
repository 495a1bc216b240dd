//! Connections and transactions: a small pool, one transaction per store method, and the one
//! lock that orders every write.
//!
//! Every write transaction runs at READ COMMITTED and takes one transaction-scoped advisory lock
//! ([`WRITE_LOCK_SQL`]). This is the embedded store's single writer (`BEGIN IMMEDIATE`), held by
//! the database, so it orders writers across every connection and every replica sharing the
//! database. Because READ COMMITTED takes a fresh snapshot for each statement, everything after
//! the lock sees every write committed before it, and the lock is released only after the
//! commit is visible. A higher isolation level would be wrong here: its snapshot would be taken
//! before the lock was granted. The audit log does not need the lock: events are queued by the
//! transaction and inserted unsealed at commit, and sealed into the chain later by one sealer
//! (`audit_log`).
//!
//! When the lock is taken:
//! - [`Mode::Write`] (every method but the invoke hot path, approval decisions and expiry, and
//!   generic `Idempotency-Key` records) takes it as its first statement: the check-then-insert
//!   of `submit` for gated requests and the version checks of secrets and actions run exactly as
//!   they do on SQLite.
//! - [`Mode::WriteLate`] (`submit_and_begin`, `change_effect`, `finish_invoke_request`; also
//!   decisions and expiry, ordered by their approval's row lock, see `approvals`, and
//!   `idempotency`'s records, by their primary key) takes it
//!   only at commit, and only for its [`CommitCheck`]s (none: no lock at all, audit events
//!   included). What these transactions decide before that is held
//!   by the database itself: a unique index (one effect per operation key, one request per
//!   `Idempotency-Key`, one evidence `seq` per effect; a concurrent duplicate fails the
//!   statement and the whole transaction runs again, finding the row the other committed), a
//!   row-level compare-and-set (an effect's state), or a [`CommitCheck`] read again behind the
//!   lock (the kill switch; that no impact limit exists, else the reservation takes the lock at
//!   once and tallies as in `Write`). A deadlock between a late and an early locker is broken by
//!   PostgreSQL and the victim runs again.
//!
//! The unique indexes and compare-and-set updates stay in place as the second check in `Write`,
//! mapped to the same errors as on SQLite.
//!
//! Reads run at REPEATABLE READ, read-only, and take no lock: a method that reads several tables
//! (an effect with its attempts and evidence, a page and its total) sees one snapshot.

use crate::error::{StoreError, StoreResult};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{IsolationLevel, NoTls, Row};

/// The write lock: `pg_advisory_xact_lock(namespace, 1)`, where the namespace is "STEW" as a
/// big-endian int4 (0x53544557), so it does not collide with another application's locks in a
/// shared database. Schema migrations take the same lock.
pub(crate) const WRITE_LOCK_SQL: &str = "SELECT pg_advisory_xact_lock(1398031703, 1)";

/// Connections one store keeps open at most. Writes queue on the write lock whatever the pool
/// size; the rest serve reads alongside them. Sized well under PostgreSQL's default
/// `max_connections` (100) so that several replicas fit.
const POOL_CONNECTIONS_MAX: usize = 16;
/// How long opening one connection may take before the store reports itself unavailable, in
/// milliseconds. Loopback or a LAN answers in far less; an unreachable host should fail fast.
const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// How long a method waits for a free pooled connection before failing closed, in
/// milliseconds. Longer than any one transaction should take, shorter than a client's patience.
const POOL_WAIT_TIMEOUT_MS: u64 = 15_000;
/// How long PostgreSQL lets a session sit idle inside a transaction before ending it, in
/// milliseconds. Store transactions never wait on anything but the database, so an idle one
/// belongs to a stuck or frozen process; ending it releases the write lock for the others.
const IDLE_IN_TRANSACTION_TIMEOUT_MS: u64 = 30_000;

/// A failure to reach or use the database: nothing was committed, callers fail closed.
pub(crate) fn unavailable(err: tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable {
        message: err.to_string(),
        source: Some(Box::new(err)),
    }
}

/// Maps a failed insert or update: a uniqueness rule is `Duplicate`, a missing parent row (an
/// environment that does not exist) is `NotFound`, anything else is `Unavailable`. The same
/// mapping as the embedded store's.
pub(crate) fn constraint(err: tokio_postgres::Error, what: &'static str) -> StoreError {
    match err.code() {
        Some(code) if *code == SqlState::UNIQUE_VIOLATION => StoreError::Duplicate { what },
        Some(code) if *code == SqlState::FOREIGN_KEY_VIOLATION => StoreError::NotFound {
            what: "environment",
        },
        _ => unavailable(err),
    }
}

fn pool_unavailable(err: deadpool_postgres::PoolError) -> StoreError {
    // The pool's message already spells out its whole cause chain; a source would repeat it.
    StoreError::Unavailable {
        message: format!("no database connection: {err}"),
        source: None,
    }
}

/// The connection settings for `url` (a `postgres://` URL or a `key=value` connection string),
/// with the session options every Steward connection uses.
pub(crate) fn config(url: &str) -> StoreResult<tokio_postgres::Config> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| StoreError::Unavailable {
        message: format!("invalid PostgreSQL connection string: {e}"),
        source: Some(Box::new(e)),
    })?;
    let session =
        format!("-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}");
    let options = match config.get_options() {
        Some(given) => format!("{given} {session}"),
        None => session,
    };
    config
        .options(options)
        .application_name("steward")
        .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS));
    Ok(config)
}

/// Builds the pool. No connection is opened yet.
pub(crate) fn pool(config: &tokio_postgres::Config) -> StoreResult<Pool> {
    let manager = Manager::from_config(
        config.clone(),
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(POOL_CONNECTIONS_MAX)
        .runtime(Runtime::Tokio1)
        .create_timeout(Some(Duration::from_millis(CONNECT_TIMEOUT_MS)))
        .wait_timeout(Some(Duration::from_millis(POOL_WAIT_TIMEOUT_MS)))
        .build()
        .map_err(|e| StoreError::Unavailable {
            message: format!("cannot build the connection pool: {e}"),
            source: None,
        })
}

/// A pooled connection.
pub(crate) async fn client(pool: &Pool) -> StoreResult<Object> {
    pool.get().await.map_err(pool_unavailable)
}

/// What a transaction may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// REPEATABLE READ, read-only, no lock.
    Read,
    /// READ COMMITTED behind the write lock, taken first.
    Write,
    /// READ COMMITTED, the write lock taken only to read the [`CommitCheck`]s again at commit
    /// (or earlier, where a step needs the total order: see [`Tx::lock`]). For the invoke hot path,
    /// whose every rule is also a unique index, a row-level compare-and-set, or a
    /// [`CommitCheck`] re-read behind the lock; a broken unique rule or a deadlock retries the
    /// whole transaction (see [`in_transaction`]).
    WriteLate,
}

/// A fact a [`Mode::WriteLate`] transaction read before taking the write lock and relies on:
/// read again behind the lock at commit, and the transaction retried if it no longer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CommitCheck {
    /// The environment's kill switch is still `halted`.
    Halted { env: String, halted: bool },
    /// The environment still has no active impact limit.
    NoLimits { env: String },
}

/// An audit event waiting for the transaction's commit, where it is inserted unsealed.
pub(crate) struct PendingAudit {
    pub at: i64,
    pub env_id: Option<String>,
    pub actor: Option<String>,
    pub kind: String,
    pub subject: String,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
    pub content_hash: String,
}

/// One open transaction. Dropped without [`finish`] (a cancelled request), it rolls back.
pub(crate) struct Tx<'a> {
    inner: deadpool_postgres::Transaction<'a>,
    mode: Mode,
    locked: AtomicBool,
    /// Set when a statement failed in a way a retry of the whole transaction resolves.
    retryable: AtomicBool,
    audit: Mutex<Vec<PendingAudit>>,
    checks: Mutex<Vec<CommitCheck>>,
}

/// Opens a transaction; a [`Mode::Write`] transaction holds the write lock when this returns.
pub(crate) async fn begin(client: &mut Object, mode: Mode) -> StoreResult<Tx<'_>> {
    let builder = client.build_transaction();
    let builder = match mode {
        Mode::Read => builder
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true),
        Mode::Write | Mode::WriteLate => builder.isolation_level(IsolationLevel::ReadCommitted),
    };
    let tx = Tx {
        inner: builder.start().await.map_err(unavailable)?,
        mode,
        locked: AtomicBool::new(false),
        retryable: AtomicBool::new(false),
        audit: Mutex::new(Vec::new()),
        checks: Mutex::new(Vec::new()),
    };
    if mode == Mode::Write {
        tx.lock().await?;
    }
    Ok(tx)
}

/// How a transaction ended.
pub(crate) enum Finished<T> {
    Done(StoreResult<T>),
    /// Rolled back; running the whole transaction again resolves what stopped it.
    Retry(StoreError),
}

/// Commits when `result` is `Ok` and rolls back otherwise, so a method's error commits nothing.
/// Before the commit: the pending audit events are inserted, unsealed, and the [`CommitCheck`]s
/// read again behind the write lock. Once a commit returns, PostgreSQL has flushed it to its
/// write-ahead log (`synchronous_commit` is checked on connect).
pub(crate) async fn finish<T>(tx: Tx<'_>, result: StoreResult<T>) -> Finished<T> {
    let result = match result {
        Ok(value) => tx.before_commit().await.map(|()| value),
        Err(err) => Err(err),
    };
    match result {
        Ok(value) => match tx.inner.commit().await {
            Ok(()) => Finished::Done(Ok(value)),
            Err(e) if retryable(&e, tx.mode) => Finished::Retry(unavailable(e)),
            Err(e) => Finished::Done(Err(unavailable(e))),
        },
        Err(err) => {
            let retry = tx.retryable.load(Ordering::Relaxed);
            // The error is what the caller needs; a failed rollback ends with the connection.
            let _ = tx.inner.rollback().await;
            if retry {
                Finished::Retry(err)
            } else {
                Finished::Done(Err(err))
            }
        }
    }
}

/// How many times a transaction runs at most when a retry would resolve its failure.
pub(crate) const ATTEMPTS_MAX: u32 = 8;

/// Whether running the whole transaction again resolves `err`: a deadlock or a serialization
/// failure in any mode; in [`Mode::WriteLate`] also a broken unique rule (a concurrent
/// transaction inserted the same key first; the next run finds its row).
fn retryable(err: &tokio_postgres::Error, mode: Mode) -> bool {
    match err.code() {
        Some(code) if *code == SqlState::T_R_DEADLOCK_DETECTED => true,
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE => true,
        Some(code) if *code == SqlState::UNIQUE_VIOLATION => mode == Mode::WriteLate,
        _ => false,
    }
}

/// Runs `$body`, a future using the transaction `$tx`, in one transaction of `$mode` on a pooled
/// connection of `$store`, committing on `Ok` and rolling back on `Err`. A transaction that
/// ends in [`Finished::Retry`] runs again from the start, up to [`ATTEMPTS_MAX`] times.
macro_rules! in_transaction {
    ($store:expr, $mode:expr, |$tx:ident| $body:expr) => {{
        let mut attempt = 1;
        loop {
            let mut client = $crate::postgres::conn::client(&$store.pool).await?;
            let $tx = $crate::postgres::conn::begin(&mut client, $mode).await?;
            let result = $body.await;
            match $crate::postgres::conn::finish($tx, result).await {
                $crate::postgres::conn::Finished::Done(result) => break result,
                $crate::postgres::conn::Finished::Retry(err)
                    if attempt >= $crate::postgres::conn::ATTEMPTS_MAX =>
                {
                    break Err(err)
                }
                $crate::postgres::conn::Finished::Retry(_) => attempt += 1,
            }
        }
    }};
}
pub(crate) use in_transaction;

/// Query parameters.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

impl Tx<'_> {
    /// Takes the write lock (once; it is held to the end of the transaction).
    pub(crate) async fn lock(&self) -> StoreResult<()> {
        if !self.locked.swap(true, Ordering::Relaxed) {
            self.execute(WRITE_LOCK_SQL, &[]).await?;
        }
        Ok(())
    }

    /// Whether this transaction defers the write lock ([`Mode::WriteLate`]) and has not taken it.
    pub(crate) fn unlocked(&self) -> bool {
        !self.locked.load(Ordering::Relaxed)
    }

    /// Records a fact to re-read behind the lock at commit.
    pub(crate) fn check_at_commit(&self, check: CommitCheck) {
        self.checks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(check);
    }

    /// Queues an audit event; [`finish`] inserts it, unsealed, before the commit.
    pub(crate) fn audit(&self, event: PendingAudit) {
        self.audit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    /// Before the commit: the queued audit events are inserted (unsealed: no lock, no read of
    /// another audit row), and every commit check is read again behind the write lock. A
    /// transaction without checks commits without the lock. The lock, the checks and the
    /// insert go to the server together (one round trip, pipelined); it runs them in order, so
    /// the checks see everything committed before the lock was granted.
    async fn before_commit(&self) -> StoreResult<()> {
        let checks = std::mem::take(&mut *self.checks.lock().unwrap_or_else(|p| p.into_inner()));
        let audit = std::mem::take(&mut *self.audit.lock().unwrap_or_else(|p| p.into_inner()));
        if checks.is_empty() && audit.is_empty() {
            return Ok(());
        }
        let lock = async {
            if checks.is_empty() || self.locked.swap(true, Ordering::Relaxed) {
                Ok(0)
            } else {
                self.execute(WRITE_LOCK_SQL, &[]).await
            }
        };
        let halted = checks.iter().find_map(|c| match c {
            CommitCheck::Halted { env, halted } => Some((env, *halted)),
            CommitCheck::NoLimits { .. } => None,
        });
        let no_limits = checks.iter().find_map(|c| match c {
            CommitCheck::NoLimits { env } => Some(env),
            CommitCheck::Halted { .. } => None,
        });
        let halted_holds = async {
            let Some((env, expected)) = halted else {
                return Ok(true);
            };
            let now = self
                .query_first("SELECT halted FROM environments WHERE id = $1", &[env])
                .await?
                .map(|row| row.get::<_, bool>(0))
                .unwrap_or(false);
            Ok::<_, StoreError>(now == expected)
        };
        let no_limits_holds = async {
            let Some(env) = no_limits else {
                return Ok(true);
            };
            let any = self
                .query_first(
                    "SELECT 1 FROM impact_limits WHERE env_id = $1 AND archived_at IS NULL LIMIT 1",
                    &[env],
                )
                .await?;
            Ok::<_, StoreError>(any.is_none())
        };
        let insert = async {
            if audit.is_empty() {
                Ok(())
            } else {
                super::audit_log::insert(self, audit).await
            }
        };
        let (_, halted_holds, no_limits_holds, ()) =
            tokio::try_join!(lock, halted_holds, no_limits_holds, insert)?;
        if !(halted_holds && no_limits_holds) {
            self.retryable.store(true, Ordering::Relaxed);
            return Err(StoreError::Unavailable {
                message: format!("{checks:?} changed before commit"),
                source: None,
            });
        }
        Ok(())
    }

    /// Maps a statement's failure, noting whether a retry of the transaction resolves it.
    fn failed(&self, err: tokio_postgres::Error) -> tokio_postgres::Error {
        if retryable(&err, self.mode) {
            self.retryable.store(true, Ordering::Relaxed);
        }
        err
    }

    async fn statement(&self, sql: &str) -> StoreResult<tokio_postgres::Statement> {
        self.inner.prepare_cached(sql).await.map_err(unavailable)
    }

    /// Every row `sql` returns.
    pub(crate) async fn query(&self, sql: &str, params: &Params<'_>) -> StoreResult<Vec<Row>> {
        let statement = self.statement(sql).await?;
        self.inner
            .query(&statement, params)
            .await
            .map_err(|e| unavailable(self.failed(e)))
    }

    /// The first row `sql` returns, if any.
    pub(crate) async fn query_first(
        &self,
        sql: &str,
        params: &Params<'_>,
    ) -> StoreResult<Option<Row>> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    /// Every row `sql` returns, decoded.
    pub(crate) async fn all<T>(
        &self,
        sql: &str,
        params: &Params<'_>,
        decode: fn(&Row) -> StoreResult<T>,
    ) -> StoreResult<Vec<T>> {
        self.query(sql, params).await?.iter().map(decode).collect()
    }

    /// The first row `sql` returns, decoded, if any.
    pub(crate) async fn one<T>(
        &self,
        sql: &str,
        params: &Params<'_>,
        decode: fn(&Row) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        self.query_first(sql, params)
            .await?
            .as_ref()
            .map(decode)
            .transpose()
    }

    /// The single `BIGINT` a `SELECT COUNT(*)` or similar returns.
    pub(crate) async fn count(&self, sql: &str, params: &Params<'_>) -> StoreResult<i64> {
        match self.query_first(sql, params).await? {
            Some(row) => super::rows::col(&row, 0),
            None => Err(super::rows::corrupt("count", "no row")),
        }
    }

    /// Runs a statement; returns the number of rows it changed.
    pub(crate) async fn execute(&self, sql: &str, params: &Params<'_>) -> StoreResult<u64> {
        let statement = self.statement(sql).await?;
        self.inner
            .execute(&statement, params)
            .await
            .map_err(|e| unavailable(self.failed(e)))
    }

    /// Like [`Tx::execute`], mapping a broken uniqueness rule to `Duplicate { what }` and a
    /// missing environment to `NotFound`.
    pub(crate) async fn execute_unique(
        &self,
        what: &'static str,
        sql: &str,
        params: &Params<'_>,
    ) -> StoreResult<u64> {
        let statement = self.statement(sql).await?;
        self.inner
            .execute(&statement, params)
            .await
            .map_err(|e| constraint(self.failed(e), what))
    }

    /// Runs several statements in one round trip (schema migrations).
    pub(crate) async fn batch(&self, sql: &str) -> StoreResult<()> {
        self.inner.batch_execute(sql).await.map_err(unavailable)
    }
}

/// A connection of its own, outside the pool, for work that must not queue behind the pool's
/// transactions (heartbeats) or that holds its session (LISTEN). The caller drives `Connection`.
pub(crate) async fn dedicated(
    config: &tokio_postgres::Config,
    application_name: &str,
) -> StoreResult<(
    tokio_postgres::Client,
    tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
)> {
    let mut config = config.clone();
    config.application_name(application_name);
    config.connect(NoTls).await.map_err(unavailable)
}
