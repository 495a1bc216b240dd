//! Signed receipts (issue #29): one signed, chained statement per settlement of an effect, that
//! anyone holding the public keys can check offline with any RFC 8785 and Ed25519
//! implementation. `docs/RECEIPTS.md` is the specification; this module is its reference
//! implementation, used by the server to sign and by `steward receipt verify` to check.
//!
//! - **What is signed:** the RFC 8785 canonical bytes ([`jcs`]) of the receipt object without
//!   its `signature` member. The signature is Ed25519 (RFC 8032), in lower-case hex.
//! - **The digest** of a receipt is `sha256:` and the hex SHA-256 of the canonical bytes of the
//!   whole receipt, `signature` included.
//! - **The chain:** each environment's receipts are numbered `sequence` 1, 2, 3... and each one's
//!   `previousDigest` is the digest of the one before it ([`GENESIS_DIGEST`] for the first).
//!   Changing a receipt breaks its signature; removing one leaves a gap and a broken link.
//! - **Keys:** `keyId` names the signing key, `rk_` and the first 16 hex digits of the SHA-256
//!   of its 32-byte public key ([`key_id_of`]), so a verifier can check that a key it was given
//!   is the one named. A rotation adds a key; old receipts keep naming theirs.

use crate::jcs::jcs;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The `type` of every receipt this version issues.
pub const RECEIPT_TYPE: &str = "steward.receipt.v1";
/// `previousDigest` of an environment's first receipt.
pub const GENESIS_DIGEST: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";
/// The member that holds the signature, left out of the signed bytes.
pub const SIGNATURE_MEMBER: &str = "signature";
/// The prefix of a receipt key's id.
pub const KEY_ID_PREFIX: &str = "rk_";

// The one definition of a receipt's members: the server builds one with no `signature` and
// `sign` signs it; the API reads the stored, signed receipt back into it to serve it, and with
// the `schema` feature (`steward-wire` turns it on) it is the OpenAPI document's `Receipt`, so
// the doc comments below are the document's descriptions.

/// One signed receipt: one settlement of one effect, chained to the environment's previous
/// receipt. Verify it with `steward receipt verify` or any RFC 8785 and Ed25519 implementation.
/// Every member is always present (`null` when it does not apply), so the set of names is fixed
/// for a `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
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
    /// When the receipt was signed, in milliseconds since the Unix epoch.
    pub issued_at: i64,
    /// The signing key: `rk_` and 16 hex digits of its public key's SHA-256.
    pub key_id: String,
    pub effect_id: String,
    pub invocation_id: String,
    pub action_id: String,
    pub action_name: String,
    pub action_version: u32,
    pub operation_key: Option<String>,
    /// The fingerprint of the input the invocation was accepted with.
    pub input_digest: String,
    /// The fingerprint of the input an approver's edit replaced it with, when one did.
    pub edited_input_digest: Option<String>,
    pub settlement: ReceiptSettlement,
    /// The last request sent before this settlement; `null` when none was ever sent.
    pub request: Option<ReceiptRequest>,
    pub approval: Option<ReceiptApproval>,
    /// The policy versions that decided the invocation (empty when none did).
    pub policies: Vec<ReceiptPolicy>,
    pub provider: ReceiptProvider,
    /// Ed25519 over the RFC 8785 bytes of the receipt without this member, in hex (128 digits).
    // Every receipt served has one; it is left out (not `null`) only before `sign`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(value_type = String, required = true))]
    pub signature: Option<String>,
}

/// The settlement a receipt is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptSettlement {
    /// The effect state it left (`dispatching`, `unknown`, `awaiting_approval`, `ready`), or
    /// `null` for an invocation a policy denied as it was recorded.
    pub from: Option<String>,
    /// The effect state it reached: `succeeded_confirmed`, `succeeded_acknowledged`, `failed`,
    /// `denied`, `expired`, `refused` or `unknown`.
    pub state: String,
    /// The wire's effect `outcome` of that state.
    pub outcome: String,
    /// The wire's invocation `status` of that state.
    pub status: String,
    /// When it was committed, in milliseconds since the Unix epoch.
    pub at: i64,
    /// The sequence number of its event in the installation's sealed audit log.
    pub audit_seq: i64,
}

