//! What an operator graphs, read when `/metrics` is scraped: counts and ages over every
//! environment, each answered from an index and bounded, and the connection pool's use.

use crate::error::StoreResult;
use async_trait::async_trait;
use steward_core::Millis;

/// The most dead letters a scrape counts: a longer list reads as this many, so a scrape never
/// scans more than this many rows of `webhook_dead_letters` whatever piled up.
pub const DEAD_LETTERS_COUNTED_MAX: u64 = 100_000;

/// The store's side of `/metrics`, over every environment (an operator's view, not a tenant's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperatingFigures {
    /// Approvals still `pending`: waiting for a person.
    pub approvals_pending: u64,
    /// Effects `dispatching`: an attempt recorded, its answer not yet (on any replica).
    pub effects_dispatching: u64,
    /// Effects `unknown`: the reconciler's queue.
    pub effects_unknown: u64,
    /// How long the most overdue reconcile has waited past its due time, in milliseconds
    /// (0 when none is due): the reconciler's lag. An `unknown` effect is due when its
    /// `reconcile_after` has passed (or, never scheduled, from when it became unknown).
    pub reconcile_overdue_ms: u64,
    /// Dead letters not redelivered (still `dead`, or redelivery requested), at most
    /// [`DEAD_LETTERS_COUNTED_MAX`].
    pub dead_letters_waiting: u64,
}

/// The store's connections as they stand: for SQLite its reader connections (the one writer is
/// a queue, timed by the commit histogram), for PostgreSQL its pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolUse {
    /// Connections lent out now.
    pub in_use: u64,
    /// The most the pool lends at once.
    pub max: u64,
    /// Callers waiting for a connection.
    pub waiting: u64,
}

/// The figures `/metrics` reads at scrape time.
#[async_trait]
pub trait Figures: Send + Sync {
    /// The figures at `now`. Read-only: it claims and changes nothing.
    async fn figures(&self, now: Millis) -> StoreResult<OperatingFigures>;

    /// The connection pool's use now. Reads counters in memory: no IO.
    fn pool_use(&self) -> PoolUse;
}

/// How far `now` is past `oldest_due` (0: none is due), in milliseconds.
pub(crate) fn overdue_ms(oldest_due: u64, now: Millis) -> u64 {
    if oldest_due == 0 {
        return 0;
    }
    (now.0.max(0) as u64).saturating_sub(oldest_due)
}
