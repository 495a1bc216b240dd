//! Signed receipts (`crate::receipts`): the receipt signing keys, and the receipts the issuer
//! signs after each settlement, chained per environment.

use crate::error::StoreResult;
use crate::receipts::{IssueOutcome, ReceiptBatch, ReceiptKeyRecord, ReceiptRecord};
use crate::records::Actor;
use async_trait::async_trait;
use steward_core::{EffectId, EnvironmentId};

#[async_trait]
pub trait Receipts: Send + Sync {
    /// Every receipt signing key ever made, oldest first; the last is the one that signs.
    async fn receipt_keys(&self) -> StoreResult<Vec<ReceiptKeyRecord>>;

    /// Adds `key`, which signs from then on, with its audit event. With `first_only`, adds it
    /// only when no key exists yet and answers whether it did: replicas starting together on
    /// one new database make one key between them. Once it returns, the key is durable.
    async fn add_receipt_key(
        &self,
        key: &ReceiptKeyRecord,
        first_only: bool,
        actor: &Actor,
    ) -> StoreResult<bool>;

    /// The issuer's cursor: the sealed audit log's `seq` up to which every settlement has its
    /// receipt (0 on a new store).
    async fn receipt_cursor(&self) -> StoreResult<i64>;

    /// The environment's last receipt as `(seq, digest)`; `None` before its first.
    async fn receipt_head(&self, env: &EnvironmentId) -> StoreResult<Option<(i64, String)>>;

    /// Commits `batch` and moves the cursor to its `through_audit_seq`, in one transaction,
    /// when the cursor stands at its `after_audit_seq` and each receipt follows its
    /// environment's head (`crate::receipts::check_links`); otherwise writes nothing and
    /// answers `Moved`. Concurrent issuers serialize on the cursor, so the chain never forks and
    /// no settlement gets two receipts. Once it returns `Issued`, the receipts are durable.
    async fn issue_receipts(&self, batch: &ReceiptBatch) -> StoreResult<IssueOutcome>;

    /// The effect's receipts, one per settlement, in chain order.
    async fn effect_receipts(
        &self,
        env: &EnvironmentId,
        effect: &EffectId,
    ) -> StoreResult<Vec<ReceiptRecord>>;

    /// The environment's receipts with `seq > after`, in chain order, at most `limit`.
    async fn receipts(
        &self,
        env: &EnvironmentId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<ReceiptRecord>>;
}