/// The request Steward sent, by digest (the scheme is in `docs/RECEIPTS.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptRequest {
    pub attempt: u32,
    /// `sha256:<hex>` of the RFC 8785 bytes of the request sent, secret values scrubbed.
    pub digest: String,
}

/// The approval the invocation waited on, with every decision cast on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptApproval {
    pub id: String,
    pub status: String,
    pub required_approvals: u32,
    pub decisions: Vec<ReceiptDecision>,
}

/// One approver's decision, as authenticated: the key that cast it and that key's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptDecision {
    pub key_id: String,
    pub key_name: Option<String>,
    /// `approve` or `deny`.
    pub decision: String,
    pub at: i64,
}

/// A policy version that decided the invocation, and what it decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptPolicy {
    pub id: String,
    pub name: Option<String>,
    pub version: Option<u64>,
    pub effect: Option<String>,
}

/// What the provider answered, as Steward recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptProvider {
    pub response_status: Option<u16>,
    /// The provider's own id of what it did (a refund id), when known.
    pub reference: Option<String>,
    /// The digest of the response body as stored (secret values scrubbed).
    pub response_digest: Option<String>,
}

/// A receipt signing key's id: `rk_` and the first 16 hex digits of the SHA-256 of its public key.
pub fn key_id_of(public_key: &VerifyingKey) -> String {
    let hash = Sha256::digest(public_key.as_bytes());
    format!("{KEY_ID_PREFIX}{}", &hex::encode(hash)[..16])
}

/// `sha256:` and the hex SHA-256 of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The digest of a JSON value: over its RFC 8785 bytes.
pub fn json_digest(value: &Value) -> String {
    sha256_digest(jcs(value).as_bytes())
}

/// A signed receipt: the JSON object with its `signature`, and its digest.
#[derive(Debug, Clone, PartialEq)]
pub struct Signed {
    pub receipt: Value,
    pub digest: String,
}

/// Signs `receipt`, which has no `signature` yet, with `key`, whose id it must already name.
pub fn sign(receipt: &Receipt, key: &SigningKey) -> Signed {
    assert!(
        receipt.signature.is_none(),
        "receipt {} of effect {} is already signed",
        receipt.sequence,
        receipt.effect_id
    );
    assert_eq!(
        receipt.key_id,
        key_id_of(&key.verifying_key()),
        "receipt {} of effect {} names another key than the one signing it",
        receipt.sequence,
        receipt.effect_id
    );
    let mut value = serde_json::to_value(receipt).expect("a receipt is plain JSON");
    let signature = key.sign(jcs(&value).as_bytes());
    value[SIGNATURE_MEMBER] = Value::String(hex::encode(signature.to_bytes()));
    let digest = json_digest(&value);
    Signed {
        receipt: value,
        digest,
    }
}

/// Why a receipt or a chain does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    #[error("receipt {index}: {what}")]
    Malformed { index: usize, what: String },
    #[error("receipt {index}: signed by key {key_id}, which is not among the public keys given")]
    UnknownKey { index: usize, key_id: String },
    #[error("receipt {index}: the signature does not match its content (changed after signing?)")]
    BadSignature { index: usize },
    #[error("receipt {index}: environment {found}, but the chain is environment {expected}")]
    OtherEnvironment {
        index: usize,
        expected: String,
        found: String,
    },
    #[error("receipt {index}: sequence {found} follows {previous} (a receipt is missing or out of order)")]
    Gap {
        index: usize,
        previous: u64,
        found: u64,
    },
    #[error("receipt {index}: previousDigest does not match the receipt before it")]
    BrokenLink { index: usize },
    #[error("receipt {index}: sequence 1 must follow the genesis digest")]
    BadGenesis { index: usize },
}

/// The public keys a verifier trusts, by key id.
#[derive(Debug, Clone, Default)]
pub struct PublicKeys(BTreeMap<String, VerifyingKey>);

