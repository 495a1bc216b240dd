//! Connections and transactions: a small pool, one transaction per store method, and the locks
//! that order writes.
//!
//! Every write transaction runs at READ COMMITTED: each statement takes a fresh snapshot, so a
//! statement issued after a lock was granted sees every write committed before it (PostgreSQL
//! makes a commit visible before it releases the committing transaction's locks). A higher
//! isolation level would be wrong here: its snapshot would be taken before the lock was granted.
//!
//! The locks, what takes each, and what each protects:
//!
//! - **The write lock** ([`WRITE_LOCK_SQL`]), one transaction-scoped advisory lock for the whole
//!   database. [`Mode::Write`] (every write but the invoke hot path, approval decisions and
//!   expiry, and generic `Idempotency-Key` records) takes it as its first
//!   statement: the embedded store's single writer (`BEGIN IMMEDIATE`), held by the database, so
//!   it orders those writers across every connection and every replica. It protects what they
//!   check and then write: the version checks of secrets, actions and policies, the tally of an
//!   approval, a sweep, a schema migration. The invoke path never takes it, gated or not
//!   (`submit` and `submit_and_begin`).
//! - **An environment's lock** ([`ENV_LOCK_SHARED_SQL`], [`ENV_LOCK_SQL`]), a transaction-scoped
//!   advisory lock per environment (its id hashed, in a namespace of its own), taken shared by
//!   every transaction that records an attempt (`change_effect` with `AttemptChange::Begin`) or
//!   tallies a reservation (`limits::reserve`), and exclusively by whatever changes what those
//!   read: the kill switch (`set_halted`) and the set of live limits (`create_limit`,
//!   `archive_limit`). Invokes share it, so they never wait on each other; a halt or a new limit
//!   waits for the invokes in flight to commit, and every invoke that asks for it later waits
//!   for the halt and then reads it. So an attempt committed after a halt cannot exist, and a
//!   tally never misses a limit. An advisory lock rather than the environment's row `FOR
//!   SHARE`: a row lock lets a new sharer through while an exclusive locker waits, so under a
//!   steady stream of invokes a halt could wait for ever; the lock manager queues a new sharer
//!   behind the waiting halt. Two environments whose ids hash alike share a lock, which costs
//!   only waiting.
//! - **Limit rows.** A tally locks the live limits that apply to the effect `FOR UPDATE`, in
//!   one statement ordered by id (so two tallies cannot deadlock), and sums their usage in the
//!   next statement, which sees every reservation committed before the lock was granted.
//!   Concurrent tallies against one limit, from any replica, run one after the other; tallies
//!   against other limits do not wait. `update_limit` changes the row, so it waits for them too.
//! - **Rows a transaction changes**, and unique indexes. What [`Mode::WriteConcurrent`]
//!   transactions (`submit_and_begin`, `change_effect`, `finish_invoke_request`; also approval
//!   decisions and expiry, ordered by their approval's row lock, see `approvals`, and generic
//!   `Idempotency-Key` records, by their primary key) decide is held
//!   by a unique index (one effect per operation key, one request per `Idempotency-Key`, one
//!   evidence `seq` per effect; a concurrent duplicate fails the statement and the whole
//!   transaction runs again, finding the row the other committed) or a row-level
//!   compare-and-set (an effect's state), besides the two locks above. The unique indexes and
//!   compare-and-set updates stay in place as the second check in `Write`, mapped to the same
//!   errors as on SQLite.
//! - **`audit_head`**, taken `FOR UPDATE` by each seal (`audit_log`). Audit events need no lock
//!   to be written: they are queued by the transaction, inserted unsealed at commit, and sealed
//!   into the chain later by one sealer.
//!
//! A deadlock (between a hot-path transaction and a `Write` one that holds the write lock) is
//! broken by PostgreSQL and the victim runs again.
//!
//! Round trips: a [`Tx`] sends its `BEGIN` together with its first statements and its queued
//! audit events together with its `COMMIT`, and [`Tx::pipeline`] sends several statements at
//! once (tokio-postgres pipelines the requests of one connection; the server runs them in order,
//! each with its own snapshot). So the invoke hot path takes four round trips to record the
//! intent and the attempt (`submit_and_begin`: facts and first reads, inserts, the attempt,
//! the commit) and two to record the answer (`change_effect`: one statement with CTEs, the
//! commit); [`RoundTrips`] counts them. Those hot-path steps of concurrent requests (and an
//! approval's decision) can be batched (`STEWARD_PG_GROUP_COMMIT=on`; off by default) into one
//! PostgreSQL transaction per batch, each after the first under a savepoint of its own, and
//! committed once for all (`group`, docs/DECISIONS.md, "Group commit on PostgreSQL"): a later
//! member's `BEGIN` above is then its `SAVEPOINT`, and its commit the batch's.
//!
//! Reads run at REPEATABLE READ, read-only, and take no lock: a method that reads several tables
//! (an effect with its attempts and evidence, a page and its total) sees one snapshot.

