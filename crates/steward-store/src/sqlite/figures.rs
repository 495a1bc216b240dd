//! `/metrics`' figures on SQLite (`store/figures.rs`): counts over partial indexes, and the
//! reader connections in use.

use super::conn::{unavailable, READERS_MAX};
use super::SqliteStore;
use crate::error::StoreResult;
use crate::store::{overdue_ms, Figures, OperatingFigures, PoolUse, DEAD_LETTERS_COUNTED_MAX};
use async_trait::async_trait;
use rusqlite::{params, Connection};
use steward_core::Millis;

/// Each figure's query, with `?1` the time now where it needs one. Every count reads a partial
/// index (`approvals_pending_expiry`, `effects_open`, `effects_reconcile_due`) or is capped.
const APPROVALS_PENDING: &str = "SELECT COUNT(*) FROM approvals WHERE status = 'pending'";
const EFFECTS_DISPATCHING: &str = "SELECT COUNT(*) FROM effects WHERE state = 'dispatching'";
const EFFECTS_UNKNOWN: &str = "SELECT COUNT(*) FROM effects WHERE state = 'unknown'";
/// The earliest due time of an `unknown` effect that is due (`reconcile_after` past, or never
/// scheduled), or 0 when none is: the reconciler's own claim orders by the same expression.
const OLDEST_DUE: &str = "SELECT COALESCE(MIN(COALESCE(reconcile_after, updated_at)), 0)
    FROM effects WHERE state = 'unknown' AND (reconcile_after IS NULL OR reconcile_after <= ?1)";
const DEAD_LETTERS_WAITING: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM webhook_dead_letters
    WHERE redelivery <> 'redelivered' LIMIT ?1)";

fn count(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> StoreResult<u64> {
    let n: i64 = conn
        .query_row(sql, params, |r| r.get(0))
        .map_err(unavailable)?;
    Ok(n.max(0) as u64)
}

#[async_trait]
impl Figures for SqliteStore {
    async fn figures(&self, now: Millis) -> StoreResult<OperatingFigures> {
        self.read(move |conn| {
            let oldest_due = count(conn, OLDEST_DUE, params![now.0])?;
            let counted_max = DEAD_LETTERS_COUNTED_MAX as i64;
            Ok(OperatingFigures {
                approvals_pending: count(conn, APPROVALS_PENDING, [])?,
                effects_dispatching: count(conn, EFFECTS_DISPATCHING, [])?,
                effects_unknown: count(conn, EFFECTS_UNKNOWN, [])?,
                reconcile_overdue_ms: overdue_ms(oldest_due, now),
                dead_letters_waiting: count(conn, DEAD_LETTERS_WAITING, params![counted_max])?,
            })
        })
        .await
    }

    fn pool_use(&self) -> PoolUse {
        let free = self.pool.reader_permits.available_permits() as u64;
        PoolUse {
            in_use: (READERS_MAX as u64).saturating_sub(free),
            max: READERS_MAX as u64,
            // Tokio's semaphore does not say how many wait; `in_use == max` is the sign.
            waiting: 0,
        }
    }
}
