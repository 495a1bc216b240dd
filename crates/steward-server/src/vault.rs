//! The write-only vault: secret values sealed with ChaCha20-Poly1305 under a master key.
//!
//! The master key comes from `STEWARD_MASTER_KEY` (64 hex characters) or from `master.key` in the
//! data directory, created on first start with mode 0600. Each value is bound to its environment
//! and name as associated data, so a ciphertext moved to another row does not open.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::RngCore;
use std::path::Path;
use steward_core::EnvironmentId;

const MASTER_KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 12;
pub const MASTER_KEY_FILE: &str = "master.key";
pub const MASTER_KEY_ENV: &str = "STEWARD_MASTER_KEY";

#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("master key: {0}")]
    MasterKey(String),
    #[error("a secret could not be sealed")]
    Seal,
    #[error("a secret could not be opened (wrong master key or tampered record)")]
    Open,
}

#[derive(Clone)]
pub struct Vault {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vault(..)")
    }
}

fn parse_key(hex_text: &str) -> Result<[u8; MASTER_KEY_BYTES], VaultError> {
    let bytes = hex::decode(hex_text.trim())
        .map_err(|_| VaultError::MasterKey("must be 64 hexadecimal characters".into()))?;
    bytes
        .try_into()
        .map_err(|_| VaultError::MasterKey("must be 64 hexadecimal characters".into()))
}

impl Vault {
    pub fn from_key(key: [u8; MASTER_KEY_BYTES]) -> Self {
        Self {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }

    /// Loads the master key from the environment or the data directory, creating it if absent.
    pub fn open_or_create(data_dir: &Path) -> Result<Self, VaultError> {
        if let Ok(text) = std::env::var(MASTER_KEY_ENV) {
            return Ok(Self::from_key(parse_key(&text)?));
        }
        let path = data_dir.join(MASTER_KEY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Self::from_key(parse_key(&text)?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; MASTER_KEY_BYTES];
                rand::rngs::OsRng.fill_bytes(&mut key);
                write_private(&path, &hex::encode(key)).map_err(|e| {
                    VaultError::MasterKey(format!("cannot create {}: {e}", path.display()))
                })?;
                Ok(Self::from_key(key))
            }
            Err(e) => Err(VaultError::MasterKey(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }

    fn aad(env: &EnvironmentId, name: &str) -> Vec<u8> {
        format!("{env}/{name}").into_bytes()
    }

    pub fn seal(
        &self,
        env: &EnvironmentId,
        name: &str,
        value: &str,
    ) -> Result<(Vec<u8>, Vec<u8>), VaultError> {
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let aad = Self::aad(env, name);
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: value.as_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| VaultError::Seal)?;
        Ok((nonce.to_vec(), sealed))
    }

    pub fn open(
        &self,
        env: &EnvironmentId,
        name: &str,
        nonce: &[u8],
        sealed: &[u8],
    ) -> Result<String, VaultError> {
        if nonce.len() != NONCE_BYTES {
            return Err(VaultError::Open);
        }
        let aad = Self::aad(env, name);
        let plain = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .map_err(|_| VaultError::Open)?;
        String::from_utf8(plain).map_err(|_| VaultError::Open)
    }
}

impl Vault {
    /// A keyed tag of a value, for comparing requests without storing anything guessable about
    /// a secret value.
    pub fn tag(&self, value: &str) -> String {
        let nonce = [0u8; NONCE_BYTES];
        match self.cipher.encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: b"tag",
                aad: value.as_bytes(),
            },
        ) {
            Ok(bytes) => hex::encode(bytes),
            Err(_) => String::new(),
        }
    }
}

#[cfg(unix)]
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    std::fs::write(path, contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_and_opens_bound_to_the_name() {
        let vault = Vault::from_key([7; 32]);
        let env = EnvironmentId::from_unique("a");
        let (nonce, sealed) = vault.seal(&env, "KEY", "sk_test_abc").unwrap();
        assert!(!sealed.windows(11).any(|w| w == b"sk_test_abc"));
        assert_eq!(
            vault.open(&env, "KEY", &nonce, &sealed).unwrap(),
            "sk_test_abc"
        );
        assert!(vault.open(&env, "OTHER", &nonce, &sealed).is_err());
    }

    #[test]
    fn the_master_key_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let first = Vault::open_or_create(dir.path()).unwrap();
        let env = EnvironmentId::from_unique("a");
        let (nonce, sealed) = first.seal(&env, "K", "v").unwrap();
        let again = Vault::open_or_create(dir.path()).unwrap();
        assert_eq!(again.open(&env, "K", &nonce, &sealed).unwrap(), "v");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(MASTER_KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
