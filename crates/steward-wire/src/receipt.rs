//! Signed receipts (`docs/RECEIPTS.md`): the receipt as signed, and the public keys that verify
//! it. A receipt's members are exactly those `steward_core::receipt::Receipt` signs, plus its
//! `signature`; every member is always present (`null` when it does not apply), so this view
//! serializes to the very object that was signed, and its RFC 8785 form is the signed bytes.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One signed receipt: one settlement of one effect, chained to the environment's previous
/// receipt. Verify it with `steward receipt verify` or any RFC 8785 and Ed25519 implementation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Receipt {
    /// `steward.receipt.v1`.
    #[serde(rename = "type")]
    pub kind: String,
    pub environment_id: String,
    /// 1 for the environment's first receipt, then one more for each.
    pub sequence: u64,
    /// `sha256:<hex>` of the environment's previous receipt (64 zeros for the first).
    pub previous_digest: String,
    /// Milliseconds since the Unix epoch.
    pub issued_at: i64,
    /// The signing key: `rk_` and 16 hex digits of its public key's SHA-256.
    pub key_id: String,
    pub effect_id: String,
    pub invocation_id: String,
    pub action_id: String,
    pub action_name: String,
    pub action_version: u32,
    pub operation_key: Option<String>,
    pub input_digest: String,
    /// The digest of an approver's edited input, when one replaced the input.
    pub edited_input_digest: Option<String>,
    pub settlement: ReceiptSettlement,
    /// The last request sent before the settlement; `null` when none was sent.
    pub request: Option<ReceiptRequest>,
    pub approval: Option<ReceiptApproval>,
    pub policies: Vec<ReceiptPolicy>,
    pub provider: ReceiptProvider,
    /// Ed25519 over the RFC 8785 bytes of the receipt without this member, in hex (128 digits).
    pub signature: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptSettlement {
    pub from: Option<String>,
    /// `succeeded_confirmed`, `succeeded_acknowledged`, `failed`, `denied`, `expired`,
    /// `refused` or `unknown`.
    pub state: String,
    pub outcome: String,
    pub status: String,
    pub at: i64,
    pub audit_seq: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptRequest {
    pub attempt: u32,
    /// `sha256:<hex>` of the RFC 8785 bytes of the request sent, secret values scrubbed.
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptApproval {
    pub id: String,
    pub status: String,
    pub required_approvals: u32,
    pub decisions: Vec<ReceiptDecision>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptDecision {
    pub key_id: String,
    pub key_name: Option<String>,
    /// `approve` or `deny`.
    pub decision: String,
    pub at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptPolicy {
    pub id: String,
    pub name: Option<String>,
    pub version: Option<u64>,
    pub effect: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptProvider {
    pub response_status: Option<u16>,
    pub reference: Option<String>,
    pub response_digest: Option<String>,
}

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