use crate::error::{StoreError, StoreResult};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

/// The write lock: `pg_advisory_xact_lock(namespace, 1)`, where the namespace is "STEW" as a
/// big-endian int4 (0x53544557), so it does not collide with another application's locks in a
/// shared database. Schema migrations take the same lock.
pub(crate) const WRITE_LOCK_SQL: &str = "SELECT pg_advisory_xact_lock(1398031703, 1)";

/// An environment's lock, shared: `pg_advisory_xact_lock_shared(namespace, hashtext(env id))`,
/// where the namespace is "STEV" as a big-endian int4 (0x53544556), apart from the write lock's.
/// `$1` is the environment's id.
pub(crate) const ENV_LOCK_SHARED_SQL: &str =
    "SELECT pg_advisory_xact_lock_shared(1398031702, hashtext($1))";
/// An environment's lock, exclusive: waits for every transaction sharing it to end, and makes
/// every later sharer wait for this transaction to end. `$1` is the environment's id.
pub(crate) const ENV_LOCK_SQL: &str = "SELECT pg_advisory_xact_lock(1398031702, hashtext($1))";

/// Connections one store keeps open at most: as many transactions run at once, reads and the
/// invoke hot path's writes alike (the writes behind the write lock queue on it whatever the
/// pool size). Sized well under PostgreSQL's default
/// `max_connections` (100) so that several replicas fit.
pub(super) const POOL_CONNECTIONS_MAX: usize = 16;
/// How long opening one connection may take before the store reports itself unavailable, in
/// milliseconds. Loopback or a LAN answers in far less; an unreachable host should fail fast.
const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// How long a method waits for a free pooled connection before failing closed, in
/// milliseconds. Longer than any one transaction should take, shorter than a client's patience.
const POOL_WAIT_TIMEOUT_MS: u64 = 15_000;
/// How long PostgreSQL lets a session sit idle inside a transaction before ending it, in
/// milliseconds. Store transactions never wait on anything but the database, so an idle one
/// belongs to a stuck or frozen process; ending it releases its locks for the others.
const IDLE_IN_TRANSACTION_TIMEOUT_MS: u64 = 30_000;

/// The longest one statement may run before PostgreSQL cancels it, in milliseconds (the
/// session's `statement_timeout`, unless the connection string sets one). A store statement
/// takes milliseconds; lock waits count too, and the hot path's longest wait (a halt or a
/// limit change ahead of it) is short. Under the SDK's 30 s timeout, so a stuck statement ends
/// as an error answer rather than a hung request. Schema migrations lift it for their own
/// transaction.
pub(crate) const STATEMENT_TIMEOUT_MS: u64 = 20_000;
/// How long a connection may sit idle before TCP starts probing the peer, in seconds; then a
/// probe every [`TCP_KEEPALIVE_INTERVAL_S`]. An idle pooled connection to a primary that died
/// without a word (a failover, a partition) is found dead in seconds, not in the kernel's
/// two hours.
const TCP_KEEPALIVE_IDLE_S: u64 = 5;
/// Between keepalive probes, in seconds.
const TCP_KEEPALIVE_INTERVAL_S: u64 = 2;
/// How long data sent on a connection may stay unacknowledged before the kernel closes it, in
/// milliseconds (`TCP_USER_TIMEOUT`; Linux also bounds the keepalive probes with it). A
/// request whose database went away mid-statement fails within this instead of waiting for
/// TCP's retransmissions (about 15 minutes).
const TCP_USER_TIMEOUT_MS: u64 = 10_000;

