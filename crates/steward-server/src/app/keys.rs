//! What the keys look like from outside: the calling key (`GET /auth/identity`,
//! `api/identity.rs`) and the environment's keys (the console's keys page,
//! `console/catalog.rs`). Neither ever carries a key's hash.

use super::{Principal, Result};
use crate::state::AppState;
use steward_core::{scopes, KeyId, Millis};
use steward_store::Environment;

/// The calling key: who it is, where it is bound, and what it may do.
#[derive(Debug, Clone)]
pub struct Identity {
    pub key_id: KeyId,
    pub name: String,
    pub environment: Environment,
    pub scopes: Vec<String>,
}

/// One key of an environment, as an operator reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub id: KeyId,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: Millis,
    pub expires_at: Option<Millis>,
    pub revoked_at: Option<Millis>,
    pub last_used_at: Option<Millis>,
    /// Whether the key authenticates a request now: not revoked, not expired.
    pub usable: bool,
}

/// The principal's own key. Any key may read itself: it needs no scope.
pub fn identity(principal: &Principal) -> Identity {
    Identity {
        key_id: principal.key.id.clone(),
        name: principal.key.name.clone(),
        environment: principal.env.clone(),
        scopes: principal.key.scopes.clone(),
    }
}

/// The keys of the principal's environment, in the store's order. Needs `audit:read`: the
/// audit log already names every key with its scopes. Revoking stays with `steward keys
/// revoke`: no scope hands key administration to an API key.
pub async fn list(state: &AppState, principal: &Principal) -> Result<Vec<Key>> {
    principal.require(scopes::AUDIT_READ)?;
    let now = state.clock.now();
    let keys = state.store.list_keys().await?;
    Ok(keys
        .into_iter()
        .filter(|k| k.env_id == principal.env.id)
        .map(|k| Key {
            usable: k.usable_at(now),
            id: k.id,
            name: k.name,
            scopes: k.scopes,
            created_at: k.created_at,
            expires_at: k.expires_at,
            revoked_at: k.revoked_at,
            last_used_at: k.last_used_at,
        })
        .collect())
}
