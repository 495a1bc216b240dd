//! The write-only vault: secret values sealed with ChaCha20-Poly1305 under a master key.
//!
//! The master key comes from `STEWARD_MASTER_KEY` (64 hex characters) or from `master.key` in the
//! data directory, created on first start with mode 0600. Each value is bound to its environment
//! and name as associated data, so a ciphertext moved to another row does not open.
//!
//! Two more keys are derived from the master key with HMAC-SHA256 (one per purpose, under a
//! fixed label, so that neither reveals the master key nor the other): one for [`Vault::tag`],
//! one for the check value a database records of the master key its secrets are sealed with
//! ([`verify_master_key`]), so that a server started with another master key refuses to start.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::path::Path;
use steward_core::{EnvironmentId, Millis};
use steward_store::{Actor, Catalog, StoreError};

const MASTER_KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 12;
/// SHA-256's block size, in bytes, which HMAC pads its key to (RFC 2104).
const SHA256_BLOCK_BYTES: usize = 64;
/// The labels the derived keys are made under; changing one changes every value made with it.
const TAG_KEY_LABEL: &[u8] = b"steward tag v2";
const CHECK_KEY_LABEL: &[u8] = b"steward master key check v1";
/// What the check value is the MAC of.
const CHECK_MESSAGE: &[u8] = b"steward: the master key this database's secrets are sealed with";
/// The prefix of tags made by the current [`Vault::tag`]; tags without it were made by
/// [`Vault::tag_v1`].
pub const TAG_V2_PREFIX: &str = "v2:";
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
    #[error(
        "the master key ({MASTER_KEY_ENV} or {MASTER_KEY_FILE} in the data directory) is not the \
         one this database's secrets were sealed with; start with the original master key"
    )]
    WrongMasterKey,
    #[error("cannot check the master key against the database")]
    Store(#[source] StoreError),
}

#[derive(Clone)]
pub struct Vault {
    cipher: ChaCha20Poly1305,
    tag_key: [u8; 32],
    check_key: [u8; 32],
}

/// HMAC-SHA256 (RFC 2104).
pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; SHA256_BLOCK_BYTES];
    if key.len() > SHA256_BLOCK_BYTES {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// Compares two byte strings in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
            tag_key: hmac_sha256(&key, TAG_KEY_LABEL),
            check_key: hmac_sha256(&key, CHECK_KEY_LABEL),
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
        self.seal_bound(&Self::aad(env, name), value)
    }

    /// Seals a value that belongs to no environment (a receipt signing key), bound to `label`
    /// (`receipt-key/rk_...`) as its associated data. Labels contain a `-`, which no
    /// environment id does, so such a ciphertext never opens as an environment's secret.
    pub fn seal_labeled(&self, label: &str, value: &str) -> Result<(Vec<u8>, Vec<u8>), VaultError> {
        self.seal_bound(label.as_bytes(), value)
    }

    /// Opens what [`Vault::seal_labeled`] sealed under `label`.
    pub fn open_labeled(
        &self,
        label: &str,
        nonce: &[u8],
        sealed: &[u8],
    ) -> Result<String, VaultError> {
        self.open_bound(label.as_bytes(), nonce, sealed)
    }

    fn seal_bound(&self, aad: &[u8], value: &str) -> Result<(Vec<u8>, Vec<u8>), VaultError> {
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: value.as_bytes(),
                    aad,
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
        self.open_bound(&Self::aad(env, name), nonce, sealed)
    }

    fn open_bound(&self, aad: &[u8], nonce: &[u8], sealed: &[u8]) -> Result<String, VaultError> {
        if nonce.len() != NONCE_BYTES {
            return Err(VaultError::Open);
        }
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad })
            .map_err(|_| VaultError::Open)?;
        String::from_utf8(plain).map_err(|_| VaultError::Open)
    }
}

impl Vault {
    /// A keyed tag of a value, for comparing requests without storing anything guessable about
    /// a secret value: `v2:` and the hex HMAC-SHA256 of the value under the derived tag key.
    pub fn tag(&self, value: &str) -> String {
        format!(
            "{TAG_V2_PREFIX}{}",
            hex::encode(hmac_sha256(&self.tag_key, value.as_bytes()))
        )
    }

    /// Every tag `value` may have been recorded under, the current one first: what recognises a
    /// request recorded by an earlier Steward (`tag_v1`).
    pub fn tags(&self, value: &str) -> [String; 2] {
        [self.tag(value), self.tag_v1(value)]
    }

    /// True when `stored` is a tag of `value`, made by either version.
    pub fn tag_matches(&self, stored: &str, value: &str) -> bool {
        let expected = if stored.starts_with(TAG_V2_PREFIX) {
            self.tag(value)
        } else {
            self.tag_v1(value)
        };
        same(stored.as_bytes(), expected.as_bytes())
    }

    /// The check value a database records of its master key: never the key, and no use for
    /// anything else (its key is derived for this purpose alone).
    pub fn check_value(&self) -> String {
        format!(
            "v1:{}",
            hex::encode(hmac_sha256(&self.check_key, CHECK_MESSAGE))
        )
    }

