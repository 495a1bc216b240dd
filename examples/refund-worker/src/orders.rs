//! The worker's own records, in the same SQLite file as its journal: each order's refund status,
//! and a notification outbox. Together they are the continuation that runs after a refund's
//! final local save, and they are idempotent: running the continuation again after a crash
//! changes nothing and never queues a second notification.

use anyhow::Context;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::path::Path;
use std::time::Duration;

/// How long a write waits for the journal's connection to release the file, in milliseconds.
const BUSY_TIMEOUT_MS: u64 = 5_000;

pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS refund_orders (
    order_id     TEXT PRIMARY KEY,
    status       TEXT NOT NULL,
    refund_id    TEXT,
    operation_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS refund_notifications (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id     TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    message      TEXT NOT NULL
);
";

/// The outcome the continuation records for one order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<'a> {
    pub order_id: &'a str,
    pub operation_id: &'a str,
    /// `refunded`, or the reason it was not (`failed`, `denied`, `expired`).
    pub status: &'a str,
    pub refund_id: Option<&'a str>,
}

pub struct Orders {
    conn: Connection,
}

impl Orders {
    pub fn open(path: &Path) -> anyhow::Result<Orders> {
        let conn =
            Connection::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
        conn.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))?;
        conn.execute_batch("PRAGMA synchronous=FULL;")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Orders { conn })
    }

    /// The continuation: upserts the order's status and, for a refund, queues exactly one
    /// customer notification. One transaction; safe to run any number of times.
    pub fn record(&mut self, outcome: &Outcome<'_>) -> anyhow::Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT INTO refund_orders (order_id, status, refund_id, operation_id) \
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (order_id) DO UPDATE SET \
             status = excluded.status, refund_id = excluded.refund_id, \
             operation_id = excluded.operation_id",
            params![
                outcome.order_id,
                outcome.status,
                outcome.refund_id,
                outcome.operation_id
            ],
        )?;
        if outcome.status == "refunded" {
            let queued: Option<i64> = tx
                .query_row(
                    "SELECT seq FROM refund_notifications WHERE order_id = ?1",
                    [outcome.order_id],
                    |r| r.get(0),
                )
                .optional()?;
            if queued.is_none() {
                tx.execute(
                    "INSERT INTO refund_notifications (order_id, operation_id, message) \
                     VALUES (?1, ?2, ?3)",
                    params![
                        outcome.order_id,
                        outcome.operation_id,
                        format!("Your order {} has been refunded.", outcome.order_id)
                    ],
                )?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Notifications queued per order.
    pub fn notifications(&self, order_id: &str) -> anyhow::Result<u64> {
        Ok(self.conn.query_row(
            "SELECT count(*) FROM refund_notifications WHERE order_id = ?1",
            [order_id],
            |r| r.get(0),
        )?)
    }

    pub fn status(&self, order_id: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT status FROM refund_orders WHERE order_id = ?1",
                [order_id],
                |r| r.get(0),
            )
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_continuation_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let mut orders = Orders::open(&dir.path().join("worker.db")).unwrap();
        let refunded = Outcome {
            order_id: "o-1",
            operation_id: "op_1",
            status: "refunded",
            refund_id: Some("re_1"),
        };
        for _ in 0..3 {
            orders.record(&refunded).unwrap();
        }
        assert_eq!(orders.notifications("o-1").unwrap(), 1);
        assert_eq!(orders.status("o-1").unwrap().as_deref(), Some("refunded"));
        let failed = Outcome {
            order_id: "o-2",
            operation_id: "op_2",
            status: "failed",
            refund_id: None,
        };
        orders.record(&failed).unwrap();
        assert_eq!(orders.notifications("o-2").unwrap(), 0);
    }
}