impl PublicKeys {
    /// Adds a 32-byte Ed25519 public key given in hex; answers its key id.
    pub fn add_hex(&mut self, hex_key: &str) -> Result<String, String> {
        let bytes: [u8; 32] = hex::decode(hex_key.trim())
            .map_err(|e| format!("not hex: {e}"))?
            .try_into()
            .map_err(|_| "an Ed25519 public key is 32 bytes".to_string())?;
        let key = VerifyingKey::from_bytes(&bytes).map_err(|e| e.to_string())?;
        let id = key_id_of(&key);
        self.0.insert(id.clone(), key);
        Ok(id)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One receipt that verified: where it sits and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub environment_id: String,
    pub sequence: u64,
    pub previous_digest: String,
    pub digest: String,
    pub key_id: String,
}

/// Checks one receipt's signature (the `index`th of its file, for messages).
pub fn verify_receipt(
    index: usize,
    receipt: &Value,
    keys: &PublicKeys,
) -> Result<Verified, ReceiptError> {
    let malformed = |what: &str| ReceiptError::Malformed {
        index,
        what: what.to_string(),
    };
    let object = receipt
        .as_object()
        .ok_or_else(|| malformed("not an object"))?;
    let text = |name: &str| {
        object
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(&format!("`{name}` is missing or not a string")))
    };
    let key_id = text("keyId")?.to_string();
    let signature_hex = text(SIGNATURE_MEMBER)?;
    let environment_id = text("environmentId")?.to_string();
    let previous_digest = text("previousDigest")?.to_string();
    let sequence = object
        .get("sequence")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed("`sequence` is missing or not a positive integer"))?;
    let key = keys.0.get(&key_id).ok_or(ReceiptError::UnknownKey {
        index,
        key_id: key_id.clone(),
    })?;
    let signature: [u8; 64] = hex::decode(signature_hex)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| malformed("`signature` is not 64 bytes of hex"))?;
    let mut unsigned = object.clone();
    unsigned.remove(SIGNATURE_MEMBER);
    key.verify(
        jcs(&Value::Object(unsigned)).as_bytes(),
        &Signature::from_bytes(&signature),
    )
    .map_err(|_| ReceiptError::BadSignature { index })?;
    Ok(Verified {
        environment_id,
        sequence,
        previous_digest,
        digest: json_digest(receipt),
        key_id,
    })
}

/// What a chain that verified holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainReport {
    pub environment_id: String,
    pub first_sequence: u64,
    pub last_sequence: u64,
    /// The last receipt's digest: the head a later excerpt must follow.
    pub head_digest: String,
    /// True when the chain starts at sequence 1 (from the genesis digest), so nothing before it
    /// can be missing.
    pub from_genesis: bool,
    pub receipts: usize,
}