/// A failure to reach or use the database: nothing was committed, callers fail closed.
pub(crate) fn unavailable(err: tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable {
        message: err.to_string(),
        source: Some(Box::new(err)),
    }
}

/// A failed `COMMIT`. Only an answer that says the transaction rolled back (SQLSTATE class 40,
/// transaction rollback; 23, a deferred constraint; 25, an invalid transaction state) proves
/// nothing was committed (`Unavailable`). Any other answer, or none (the connection dropped,
/// the server died, a timeout), leaves the commit unknown (`CommitUnknown`): a primary killed
/// while it waits for its synchronous standby answers "terminating connection ... the
/// transaction has already committed locally", and that commit lives on in the promoted
/// standby (found by `steward faults`, seed 2). Only a read once the database is back tells.
pub(crate) fn commit_failed(err: tokio_postgres::Error) -> StoreError {
    if commit_rolled_back(err.code().map(SqlState::code)) {
        return unavailable(err);
    }
    StoreError::CommitUnknown {
        message: format!("no answer to COMMIT: {err}"),
        source: Some(Box::new(err)),
    }
}

/// Whether a `COMMIT` that failed with `sqlstate` (`None`: no answer from the server, the
/// connection dropped or timed out) certainly rolled back: only SQLSTATE classes 40
/// (transaction rollback: a serialization failure, a deadlock), 23 (a deferred constraint
/// checked at commit) and 25 (invalid transaction state) say so. Anything else, including
/// class 57 (an administrator or a crash ended the backend) and 08 (connection exception), may
/// have committed.
pub(crate) fn commit_rolled_back(sqlstate: Option<&str>) -> bool {
    sqlstate.is_some_and(|code| matches!(code.get(..2), Some("40" | "23" | "25")))
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
    // The pool's own text of a failed connection is only "db error": the database's message
    // (and the transport's cause) are in the error it wraps, so they are spelled out here. No
    // source is kept: the message says it all.
    let cause = match &err {
        deadpool_postgres::PoolError::Backend(e) => match e.as_db_error() {
            Some(db) if *db.code() == SqlState::INVALID_CATALOG_NAME => format!(
                "{} (create it with `createdb`, or name a database that exists)",
                db.message()
            ),
            Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
            None => {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(e);
                while let Some(cause) = source {
                    text.push_str(": ");
                    text.push_str(&cause.to_string());
                    source = cause.source();
                }
                text
            }
        },
        other => other.to_string(),
    };
    StoreError::Unavailable {
        message: format!("no database connection: {cause}"),
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
    let mut session =
        format!("-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}");
    let given = config.get_options().unwrap_or_default().to_string();
    if !given.contains("statement_timeout") {
        session.push_str(&format!(" -c statement_timeout={STATEMENT_TIMEOUT_MS}"));
    }
    let options = if given.is_empty() {
        session
    } else {
        format!("{given} {session}")
    };
    config
        .options(options)
        .application_name("steward")
        .keepalives(true);
    // What the connection string sets wins; these are the defaults for what it leaves out.
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS));
    }
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(Duration::from_secs(TCP_KEEPALIVE_IDLE_S));
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(Duration::from_secs(TCP_KEEPALIVE_INTERVAL_S));
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(Duration::from_millis(TCP_USER_TIMEOUT_MS));
    }
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
    /// READ COMMITTED without the write lock, for the invoke hot path: every rule it relies on
    /// is held by an environment's lock, a limit row's lock, a unique index or a row-level
    /// compare-and-set (see the module doc). A broken unique rule or a deadlock retries the
    /// whole transaction (see [`in_transaction`]).
    WriteConcurrent,
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

/// A pooled connection held for one transaction. Dropped while its transaction is still open
/// (a cancelled request, or a `COMMIT` or `ROLLBACK` whose answer never came), it is taken out of
/// the pool and closed, which rolls the transaction back on the server; otherwise it goes back
/// to the pool.
pub(crate) struct Conn {
    object: Option<Object>,
    /// Set once `BEGIN` is sent, cleared once `COMMIT` or `ROLLBACK` has answered.
    pub(super) open: AtomicBool,
    /// The store's count of round trips (see [`RoundTrips`]).
    round_trips: Arc<RoundTrips>,
}

