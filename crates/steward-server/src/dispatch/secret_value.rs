//! Reading a secret and opening its value for a request: one function for the dispatcher
//! (`prepared.rs`, which then swaps an OAuth account's token set for its access token) and for
//! `oauth/account.rs` (which reads the token set back to refresh or revoke it). Its own file, so
//! that `oauth/` can call it without importing `prepared.rs`, which calls `oauth/`.

use super::blocked::Blocked;
use crate::state::AppState;
use steward_core::EnvironmentId;
use steward_store::SecretRecord;

/// Secret `name` of `env` and its opened value: from `known` when the caller already read the
/// secrets it may need (`Store::invoke_context`), from the store otherwise. `Err` says why
/// nothing may be sent (missing, unreadable, or the store did not answer); it never quotes the
/// value.
pub async fn read_and_open(
    state: &AppState,
    env: &EnvironmentId,
    name: &str,
    known: Option<&[SecretRecord]>,
) -> Result<(SecretRecord, String), Blocked> {
    let found = match known {
        Some(records) => Ok(records.iter().find(|r| r.name == name).cloned()),
        None => state.store.secret(env, name).await,
    };
    let record = match found {
        Ok(Some(record)) => record,
        Ok(None) => {
            return Err(Blocked::new(
                "secret_missing",
                format!("secret {name} does not exist"),
            ))
        }
        Err(e) => {
            tracing::error!(error = %e, "secret lookup failed before dispatch");
            return Err(Blocked::new(
                "storage_unavailable",
                "the secret could not be read; nothing was sent",
            ));
        }
    };
    let value = state
        .vault
        .open(env, name, &record.nonce, &record.ciphertext)
        .map_err(|_| {
            Blocked::new(
                "secret_unreadable",
                format!("secret {name} could not be opened"),
            )
        })?;
    Ok((record, value))
}
