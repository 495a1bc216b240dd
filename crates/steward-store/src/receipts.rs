//! Signed receipts as stored (issue #29; the receipt itself is `steward_core::receipt`).
//!
//! **Issued after the settlement, by one issuer, like the audit seal.** A settlement commits
//! its `effect.transition` audit event (or, for an invocation a policy denied as it was
//! recorded, its `invocation.created`) in its own transaction, and the sealer gives that event
//! its place in the sealed log. The issuer (`steward-server`'s `receipts/issuer.rs`) follows the
//! sealed log with a cursor, signs one receipt per settlement event, and commits a batch of
//! receipts together with the cursor's new place ([`crate::Store::issue_receipts`]). Because the
//! cursor and the receipts commit together, and the batch is refused when the cursor moved
//! under it, every settlement gets exactly one receipt, however often the issuer dies or
//! several replicas race: the unique `audit_seq` column says so a second time.
//!
//! **Chained per environment.** Each receipt carries its environment's next `seq` and the
//! previous receipt's digest; a batch is refused ([`IssueOutcome::Moved`]) unless each of its
//! receipts follows its environment's head as stored ([`check_links`]).

use crate::columns::Columns;
use crate::error::{StoreError, StoreResult};
use serde_json::Value;
use std::collections::HashMap;
use steward_core::receipt::GENESIS_DIGEST;
use steward_core::{EffectId, EnvironmentId, Millis};

/// The most receipts one page of an environment's chain holds: the API's page limit for every
/// list (a receipt is about 2 KiB, so a page stays under half a MiB).
pub const RECEIPT_PAGE_MAX: u32 = 200;

/// One receipt signing key: its public half in the clear, its private half sealed under the
/// vault's master key (the store never sees it open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptKeyRecord {
    /// `rk_` and 16 hex digits of its public key's SHA-256 (`steward_core::receipt::key_id_of`).
    pub id: String,
    /// The 32-byte Ed25519 public key, in lower-case hex.
    pub public_key: String,
    pub nonce: Vec<u8>,
    pub sealed: Vec<u8>,
    pub created_at: Millis,
}

impl ReceiptKeyRecord {
    /// One row of `SELECT id, public_key, nonce, sealed, created_at`.
    pub(crate) fn read(row: &impl Columns) -> StoreResult<Self> {
        Ok(ReceiptKeyRecord {
            id: row.get(0)?,
            public_key: row.get(1)?,
            nonce: row.get(2)?,
            sealed: row.get(3)?,
            created_at: row.millis(4)?,
        })
    }

    /// What the audit log records of a new key: its public half only.
    pub(crate) fn audit_view(&self) -> Value {
        serde_json::json!({"publicKey": self.public_key, "createdAt": self.created_at.0})
    }
}

/// One signed receipt, as stored: where it sits in its environment's chain, what it is for, and
/// the receipt itself (`body`, with its `signature`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptRecord {
    pub env_id: EnvironmentId,
    /// Its place in the environment's chain, from 1.
    pub seq: i64,
    pub effect_id: EffectId,
    /// The sealed audit event of the settlement it is for: one receipt per event.
    pub audit_seq: i64,
    pub key_id: String,
    /// `steward_core::receipt::json_digest` of `body`.
    pub digest: String,
    pub previous_digest: String,
    pub body: Value,
    pub issued_at: Millis,
}

/// The columns every receipt read selects, in [`ReceiptRecord::read`]'s order.
pub(crate) const RECEIPT_COLUMNS: &str =
    "env_id, seq, effect_id, audit_seq, key_id, digest, previous_digest, body, issued_at";

impl ReceiptRecord {
    pub(crate) fn read(row: &impl Columns) -> StoreResult<Self> {
        let body: String = row.get(7)?;
        Ok(ReceiptRecord {
            env_id: row.id(0, EnvironmentId::parse)?,
            seq: row.get(1)?,
            effect_id: row.id(2, EffectId::parse)?,
            audit_seq: row.get(3)?,
            key_id: row.get(4)?,
            digest: row.get(5)?,
            previous_digest: row.get(6)?,
            body: serde_json::from_str(&body)
                .map_err(|e| StoreError::Corrupt(format!("receipt body: {e}")))?,
            issued_at: row.millis(8)?,
        })
    }

