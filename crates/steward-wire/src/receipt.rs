//! Signed receipts (`docs/RECEIPTS.md`): the receipt as signed, and the public keys that verify
//! it. The receipt's view is `steward_core::receipt::Receipt` itself, the type the server signs
//! (its `schema` feature makes it a schema), so the members served are the members signed: read
//! back from the store, it serializes to the very object that was signed.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use steward_core::receipt::{
    Receipt, ReceiptApproval, ReceiptDecision, ReceiptPolicy, ReceiptProvider, ReceiptRequest,
    ReceiptSettlement,
};

/// One receipt signing key's public half. Every key ever made is listed: receipts name theirs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptKey {
    pub key_id: String,
    /// `Ed25519`.
    pub algorithm: String,
    /// The 32-byte public key, in lower-case hex.
    pub public_key: String,
    pub created_at: String,
    /// True for the key that signs new receipts.
    pub current: bool,
}