    /// The tag of earlier Steward versions: the Poly1305 tag of an encryption under a fixed
    /// nonce, with the value as associated data. Kept only to recognise requests recorded with
    /// it; never made for new ones.
    fn tag_v1(&self, value: &str) -> String {
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

/// Refuses a master key that is not the one the store's secrets were sealed with. The store
/// records a check value of the master key ([`Vault::check_value`]) on the first start; a
/// database from before check values (that has secrets but none) is proved by opening one of
/// its secrets, and then gets the check value.
pub async fn verify_master_key(
    store: &dyn Catalog,
    vault: &Vault,
    now: Millis,
) -> Result<(), VaultError> {
    let mine = vault.check_value();
    let recorded = match store.master_key_check().await.map_err(VaultError::Store)? {
        Some(recorded) => recorded,
        None => {
            if let Some(secret) = store.any_secret().await.map_err(VaultError::Store)? {
                vault
                    .open(
                        &secret.env_id,
                        &secret.name,
                        &secret.nonce,
                        &secret.ciphertext,
                    )
                    .map_err(|_| VaultError::WrongMasterKey)?;
            }
            store
                .init_master_key_check(&mine, &Actor::system(now))
                .await
                .map_err(VaultError::Store)?
        }
    };
    if same(recorded.as_bytes(), mine.as_bytes()) {
        Ok(())
    } else {
        Err(VaultError::WrongMasterKey)
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
    use steward_store::Identity;

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
    fn hmac_sha256_matches_rfc_4231() {
        // RFC 4231, test case 2.
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        assert_eq!(
            hex::encode(hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn the_tag_is_a_versioned_hmac_and_a_v1_tag_is_still_recognised() {
        let vault = Vault::from_key([7; 32]);
        // What `Vault::tag` returned before tags were versioned, for this key and value.
        let written_by_the_old_function = "43e54e87d64003a48cfc5731f1046fe8edabb0";
        assert_eq!(vault.tag_v1("sk_test_abc"), written_by_the_old_function);
        assert!(vault.tag_matches(written_by_the_old_function, "sk_test_abc"));
        assert!(!vault.tag_matches(written_by_the_old_function, "sk_test_abd"));
        let tag = vault.tag("sk_test_abc");
        assert!(tag.starts_with(TAG_V2_PREFIX), "{tag}");
        assert_eq!(tag.len(), TAG_V2_PREFIX.len() + 64);
        assert!(vault.tag_matches(&tag, "sk_test_abc"));
        assert!(!vault.tag_matches(&tag, "sk_test_abd"));
        assert_ne!(tag, Vault::from_key([8; 32]).tag("sk_test_abc"));
        assert_eq!(
            vault.tags("sk_test_abc"),
            [tag, written_by_the_old_function.to_string()]
        );
    }

    #[test]
    fn the_check_value_depends_on_the_master_key_and_is_not_it() {
        let vault = Vault::from_key([7; 32]);
        assert_eq!(vault.check_value(), Vault::from_key([7; 32]).check_value());
        assert_ne!(vault.check_value(), Vault::from_key([8; 32]).check_value());
        assert!(!vault.check_value().contains(&hex::encode([7u8; 32])));
    }

    async fn store_with_a_secret(dir: &Path, sealed_by: &Vault) -> steward_store::SqliteStore {
        let store = steward_store::SqliteStore::open(&dir.join("steward.db")).unwrap();
        let actor = Actor::system(Millis(1_000));
        let env = store
            .ensure_environment(
                steward_store::NewEnvironment {
                    name: "test",
                    id: &EnvironmentId::from_unique("t"),
                },
                &actor,
            )
            .await
            .unwrap();
        let (nonce, ciphertext) = sealed_by.seal(&env.id, "KEY", "sk_test_abc").unwrap();
        let secret = steward_store::SecretRecord {
            env_id: env.id,
            name: "KEY".into(),
            nonce,
            ciphertext,
            description: None,
            allowed_hosts: None,
            allowed_placements: None,
            version: 0,
            created_at: Millis(1_000),
            updated_at: Millis(1_000),
        };
        store.put_secret(&secret, None, &actor).await.unwrap();
        store
    }

    #[tokio::test]
    async fn a_database_without_a_check_value_is_proved_by_one_of_its_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let (right, wrong) = (Vault::from_key([7; 32]), Vault::from_key([8; 32]));
        // As an earlier Steward left it: secrets, no check value.
        let store = store_with_a_secret(dir.path(), &right).await;
        assert!(matches!(
            verify_master_key(&store, &wrong, Millis(2_000)).await,
            Err(VaultError::WrongMasterKey)
        ));
        assert_eq!(
            store.master_key_check().await.unwrap(),
            None,
            "a refused key records nothing"
        );
        verify_master_key(&store, &right, Millis(2_000))
            .await
            .unwrap();
        assert_eq!(
            store.master_key_check().await.unwrap(),
            Some(right.check_value())
        );
        // From now on the check value decides.
        verify_master_key(&store, &right, Millis(3_000))
            .await
            .unwrap();
        assert!(matches!(
            verify_master_key(&store, &wrong, Millis(3_000)).await,
            Err(VaultError::WrongMasterKey)
        ));
        let message = VaultError::WrongMasterKey.to_string();
        assert!(!message.contains(&hex::encode([8u8; 32])), "{message}");
    }

    #[tokio::test]
    async fn a_new_database_records_the_first_master_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = steward_store::SqliteStore::open(&dir.path().join("steward.db")).unwrap();
        let first = Vault::from_key([1; 32]);
        verify_master_key(&store, &first, Millis(1_000))
            .await
            .unwrap();
        assert!(matches!(
            verify_master_key(&store, &Vault::from_key([2; 32]), Millis(2_000)).await,
            Err(VaultError::WrongMasterKey)
        ));
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
