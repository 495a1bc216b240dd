//! The shared store: PostgreSQL, for several Steward replicas on one database.
//!
//! Semantics are the embedded store's, method for method, and every rule is held by the
//! database, never by process memory: unique indexes (one effect per operation key, one live
//! action per name, one retry per failed invocation), compare-and-set updates on an effect's
//! state and on versions, row locks on the limits a tally counts, one transaction-scoped
//! advisory lock that orders most writes across every connection and replica, and one per
//! environment that its invokes share and a halt or a limit change takes alone (see `conn`:
//! the invoke hot path never takes the first). The audit hash chain is sealed off the commit path (`audit_log`).
//! Constraint violations map to the same [`StoreError`](crate::StoreError) variants as SQLite's:
//! a unique violation (23505) is `Duplicate`, a foreign key violation (23503) is
//! `NotFound { what: "environment" }`, a connection or I/O failure is `Unavailable`, a row that
//! does not decode is `Corrupt`.
//!
//! Durability: a method returns `Ok` only after PostgreSQL acknowledged the `COMMIT`, and with
//! `synchronous_commit` on (the default, checked on connect) PostgreSQL acknowledges a commit only
//! once its write-ahead log record is flushed to disk: that flush is the fsync the crash contract
//! of [`Store`](crate::Store) promises. Where `synchronous_commit` is `remote_write`,
//! `remote_apply` or `on` with synchronous standbys, the commit also waited for them.
//!
//! Each part of the store is implemented in the module of its name, beside its SQL
//! (`impl Identity for PostgresStore` in `identity.rs`, and so on); a method is one
//! `in_transaction!` of the mode it needs, or, for the hot path's steps (`submit`,
//! `submit_and_begin`, `finish_invoke_request`, `change_effect`, `change_effect_and_read`,
//! `decide_and_begin`), one `in_group!`: a member of a group commit (`group`, with `STEWARD_PG_GROUP_COMMIT=on`),
//! answered once its batch committed.

mod approvals;
mod audit_log;
mod budgets;
mod catalog;
pub(crate) mod conn;
mod connections;
mod effects;
mod existing;
mod figures;
pub(crate) mod group;
mod holds;
mod idempotency;
mod identity;
mod kill_switch;
mod limits;
mod links;
mod notify;
mod policies;
mod previews;
mod receipts;
mod replicas;
mod rows;
mod runs;
mod schema;
mod webhooks;

use crate::error::{StoreError, StoreResult};
use conn::{in_transaction, Mode};
use deadpool_postgres::Pool;
use std::sync::Arc;

/// The PostgreSQL store. Cheap to clone; clones share the connection pool, the heartbeat
/// connection, the approval listener and the approval announcer.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    heartbeats: Arc<replicas::Heartbeats>,
    announcements: Arc<notify::Announcements>,
    round_trips: Arc<conn::RoundTrips>,
    announcer: Arc<notify::Announcer>,
    /// The group commit of the hot path's steps (`group`).
    group: Arc<group::Group>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool.status())
            .finish()
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host:port/database`, or a `key=value` connection
    /// string), checks that commits are durable, and brings the schema up to date. Safe to call
    /// from several replicas at once: migrations are applied exactly once. No TLS: run it on
    /// loopback or a trusted network.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let config = conn::config(url)?;
        let store = Self {
            pool: conn::pool(&config)?,
            heartbeats: Arc::new(replicas::Heartbeats::new(config.clone())),
            announcements: Arc::new(notify::Announcements::new(config.clone())),
            round_trips: Arc::default(),
            announcer: Arc::new(notify::Announcer::new(config)),
            group: Arc::default(),
        };
        store.check_durable_commits().await?;
        in_transaction!(store, Mode::Write, |tx| schema::migrate(&tx))?;
        Ok(store)
    }

    /// Round trips to the database this store's transactions (and its clones') made so far,
    /// counting statements sent together (pipelined) once: a gauge for tests and profiling of
    /// the hot path, not a contract.
    #[doc(hidden)]
    pub fn round_trips(&self) -> u64 {
        self.round_trips.get()
    }

    /// Batches the group commit (`group`) committed so far, and the steps they held: a gauge
    /// for tests and profiling, not a contract.
    #[doc(hidden)]
    pub fn group_commits(&self) -> (u64, u64) {
        self.group.committed()
    }

    /// Refuses a server that acknowledges commits before they are on disk.
    async fn check_durable_commits(&self) -> StoreResult<()> {
        let client = conn::client(&self.pool).await?;
        let row = client
            .query_one("SHOW synchronous_commit", &[])
            .await
            .map_err(conn::unavailable)?;
        let setting: &str = rows::col(&row, 0)?;
        if setting == "off" {
            return Err(StoreError::Unavailable {
                message: "PostgreSQL has synchronous_commit=off: a commit could be lost after it \
                          returned, which breaks the store's crash contract; set it to on"
                    .into(),
                source: None,
            });
        }
        Ok(())
    }
}
