//! The receipt signing keys: made at first start, sealed in the vault, rotated on demand.
//!
//! A key's private half is 32 random bytes (an Ed25519 seed), stored only sealed by the vault's
//! master key under the label `receipt-key/<id>`; its public half and id are stored in the clear
//! and published. The newest key signs; every key ever made stays published, so receipts
//! signed before a rotation keep verifying.

use crate::vault::{Vault, VaultError};
use ed25519_dalek::SigningKey;
use rand::RngCore;
use steward_core::receipt::key_id_of;
use steward_core::Millis;
use steward_store::{Actor, ReceiptKeyRecord, Receipts, StoreError};

/// Why a receipt key could not be made or opened.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptKeyError {
    #[error("the receipt key store failed")]
    Store(#[from] StoreError),
    #[error("receipt key {id}: {source}")]
    Vault {
        id: String,
        #[source]
        source: VaultError,
    },
    #[error("receipt key {0} does not open to the key its id names (tampered record?)")]
    Mismatch(String),
    #[error("no receipt signing key exists yet: start `steward serve` once to make one")]
    None,
}

fn label(id: &str) -> String {
    format!("receipt-key/{id}")
}

/// A new key, sealed: its record and the key itself.
fn make(vault: &Vault, now: Millis) -> Result<(ReceiptKeyRecord, SigningKey), ReceiptKeyError> {
    let mut seed = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut seed);
    let key = SigningKey::from_bytes(&seed);
    let id = key_id_of(&key.verifying_key());
    let (nonce, sealed) = vault
        .seal_labeled(&label(&id), &hex::encode(seed))
        .map_err(|source| ReceiptKeyError::Vault {
            id: id.clone(),
            source,
        })?;
    let record = ReceiptKeyRecord {
        public_key: hex::encode(key.verifying_key().as_bytes()),
        id,
        nonce,
        sealed,
        created_at: now,
    };
    Ok((record, key))
}

/// Opens a stored key with the vault, checking that it is the key its id names.
pub fn open(vault: &Vault, record: &ReceiptKeyRecord) -> Result<SigningKey, ReceiptKeyError> {
    let seed = vault
        .open_labeled(&label(&record.id), &record.nonce, &record.sealed)
        .map_err(|source| ReceiptKeyError::Vault {
            id: record.id.clone(),
            source,
        })?;
    let seed: [u8; 32] = hex::decode(seed)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| ReceiptKeyError::Mismatch(record.id.clone()))?;
    let key = SigningKey::from_bytes(&seed);
    if key_id_of(&key.verifying_key()) != record.id {
        return Err(ReceiptKeyError::Mismatch(record.id.clone()));
    }
    Ok(key)
}

/// Makes the first key when the store has none (at every start; replicas starting together on
/// a new database make one between them) and answers the key that signs.
pub async fn ensure(
    store: &dyn Receipts,
    vault: &Vault,
    now: Millis,
) -> Result<ReceiptKeyRecord, ReceiptKeyError> {
    if let Some(current) = store.receipt_keys().await?.pop() {
        return Ok(current);
    }
    let (record, _) = make(vault, now)?;
    store
        .add_receipt_key(&record, true, &Actor::system(now))
        .await?;
    store
        .receipt_keys()
        .await?
        .pop()
        .ok_or(ReceiptKeyError::None)
}

/// Makes a new key that signs every receipt from now on (`steward keys rotate-receipt-key`).
/// Older keys stay stored and published.
pub async fn rotate(
    store: &dyn Receipts,
    vault: &Vault,
    now: Millis,
) -> Result<ReceiptKeyRecord, ReceiptKeyError> {
    let (record, _) = make(vault, now)?;
    store
        .add_receipt_key(&record, false, &Actor::system(now))
        .await?;
    Ok(record)
}

/// The key that signs now, opened: the newest.
pub async fn current(
    store: &dyn Receipts,
    vault: &Vault,
) -> Result<(ReceiptKeyRecord, SigningKey), ReceiptKeyError> {
    let record = store
        .receipt_keys()
        .await?
        .pop()
        .ok_or(ReceiptKeyError::None)?;
    let key = open(vault, &record)?;
    Ok((record, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_key_opens_under_its_own_label_only() {
        let vault = Vault::from_key([7; 32]);
        let (record, key) = make(&vault, Millis(1)).unwrap();
        assert_eq!(open(&vault, &record).unwrap().to_bytes(), key.to_bytes());
        assert_eq!(
            record.public_key,
            hex::encode(key.verifying_key().as_bytes())
        );
        assert!(!String::from_utf8_lossy(&record.sealed).contains(&hex::encode(key.to_bytes())));
        let mut moved = record.clone();
        moved.id = "rk_0000000000000000".into();
        assert!(open(&vault, &moved).is_err());
        assert!(open(&Vault::from_key([8; 32]), &record).is_err());
    }
}