impl Conn {
    /// A connection from the pool; its transactions count their round trips in `round_trips`.
    pub(crate) async fn get(pool: &Pool, round_trips: &Arc<RoundTrips>) -> StoreResult<Conn> {
        Ok(Conn {
            object: Some(client(pool).await?),
            open: AtomicBool::new(false),
            round_trips: round_trips.clone(),
        })
    }

    pub(super) fn client(&self) -> StoreResult<&Object> {
        self.object.as_ref().ok_or_else(|| StoreError::Unavailable {
            message: "the connection was closed".into(),
            source: None,
        })
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if *self.open.get_mut() {
            if let Some(object) = self.object.take() {
                drop(Object::take(object));
            }
        }
    }
}

/// One transaction on a [`Conn`]. Nothing is sent until its first statement, which goes to the
/// server together with the `BEGIN` (pipelined: one round trip). Dropped without [`finish`] (a
/// cancelled request), it is rolled back by closing its connection.
pub(crate) struct Tx<'a> {
    conn: &'a Conn,
    mode: Mode,
    /// Set once `BEGIN` is sent.
    begun: AtomicBool,
    /// Set when a statement failed in a way a retry of the whole transaction resolves.
    retryable: AtomicBool,
    audit: Mutex<Vec<PendingAudit>>,
    /// The environments whose lock this transaction holds shared (taken once each).
    shared_envs: Mutex<Vec<String>>,
    /// Statements sent and not yet answered (see [`RoundTrips`]).
    in_flight: AtomicUsize,
    /// For a member of a group commit (`group`): the savepoint its statements run under, which
    /// its first statement opens (and the batch's `BEGIN` with it, if no member sent one yet).
    savepoint: Option<Savepoint>,
    /// Set when a group member's statement waited for a lock longer than
    /// [`MEMBER_LOCK_WAIT_MS`]: the member runs again alone (`group`).
    lock_timed_out: AtomicBool,
}

/// A group member's savepoint: `s<number>`, and whether its `BEGIN` is still to be sent.
#[derive(Debug, Clone, Copy)]
pub(super) struct Savepoint {
    pub number: u32,
    pub begin: bool,
}

/// Round trips made by a store's transactions so far: a round trip starts when a transaction
/// sends a statement while none of its statements is waiting for an answer, so statements sent
/// together (pipelined) count once; preparing a statement the connection has not seen yet is
/// not counted. For tests and profiling.
#[derive(Debug, Default)]
pub(crate) struct RoundTrips(AtomicU64);

impl RoundTrips {
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Opens a transaction on `conn`. Nothing is sent yet; a [`Mode::Write`] transaction's first
/// statement is the write lock, sent with the `BEGIN`.
pub(crate) async fn begin(conn: &Conn, mode: Mode) -> StoreResult<Tx<'_>> {
    conn.client()?;
    let tx = Tx::on(conn, mode, false, None);
    if mode == Mode::Write {
        tx.execute(WRITE_LOCK_SQL, &[]).await?;
    }
    Ok(tx)
}

impl<'a> Tx<'a> {
    /// A transaction of `mode` on `conn`: begun already when `begun` (the `BEGIN` was sent by an
    /// earlier user of the connection), its statements under `savepoint` when it is one member
    /// of a group commit. Nothing is sent yet.
    pub(super) fn on(
        conn: &'a Conn,
        mode: Mode,
        begun: bool,
        savepoint: Option<Savepoint>,
    ) -> Self {
        Tx {
            conn,
            mode,
            begun: AtomicBool::new(begun),
            retryable: AtomicBool::new(false),
            audit: Mutex::new(Vec::new()),
            shared_envs: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            savepoint,
            lock_timed_out: AtomicBool::new(false),
        }
    }

    /// Whether a statement was sent (and with it the `BEGIN` or the savepoint).
    pub(super) fn sent(&self) -> bool {
        self.begun.load(Ordering::Relaxed)
    }

    /// Whether the failure of a statement said that running the work again resolves it.
    pub(super) fn retryable(&self) -> bool {
        self.retryable.load(Ordering::Relaxed)
    }

