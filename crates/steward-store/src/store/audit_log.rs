//! The audit log. Every state change appends its event, unsealed, in its own transaction; one
//! sealer seals events into the hash chain afterwards, in batches (`crate::audit`). This part
//! reads the log back out and seals it.

use crate::audit::{AuditHead, AuditSeal, SealOutcome};
use crate::error::StoreResult;
use crate::records::AuditEvent;
use async_trait::async_trait;

/// The hash-chained audit log: the sealed chain in order, the unsealed tail, and the sealer
/// (`crate::verify_log` checks what they return).
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Sealed audit events with `seq > after`, in chain order (`seq` ascending), at most
    /// `limit`. Events committed but not sealed yet are read with `unsealed_audit_events`.
    async fn audit_events(&self, after: i64, limit: u32) -> StoreResult<Vec<AuditEvent>>;

    /// Audit events committed but not sealed yet, with insertion id `> after_id`, in insertion
    /// order (`id` ascending), at most `limit`. The sealer seals them in that order, though an
    /// event whose transaction commits later than a newer one's may be sealed after it.
    async fn unsealed_audit_events(
        &self,
        after_id: i64,
        limit: u32,
    ) -> StoreResult<Vec<AuditEvent>>;

    /// The sealed chain's head as the last seal stored it, with the sealer's lease.
    async fn audit_head(&self) -> StoreResult<AuditHead>;

    /// Seals the oldest unsealed events (at most `seal.events_max`), in one transaction: each
    /// gets the next `seq`, the previous event's chain hash and its own chain hash, and the new
    /// head is stored (`audit.rs`). A seal that fails or whose process dies commits nothing.
    /// Seals serialize in the database, so concurrent ones never fork the chain. The lease keeps
    /// one replica sealing: while another replica that is still registered (`heartbeat`) holds
    /// it, this answers `Held` and writes nothing; a seal that seals takes or renews it until
    /// `now + lease_ms`. Correctness never depends on the lease, only the sharing of work.
    async fn seal_audit(&self, seal: &AuditSeal) -> StoreResult<SealOutcome>;
}