/// Checks every signature of a run of one environment's receipts, in sequence order, and the
/// links between them: consecutive sequence numbers, each `previousDigest` the digest of the
/// receipt before, and sequence 1 after [`GENESIS_DIGEST`]. A run may start past 1 (a page of
/// an export); its first link is then not checked here, and the report says so.
pub fn verify_chain(receipts: &[Value], keys: &PublicKeys) -> Result<ChainReport, ReceiptError> {
    let mut previous: Option<Verified> = None;
    let mut first: Option<Verified> = None;
    for (index, receipt) in receipts.iter().enumerate() {
        let this = verify_receipt(index, receipt, keys)?;
        match &previous {
            None if this.sequence == 1 && this.previous_digest != GENESIS_DIGEST => {
                return Err(ReceiptError::BadGenesis { index })
            }
            None => {}
            Some(p) if p.environment_id != this.environment_id => {
                return Err(ReceiptError::OtherEnvironment {
                    index,
                    expected: p.environment_id.clone(),
                    found: this.environment_id,
                })
            }
            Some(p) if this.sequence != p.sequence + 1 => {
                return Err(ReceiptError::Gap {
                    index,
                    previous: p.sequence,
                    found: this.sequence,
                })
            }
            Some(p) if this.previous_digest != p.digest => {
                return Err(ReceiptError::BrokenLink { index })
            }
            Some(_) => {}
        }
        first.get_or_insert_with(|| this.clone());
        previous = Some(this);
    }
    let (Some(first), Some(last)) = (first, previous) else {
        return Err(ReceiptError::Malformed {
            index: 0,
            what: "no receipt to verify".into(),
        });
    };
    Ok(ChainReport {
        environment_id: first.environment_id,
        first_sequence: first.sequence,
        last_sequence: last.sequence,
        head_digest: last.digest,
        from_genesis: first.sequence == 1,
        receipts: receipts.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn receipt(sequence: u64, previous: &str, key: &SigningKey) -> Receipt {
        Receipt {
            kind: RECEIPT_TYPE.into(),
            environment_id: "env_a".into(),
            sequence,
            previous_digest: previous.into(),
            issued_at: 1_700_000_000_000,
            key_id: key_id_of(&key.verifying_key()),
            effect_id: format!("eff_{sequence}"),
            invocation_id: format!("inv_{sequence}"),
            action_id: "act_1".into(),
            action_name: "refund-order".into(),
            action_version: 2,
            operation_key: Some("order-1".into()),
            input_digest: json_digest(&serde_json::json!({"amount": 5})),
            edited_input_digest: None,
            settlement: ReceiptSettlement {
                from: Some("dispatching".into()),
                state: "succeeded_confirmed".into(),
                outcome: "succeeded".into(),
                status: "succeeded".into(),
                at: 1_699_999_999_000,
                audit_seq: 7,
            },
            request: Some(ReceiptRequest {
                attempt: 1,
                digest: sha256_digest(b"request"),
            }),
            approval: None,
            policies: vec![],
            provider: ReceiptProvider {
                response_status: Some(200),
                reference: Some("re_1".into()),
                response_digest: None,
            },
            signature: None,
        }
    }

    fn chain(len: u64, key: &SigningKey) -> Vec<Value> {
        let mut previous = GENESIS_DIGEST.to_string();
        (1..=len)
            .map(|n| {
                let signed = sign(&receipt(n, &previous, key), key);
                previous = signed.digest;
                signed.receipt
            })
            .collect()
    }

    fn keys(of: &[&SigningKey]) -> PublicKeys {
        let mut keys = PublicKeys::default();
        for k in of {
            keys.add_hex(&hex::encode(k.verifying_key().as_bytes()))
                .unwrap();
        }
        keys
    }

    #[test]
    fn a_signed_chain_verifies_from_genesis() {
        let k = key(1);
        let report = verify_chain(&chain(3, &k), &keys(&[&k])).unwrap();
        assert_eq!((report.first_sequence, report.last_sequence), (1, 3));
        assert!(report.from_genesis);
    }

    #[test]
    fn a_one_byte_change_breaks_the_signature() {
        let k = key(1);
        let mut receipts = chain(3, &k);
        receipts[1]["actionVersion"] = serde_json::json!(3);
        assert_eq!(
            verify_chain(&receipts, &keys(&[&k])),
            Err(ReceiptError::BadSignature { index: 1 })
        );
    }

    #[test]
    fn a_removed_receipt_breaks_the_chain() {
        let k = key(1);
        let mut receipts = chain(3, &k);
        receipts.remove(1);
        assert_eq!(
            verify_chain(&receipts, &keys(&[&k])),
            Err(ReceiptError::Gap {
                index: 1,
                previous: 1,
                found: 3
            })
        );
    }

    #[test]
    fn a_receipt_signed_by_an_unknown_key_is_refused_and_rotation_keeps_old_ones() {
        let (old, new) = (key(1), key(2));
        let mut receipts = chain(1, &old);
        let head = json_digest(&receipts[0]);
        receipts.push(sign(&receipt(2, &head, &new), &new).receipt);
        assert!(matches!(
            verify_chain(&receipts, &keys(&[&new])),
            Err(ReceiptError::UnknownKey { index: 0, .. })
        ));
        assert!(verify_chain(&receipts, &keys(&[&old, &new])).is_ok());
    }

    #[test]
    fn a_signed_receipt_reads_back_as_the_object_that_was_signed() {
        let k = key(1);
        let unsigned = receipt(1, GENESIS_DIGEST, &k);
        let bytes = serde_json::to_value(&unsigned).unwrap();
        assert!(bytes.get(SIGNATURE_MEMBER).is_none(), "{bytes}");
        let signed = sign(&unsigned, &k).receipt;
        let read: Receipt = serde_json::from_value(signed.clone()).unwrap();
        assert!(read.signature.is_some());
        assert_eq!(serde_json::to_value(&read).unwrap(), signed);
        let mut extra = signed;
        extra["note"] = serde_json::json!("added");
        assert!(serde_json::from_value::<Receipt>(extra).is_err());
    }

    #[test]
    fn the_first_receipt_must_follow_genesis() {
        let k = key(1);
        let forged = sign(&receipt(1, &sha256_digest(b"x"), &k), &k).receipt;
        assert_eq!(
            verify_chain(&[forged], &keys(&[&k])),
            Err(ReceiptError::BadGenesis { index: 0 })
        );
    }
}
