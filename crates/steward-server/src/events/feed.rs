//! A cursor over one environment's events in the sealed audit log.

use super::catalog::public_event;
use serde_json::Value;
use steward_store::{AuditLog, StoreResult};

/// How many sealed audit events one read scans at most (of every environment: the log is one
/// chain). Bounds one poll's work and memory; a backlog is read batch after batch.
pub(crate) const FEED_BATCH_EVENTS_MAX: u32 = 500;

/// Reads one environment's public events after a cursor (a sealed `seq`), in order.
#[derive(Debug, Clone)]
pub(crate) struct Feed {
    pub env: String,
    /// The last `seq` read, whether or not it was this environment's or public.
    pub cursor: i64,
}

impl Feed {
    /// The next public events of the environment after the cursor, at most one batch's scan
    /// ([`FEED_BATCH_EVENTS_MAX`]), and moves the cursor past everything scanned. An empty
    /// answer with the cursor unchanged means the feed is caught up with the sealed log.
    pub async fn next(&mut self, log: &dyn AuditLog) -> StoreResult<Vec<(i64, Value)>> {
        let scanned = log.audit_events(self.cursor, FEED_BATCH_EVENTS_MAX).await?;
        let mut out = Vec::new();
        for event in &scanned {
            let Some(seq) = event.seq() else { continue };
            assert!(
                seq > self.cursor,
                "the log answered seq {seq} at or before the cursor {}",
                self.cursor
            );
            self.cursor = seq;
            if let Some(found) = public_event(&self.env, event) {
                out.push(found);
            }
        }
        Ok(out)
    }
}