    /// The audit events queued so far, taken.
    pub(super) fn take_audit(&self) -> Vec<PendingAudit> {
        std::mem::take(&mut *self.audit.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether a group member's statement gave up waiting for a lock (see
    /// [`MEMBER_LOCK_WAIT_MS`]).
    pub(super) fn lock_timed_out(&self) -> bool {
        self.lock_timed_out.load(Ordering::Relaxed)
    }

    /// The savepoint a group member's statements run under: `None` for a member that is not
    /// one, or is its batch's first (which opens none: its work is the whole transaction so far,
    /// undone by a `ROLLBACK`).
    pub(super) fn savepoint_opened(&self) -> Option<u32> {
        self.savepoint.filter(|s| !s.begin).map(|s| s.number)
    }

    /// The connection this transaction runs on.
    pub(super) fn connection(&self) -> &'a Conn {
        self.conn
    }

    /// Commits with `audit` inserted (see [`finish`]), for a group's batch.
    pub(super) async fn commit_with(&self, audit: Vec<PendingAudit>) -> StoreResult<()> {
        self.commit(audit).await
    }

    /// Counts one round trip for a statement sent outside [`Tx::send`] while none is in flight.
    pub(super) fn count_round_trip(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0 {
            self.conn.round_trips.add();
        }
    }
}

/// How a transaction ended.
pub(crate) enum Finished<T> {
    Done(StoreResult<T>),
    /// Rolled back; running the whole transaction again resolves what stopped it.
    Retry(StoreError),
}

/// Commits when `result` is `Ok` and rolls back otherwise, so a method's error commits nothing.
/// The pending audit events are inserted, unsealed, in one statement sent together with the
/// `COMMIT` (one round trip); if that insert fails, PostgreSQL ends the failed transaction at
/// the `COMMIT` as a rollback, and the method fails. Once a commit returns, PostgreSQL has
/// flushed it to its write-ahead log (`synchronous_commit` is checked on connect).
pub(crate) async fn finish<T>(tx: Tx<'_>, result: StoreResult<T>) -> Finished<T> {
    let audit = std::mem::take(&mut *tx.audit.lock().unwrap_or_else(|p| p.into_inner()));
    let result = match result {
        Ok(value) if audit.is_empty() && !tx.begun.load(Ordering::Relaxed) => {
            // Nothing was sent: there is nothing to commit.
            return Finished::Done(Ok(value));
        }
        Ok(value) => tx.commit(audit).await.map(|()| value),
        Err(err) => Err(err),
    };
    match result {
        Ok(value) => Finished::Done(Ok(value)),
        Err(err) => {
            if tx.conn.open.load(Ordering::Relaxed) {
                // The error is what the caller needs; a failed rollback leaves the connection
                // open in its transaction, and dropping it closes it.
                if let Ok(client) = tx.conn.client() {
                    if client.batch_execute("ROLLBACK").await.is_ok() {
                        tx.conn.open.store(false, Ordering::Relaxed);
                    }
                }
            }
            if tx.retryable.load(Ordering::Relaxed) {
                Finished::Retry(err)
            } else {
                Finished::Done(Err(err))
            }
        }
    }
}

/// How long a member of a group commit that is not its batch's first may wait for a lock, in
/// milliseconds (`lock_timeout`, set for the rest of the batch when such a member joins; the
/// first member waits as long as a transaction of its own would). Such a member's batch holds
/// the locks of the members before it, and any of those can be what the lock's holder waits
/// for: a cycle PostgreSQL breaks only after `deadlock_timeout` (1 s by default), which under
/// contention on a few rows repeats until requests time out (docs/DECISIONS.md, "Group commit on
/// PostgreSQL"). So such a member gives up soon, is rolled back to its savepoint and runs again
/// as a transaction of its own, holding nobody else's locks. A lock on the hot path is held
/// for one transaction's round trips: a few milliseconds when nothing is wrong.
pub(crate) const MEMBER_LOCK_WAIT_MS: u64 = 20;

/// How many times a transaction runs at most when a retry would resolve its failure.
pub(crate) const ATTEMPTS_MAX: u32 = 8;

/// Whether running the whole transaction again resolves `err`: a deadlock or a serialization
/// failure in any mode; in [`Mode::WriteConcurrent`] also a broken unique rule (a concurrent
/// transaction inserted the same key first; the next run finds its row).
fn retryable(err: &tokio_postgres::Error, mode: Mode) -> bool {
    match err.code() {
        Some(code) if *code == SqlState::T_R_DEADLOCK_DETECTED => true,
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE => true,
        Some(code) if *code == SqlState::UNIQUE_VIOLATION => mode == Mode::WriteConcurrent,
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
            let conn = $crate::postgres::conn::Conn::get(&$store.pool, &$store.round_trips).await?;
            let $tx = $crate::postgres::conn::begin(&conn, $mode).await?;
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

/// One statement of a [`Tx::pipeline`]: its SQL and its parameters.
pub(crate) type Statement<'a> = (&'a str, &'a Params<'a>);

/// Runs `futures` together and returns their outputs in order, or the first error in order.
/// Each is polled first in the order given, so statements they send reach the server in that
/// order.
async fn join_in_order<T, F>(futures: Vec<F>) -> StoreResult<Vec<T>>
where
    F: std::future::Future<Output = StoreResult<T>>,
{
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_some() {
                continue;
            }
            match future.as_mut().poll(cx) {
                Poll::Ready(Ok(value)) => *output = Some(value),
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => pending = true,
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    })
    .await?;
    Ok(outputs.into_iter().flatten().collect())
}

impl Tx<'_> {
    /// Whether this transaction must take the environment's lock shared
    /// ([`ENV_LOCK_SHARED_SQL`]) before reading the kill switch or the live limits: true the
    /// first time for `env`, noting that it is taken. The caller sends it at the head of a
    /// [`Tx::pipeline`], so the reads after it are sent with it. Held to the end of the
    /// transaction: until then the environment is not halted and its live limits are neither
    /// created nor archived, and a halt or a limit change committed before the lock was granted
    /// is seen by every later statement.
    pub(crate) fn shares_environment(&self, env: &str) -> bool {
        let mut held = self.shared_envs.lock().unwrap_or_else(|p| p.into_inner());
        if held.iter().any(|e| e == env) {
            false
        } else {
            held.push(env.to_string());
            true
        }
    }

