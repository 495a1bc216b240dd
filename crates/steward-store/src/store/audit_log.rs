//! Reading the audit log. Every state change appends its event in its own transaction; this is
//! the way back out.

use crate::error::StoreResult;
use crate::records::AuditEvent;
use async_trait::async_trait;

/// The hash-chained audit log, read in order (`crate::verify_chain` checks what it returns).
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Audit events with `seq > after`, oldest first.
    async fn audit_events(&self, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>>;
}
