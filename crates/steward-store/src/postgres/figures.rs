//! `/metrics`' figures on PostgreSQL (`store/figures.rs`): counts over partial indexes in one
//! read-only transaction, and the connection pool's status.

use super::conn::{in_transaction, Mode};
use super::PostgresStore;
use crate::error::StoreResult;
use crate::store::{overdue_ms, Figures, OperatingFigures, PoolUse, DEAD_LETTERS_COUNTED_MAX};
use async_trait::async_trait;
use steward_core::Millis;

/// Each figure's query, as on SQLite (`sqlite/figures.rs`).
const APPROVALS_PENDING: &str = "SELECT COUNT(*) FROM approvals WHERE status = 'pending'";
const EFFECTS_DISPATCHING: &str = "SELECT COUNT(*) FROM effects WHERE state = 'dispatching'";
const EFFECTS_UNKNOWN: &str = "SELECT COUNT(*) FROM effects WHERE state = 'unknown'";
const OLDEST_DUE: &str = "SELECT COALESCE(MIN(COALESCE(reconcile_after, updated_at)), 0)
    FROM effects WHERE state = 'unknown' AND (reconcile_after IS NULL OR reconcile_after <= $1)";
const DEAD_LETTERS_WAITING: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM webhook_dead_letters
    WHERE redelivery <> 'redelivered' LIMIT $1) AS waiting";

#[async_trait]
impl Figures for PostgresStore {
    async fn figures(&self, now: Millis) -> StoreResult<OperatingFigures> {
        let counted_max = DEAD_LETTERS_COUNTED_MAX as i64;
        let n = |v: i64| v.max(0) as u64;
        in_transaction!(self, Mode::Read, |tx| async {
            let oldest_due = tx.count(OLDEST_DUE, &[&now.0]).await?;
            Ok(OperatingFigures {
                approvals_pending: n(tx.count(APPROVALS_PENDING, &[]).await?),
                effects_dispatching: n(tx.count(EFFECTS_DISPATCHING, &[]).await?),
                effects_unknown: n(tx.count(EFFECTS_UNKNOWN, &[]).await?),
                reconcile_overdue_ms: overdue_ms(n(oldest_due), now),
                dead_letters_waiting: n(tx.count(DEAD_LETTERS_WAITING, &[&counted_max]).await?),
            })
        })
    }

    fn pool_use(&self) -> PoolUse {
        let status = self.pool.status();
        PoolUse {
            in_use: status.size.saturating_sub(status.available) as u64,
            max: status.max_size as u64,
            waiting: status.waiting as u64,
        }
    }
}
