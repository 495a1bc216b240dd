//! Bearer keys: generated once, shown once, stored only as a hash.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// Every Steward key starts with this, so leaked keys are easy to spot and scan for.
pub const KEY_PREFIX: &str = "stw_";
/// Random bytes in a key: 256 bits, so a plain SHA-256 is a safe hash (nothing to brute-force).
const KEY_RANDOM_BYTES: usize = 32;

pub fn generate_token() -> String {
    let mut bytes = [0u8; KEY_RANDOM_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("{KEY_PREFIX}{}", hex::encode(bytes))
}

pub fn hash_token(token: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unique_and_hashes_hide_them() {
        let a = generate_token();
        let b = generate_token();
        assert_ne!(a, b);
        assert!(a.starts_with(KEY_PREFIX));
        let hash = hash_token(&a);
        assert!(!hash.contains(&a[KEY_PREFIX.len()..]));
        assert_eq!(hash, hash_token(&a));
    }
}