    /// The body as stored: its RFC 8785 form, so that what is read back is byte for byte what
    /// was signed.
    pub(crate) fn stored_body(&self) -> String {
        steward_core::jcs(&self.body)
    }
}

/// A batch of receipts the issuer signed after reading the sealed log from `after_audit_seq`
/// through `through_audit_seq` (every event in between that is a settlement has its receipt
/// here, in order).
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptBatch {
    pub after_audit_seq: i64,
    pub through_audit_seq: i64,
    pub receipts: Vec<ReceiptRecord>,
}

/// What `issue_receipts` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueOutcome {
    /// Committed, with the cursor at the batch's `through_audit_seq`.
    Issued { receipts: usize },
    /// Nothing written: another issuer moved the cursor or a chain first (the issuer reads
    /// again and signs anew).
    Moved,
}

/// True when each receipt of `batch` follows its environment's head: the stored one (`heads`,
/// by environment: `(seq, digest)`, absent for an environment without receipts) or the batch's
/// receipt before it.
pub(crate) fn check_links(
    heads: &HashMap<EnvironmentId, (i64, String)>,
    batch: &ReceiptBatch,
) -> bool {
    let mut heads = heads.clone();
    batch.receipts.iter().all(|r| {
        let (seq, digest) = heads
            .get(&r.env_id)
            .cloned()
            .unwrap_or((0, GENESIS_DIGEST.to_string()));
        let follows = r.seq == seq + 1 && r.previous_digest == digest;
        heads.insert(r.env_id.clone(), (r.seq, r.digest.clone()));
        follows && r.audit_seq > batch.after_audit_seq && r.audit_seq <= batch.through_audit_seq
    })
}

/// The environments a batch writes to, each once.
pub(crate) fn environments(batch: &ReceiptBatch) -> Vec<EnvironmentId> {
    let mut envs: Vec<EnvironmentId> = batch.receipts.iter().map(|r| r.env_id.clone()).collect();
    envs.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    envs.dedup();
    envs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(env: &EnvironmentId, seq: i64, previous: &str, audit_seq: i64) -> ReceiptRecord {
        ReceiptRecord {
            env_id: env.clone(),
            seq,
            effect_id: EffectId::from_unique("01hx0000000000000000000001"),
            audit_seq,
            key_id: "rk_1".into(),
            digest: format!("sha256:{seq}"),
            previous_digest: previous.into(),
            body: serde_json::json!({}),
            issued_at: Millis(1),
        }
    }

    #[test]
    fn a_batch_must_follow_each_environments_head_and_its_own_receipts() {
        let a = EnvironmentId::from_unique("01hx00000000000000000000aa");
        let b = EnvironmentId::from_unique("01hx00000000000000000000bb");
        let heads = HashMap::from([(a.clone(), (4, "sha256:4".to_string()))]);
        let batch = |receipts| ReceiptBatch {
            after_audit_seq: 10,
            through_audit_seq: 20,
            receipts,
        };
        let good = batch(vec![
            receipt(&a, 5, "sha256:4", 11),
            receipt(&b, 1, GENESIS_DIGEST, 12),
            receipt(&a, 6, "sha256:5", 13),
        ]);
        assert!(check_links(&heads, &good));
        assert_eq!(environments(&good), vec![a.clone(), b.clone()]);
        assert!(!check_links(
            &heads,
            &batch(vec![receipt(&a, 6, "sha256:5", 11)])
        ));
        assert!(!check_links(
            &heads,
            &batch(vec![receipt(&a, 5, "sha256:x", 11)])
        ));
        assert!(!check_links(
            &heads,
            &batch(vec![receipt(&b, 1, GENESIS_DIGEST, 21)])
        ));
    }
}