    /// Takes the environment's lock exclusively, waiting for every transaction that shares it
    /// (an invoke recording its attempt or tallying its reservation) to end. For the writes that
    /// change what those read: the kill switch and the set of live limits.
    pub(crate) async fn lock_environment(&self, env: &str) -> StoreResult<()> {
        self.execute(ENV_LOCK_SQL, &[&env]).await?;
        Ok(())
    }

    /// Queues an audit event; [`finish`] inserts it, unsealed, with the commit.
    pub(crate) fn audit(&self, event: PendingAudit) {
        self.audit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    /// The `BEGIN` of this transaction, sent by its first statement: `None` once sent. Sent
    /// together with that statement, it cannot fail on its own while the connection lives
    /// (the statement would then run outside a transaction): it is a plain `BEGIN` with an
    /// isolation level, on a connection that is in no transaction.
    fn begin_sql(&self) -> Option<std::borrow::Cow<'static, str>> {
        if self.begun.swap(true, Ordering::Relaxed) {
            return None;
        }
        self.conn.open.store(true, Ordering::Relaxed);
        let begin = match self.mode {
            Mode::Read => "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY",
            Mode::Write | Mode::WriteConcurrent => "BEGIN ISOLATION LEVEL READ COMMITTED",
        };
        Some(match self.savepoint {
            None => begin.into(),
            // The batch's first member: nothing of any other member to keep apart from its own.
            Some(Savepoint { begin: true, .. }) => begin.into(),
            Some(Savepoint {
                number,
                begin: false,
            }) => format!("SET LOCAL lock_timeout = {MEMBER_LOCK_WAIT_MS}; SAVEPOINT s{number}")
                .into(),
        })
    }

    /// Runs `work` (statements sent to the server) after this transaction's `BEGIN`, which it
    /// sends first if no statement did yet, counting round trips (see [`RoundTrips`]).
    async fn send<T>(
        &self,
        work: impl std::future::Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let client = self.conn.client()?;
        if self.in_flight.fetch_add(1, Ordering::Relaxed) == 0 {
            self.conn.round_trips.add();
        }
        let begin = async {
            match self.begin_sql() {
                Some(sql) => client.batch_execute(&sql).await.map_err(unavailable),
                None => Ok(()),
            }
        };
        let done = tokio::try_join!(begin, work).map(|((), value)| value);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        done
    }

