//! Connections and transactions: a small pool, one transaction per store method, and the one
//! lock that orders every write.
//!
//! Every write transaction runs at READ COMMITTED and takes one transaction-scoped advisory lock
//! ([`WRITE_LOCK_SQL`]) as its first statement. This is the embedded store's single writer
//! (`BEGIN IMMEDIATE`), held by the database, so it orders writers across every connection and
//! every replica sharing the database. Because READ COMMITTED takes a fresh snapshot for each
//! statement, everything after the lock sees every write committed before it: the
//! check-then-insert of `submit`, the version checks of secrets and actions and the tally of an
//! approval run exactly as they do on SQLite. The audit log needs this total order anyway (each
//! event hashes the one before it, so appends are serial), and the lock is released only after
//! the commit is visible. A higher isolation level would be wrong here: its snapshot would be
//! taken before the lock was granted. The unique indexes and compare-and-set updates stay in
//! place as the second check, mapped to the same errors as on SQLite.
//!
//! Reads run at REPEATABLE READ, read-only, and take no lock: a method that reads several tables
//! (an effect with its attempts and evidence, a page and its total) sees one snapshot.

use crate::error::{StoreError, StoreResult};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
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
    /// READ COMMITTED behind the write lock.
    Write,
}

/// One open transaction. Dropped without [`finish`] (a cancelled request), it rolls back.
pub(crate) struct Tx<'a> {
    inner: deadpool_postgres::Transaction<'a>,
}

/// Opens a transaction; a write transaction holds the write lock when this returns.
pub(crate) async fn begin(client: &mut Object, mode: Mode) -> StoreResult<Tx<'_>> {
    let builder = client.build_transaction();
    let builder = match mode {
        Mode::Read => builder
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true),
        Mode::Write => builder.isolation_level(IsolationLevel::ReadCommitted),
    };
    let tx = Tx {
        inner: builder.start().await.map_err(unavailable)?,
    };
    if mode == Mode::Write {
        tx.execute(WRITE_LOCK_SQL, &[]).await?;
    }
    Ok(tx)
}

/// Commits when `result` is `Ok` and rolls back otherwise, so a method's error commits nothing.
/// Once a commit returns, PostgreSQL has flushed it to its write-ahead log (`synchronous_commit`
/// is checked on connect).
pub(crate) async fn finish<T>(tx: Tx<'_>, result: StoreResult<T>) -> StoreResult<T> {
    match result {
        Ok(value) => {
            tx.inner.commit().await.map_err(unavailable)?;
            Ok(value)
        }
        Err(err) => {
            // The error is what the caller needs; a failed rollback ends with the connection.
            let _ = tx.inner.rollback().await;
            Err(err)
        }
    }
}

/// Runs `$body`, a future using the transaction `$tx`, in one transaction of `$mode` on a pooled
/// connection of `$store`, committing on `Ok` and rolling back on `Err`.
macro_rules! in_transaction {
    ($store:expr, $mode:expr, |$tx:ident| $body:expr) => {{
        let mut client = $crate::postgres::conn::client(&$store.pool).await?;
        let $tx = $crate::postgres::conn::begin(&mut client, $mode).await?;
        let result = $body.await;
        $crate::postgres::conn::finish($tx, result).await
    }};
}
pub(crate) use in_transaction;

/// Query parameters.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

impl Tx<'_> {
    async fn statement(&self, sql: &str) -> StoreResult<tokio_postgres::Statement> {
        self.inner.prepare_cached(sql).await.map_err(unavailable)
    }

    /// Every row `sql` returns.
    pub(crate) async fn query(&self, sql: &str, params: &Params<'_>) -> StoreResult<Vec<Row>> {
        let statement = self.statement(sql).await?;
        self.inner
            .query(&statement, params)
            .await
            .map_err(unavailable)
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
            .map_err(unavailable)
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
            .map_err(|e| constraint(e, what))
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