    /// Ends the transaction with a `COMMIT`, sent together with the insert of `audit`.
    async fn commit(&self, audit: Vec<PendingAudit>) -> StoreResult<()> {
        let client = self.conn.client()?;
        if !audit.is_empty() {
            // Prepared first, so that the insert is sent before the COMMIT below.
            self.statement(super::audit_log::INSERT_SQL).await?;
        }
        let insert = async {
            if audit.is_empty() {
                Ok(())
            } else {
                super::audit_log::insert(self, audit).await
            }
        };
        let commit = async {
            if self.in_flight.fetch_add(1, Ordering::Relaxed) == 0 {
                self.conn.round_trips.add();
            }
            let committed = client.batch_execute("COMMIT").await;
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            committed.map_err(|e| commit_failed(self.failed(e)))
        };
        let (inserted, committed) = tokio::join!(insert, commit);
        if committed.is_ok() {
            self.conn.open.store(false, Ordering::Relaxed);
        }
        // A failed COMMIT says whether anything may have been committed; a failed insert with
        // an answered COMMIT was rolled back (PostgreSQL ends a failed transaction's COMMIT as
        // a ROLLBACK).
        match committed {
            Err(commit) => Err(commit),
            Ok(()) => inserted,
        }
    }

    /// Maps a statement's failure, noting whether a retry of the transaction resolves it.
    fn failed(&self, err: tokio_postgres::Error) -> tokio_postgres::Error {
        if retryable(&err, self.mode) {
            self.retryable.store(true, Ordering::Relaxed);
        }
        if self.savepoint.is_some() && err.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            // A group member that waited too long for a lock: it runs again alone.
            self.retryable.store(true, Ordering::Relaxed);
            self.lock_timed_out.store(true, Ordering::Relaxed);
        }
        err
    }

    async fn statement(&self, sql: &str) -> StoreResult<tokio_postgres::Statement> {
        self.conn
            .client()?
            .prepare_cached(sql)
            .await
            .map_err(unavailable)
    }

    /// Every row `sql` returns.
    pub(crate) async fn query(&self, sql: &str, params: &Params<'_>) -> StoreResult<Vec<Row>> {
        Ok(self
            .pipeline(&[(sql, params)])
            .await?
            .into_iter()
            .next()
            .unwrap_or_default())
    }

    /// Runs `statements` in order and returns the rows of each, in one round trip once they are
    /// prepared (statements seen for the first time on this connection are prepared first,
    /// together, so that none overtakes another). The server runs each after the one before
    /// it, each with a snapshot of its own: a statement after a lock sees what was committed
    /// before the lock was granted. If one fails, the ones after it fail too (the transaction
    /// is aborted) and the first failure is returned.
    pub(crate) async fn pipeline(
        &self,
        statements: &[Statement<'_>],
    ) -> StoreResult<Vec<Vec<Row>>> {
        let client = self.conn.client()?;
        let prepared = join_in_order(
            statements
                .iter()
                .map(|(sql, _)| self.statement(sql))
                .collect(),
        )
        .await?;
        self.send(join_in_order(
            prepared
                .iter()
                .zip(statements)
                .map(|(statement, (_, params))| async move {
                    client
                        .query(statement, params)
                        .await
                        .map_err(|e| unavailable(self.failed(e)))
                })
                .collect(),
        ))
        .await
    }

    /// The first row `sql` returns, decoded, if any: `sql` is planned for these parameters each
    /// time it runs (an unnamed statement, parsed, bound and run in one round trip), never
    /// prepared and cached. For a lookup whose best index depends on how large a table has
    /// grown since it was last analyzed: a cached plan would keep the choice made when the
    /// table was small.
    pub(crate) async fn one_planned<T>(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), tokio_postgres::types::Type)],
        decode: fn(&Row) -> StoreResult<T>,
    ) -> StoreResult<Option<T>> {
        let client = self.conn.client()?;
        let rows = self
            .send(async {
                client
                    .query_typed(sql, params)
                    .await
                    .map_err(|e| unavailable(self.failed(e)))
            })
            .await?;
        rows.first().map(decode).transpose()
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
        let client = self.conn.client()?;
        let statement = self.statement(sql).await?;
        self.send(async {
            client
                .execute(&statement, params)
                .await
                .map_err(|e| unavailable(self.failed(e)))
        })
        .await
    }

    /// Like [`Tx::execute`], mapping a broken uniqueness rule to `Duplicate { what }` and a
    /// missing environment to `NotFound`.
    pub(crate) async fn execute_unique(
        &self,
        what: &'static str,
        sql: &str,
        params: &Params<'_>,
    ) -> StoreResult<u64> {
        let client = self.conn.client()?;
        let statement = self.statement(sql).await?;
        self.send(async {
            client
                .execute(&statement, params)
                .await
                .map_err(|e| constraint(self.failed(e), what))
        })
        .await
    }

    /// Runs several statements in one round trip (schema migrations).
    pub(crate) async fn batch(&self, sql: &str) -> StoreResult<()> {
        let client = self.conn.client()?;
        self.send(async { client.batch_execute(sql).await.map_err(unavailable) })
            .await
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Only an answer that says the transaction rolled back makes a failed COMMIT "nothing
    /// committed"; a killed primary's "terminating connection" (57P01, sent after it committed
    /// locally), a crash (57P02), a lost connection (08006) or no answer at all may have
    /// committed.
    #[test]
    fn a_failed_commit_is_ambiguous_unless_it_says_it_rolled_back() {
        for rolled_back in [
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::UNIQUE_VIOLATION,
            SqlState::FOREIGN_KEY_VIOLATION,
            SqlState::IN_FAILED_SQL_TRANSACTION,
        ] {
            assert!(
                commit_rolled_back(Some(rolled_back.code())),
                "{rolled_back:?}"
            );
        }
        for ambiguous in [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CONNECTION_FAILURE,
            SqlState::QUERY_CANCELED,
            SqlState::INTERNAL_ERROR,
            SqlState::IO_ERROR,
            SqlState::RAISE_EXCEPTION,
        ] {
            assert!(!commit_rolled_back(Some(ambiguous.code())), "{ambiguous:?}");
        }
        assert!(!commit_rolled_back(None), "no answer at all");
        assert!(!commit_rolled_back(Some("4")), "a malformed code");
    }

    /// Every connection is bounded: a dead peer is noticed by keepalives and `TCP_USER_TIMEOUT`,
    /// a stuck statement ends at the statement timeout, a connect at the connect timeout.
    #[test]
    fn a_connection_is_bounded_by_default() {
        let config =
            config("postgres://u@h1:5433,h2:5434/steward?target_session_attrs=read-write").unwrap();
        assert_eq!(
            config.get_hosts().len(),
            2,
            "a multi-host URL keeps its hosts"
        );
        assert!(config.get_keepalives());
        assert_eq!(
            config.get_keepalives_idle(),
            Duration::from_secs(TCP_KEEPALIVE_IDLE_S)
        );
        assert_eq!(
            config.get_keepalives_interval(),
            Some(Duration::from_secs(TCP_KEEPALIVE_INTERVAL_S))
        );
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_millis(TCP_USER_TIMEOUT_MS))
        );
        assert_eq!(
            config.get_connect_timeout(),
            Some(&Duration::from_millis(CONNECT_TIMEOUT_MS))
        );
        let options = config.get_options().unwrap();
        assert!(
            options.contains(&format!("statement_timeout={STATEMENT_TIMEOUT_MS}")),
            "{options}"
        );
        assert!(
            options.contains("idle_in_transaction_session_timeout"),
            "{options}"
        );
    }

    #[test]
    fn what_the_connection_string_sets_wins() {
        let config = config(
            "postgres://u@h/steward?connect_timeout=2&keepalives_idle=30&tcp_user_timeout=4\
             &options=-c%20statement_timeout%3D1000",
        )
        .unwrap();
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(2)));
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(30));
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(4)),
            "tokio-postgres reads tcp_user_timeout in seconds (libpq: milliseconds)"
        );
        let options = config.get_options().unwrap();
        assert!(options.contains("statement_timeout=1000"), "{options}");
        assert_eq!(options.matches("statement_timeout").count(), 1, "{options}");
    }
}
