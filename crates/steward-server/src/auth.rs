//! Bearer-key authentication and scope checks. A key is bound to one environment; every handler
//! reads and writes only that environment's records.
//!
//! Every request reads its key from the store (`Store::caller`, or `Store::invoke_context` on
//! the invoke path): there is no cache, so a revocation or an expiry committed by any process
//! refuses the next request on every replica. A key's last use is recorded separately
//! ([`note_used`]): at most once per key per [`KEY_LAST_USED_INTERVAL_S`], in a task of its own.

use crate::error::ApiError;
use crate::keys::hash_token;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use std::collections::HashMap;
use std::sync::Mutex;
use steward_core::{KeyId, Millis};
use steward_store::{ApiKeyRecord, Environment};

/// How often a key's last-used time is written, in seconds: fine enough for `keys list` to
/// tell a key in use from an abandoned one, coarse enough that a busy key costs one commit a
/// minute rather than one per request.
pub const KEY_LAST_USED_INTERVAL_S: i64 = 60;

/// How many keys [`KeyUsage`] remembers before it forgets those noted more than an interval
/// ago: far more keys than one deployment has, so the map is pruned rarely and stays small.
const KEY_USAGE_ENTRIES_MAX: usize = 10_000;

/// When this process last wrote each key's last use, so that concurrent requests with one key
/// write it once per interval, not once each while the first write is under way.
#[derive(Debug, Default)]
pub struct KeyUsage {
    noted: Mutex<HashMap<KeyId, Millis>>,
}

impl KeyUsage {
    /// True when a request with `key` at `now` should record the key's use: neither the stored
    /// last use nor this process's last write of it is within the interval. Marks it written.
    pub fn due(&self, key: &ApiKeyRecord, now: Millis) -> bool {
        let interval_ms = KEY_LAST_USED_INTERVAL_S * 1_000;
        let recent = |at: Millis| now.0 - at.0 < interval_ms;
        if key.last_used_at.is_some_and(recent) {
            return false;
        }
        let mut noted = self.noted.lock().unwrap_or_else(|e| e.into_inner());
        if noted.get(&key.id).copied().is_some_and(recent) {
            return false;
        }
        if noted.len() >= KEY_USAGE_ENTRIES_MAX {
            noted.retain(|_, at| recent(*at));
        }
        noted.insert(key.id.clone(), now);
        true
    }
}

/// Records that `key` authenticated a request, when it is due ([`KeyUsage::due`]): in a task
/// of its own, so the request never waits for it, and a failure only loses one timestamp.
pub fn note_used(state: &AppState, key: &ApiKeyRecord) {
    let now = state.clock.now();
    if !state.key_usage.due(key, now) {
        return;
    }
    let (store, id) = (state.store.clone(), key.id.clone());
    tokio::spawn(async move {
        if let Err(e) = store.mark_key_used(&id, now).await {
            tracing::warn!(error = %e, key = %id, "could not record a key's last use");
        }
    });
}

/// The hash of the request's bearer token, as keys are stored; 401 without one.
pub fn token_hash(headers: &HeaderMap) -> Result<String, ApiError> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(hash_token)
        .ok_or_else(ApiError::unauthenticated)
}

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key: ApiKeyRecord,
    pub env: Environment,
}

impl Caller {
    pub fn has(&self, scope: &str) -> bool {
        self.key.scopes.iter().any(|s| s == scope)
    }

    /// 403 unless the key holds `scope`.
    pub fn require(&self, scope: &str) -> Result<(), ApiError> {
        if self.has(scope) {
            Ok(())
        } else {
            Err(ApiError::forbidden(scope))
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let (key, env) = state
            .store
            .caller(&token_hash(&parts.headers)?, state.clock.now())
            .await?
            .ok_or_else(ApiError::unauthenticated)?;
        note_used(state, &key);
        Ok(Caller { key, env })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::EnvironmentId;

    fn key(last_used_at: Option<Millis>) -> ApiKeyRecord {
        ApiKeyRecord {
            id: KeyId::from_unique("usage"),
            env_id: EnvironmentId::from_unique("usage"),
            name: "k".into(),
            scopes: vec![],
            token_hash: "sha256:00".into(),
            created_at: Millis(0),
            expires_at: None,
            revoked_at: None,
            last_used_at,
        }
    }

    #[test]
    fn last_use_is_written_once_per_key_per_interval() {
        let usage = KeyUsage::default();
        let interval_ms = KEY_LAST_USED_INTERVAL_S * 1_000;
        let start = Millis(1_000_000);
        assert!(usage.due(&key(None), start));
        // Requests within the interval, before and after the write landed, write nothing.
        assert!(!usage.due(&key(None), Millis(start.0 + 1)));
        assert!(!usage.due(&key(Some(start)), Millis(start.0 + interval_ms - 1)));
        assert!(usage.due(&key(Some(start)), Millis(start.0 + interval_ms)));
    }

    #[test]
    fn a_recent_last_use_written_by_another_replica_is_not_written_again() {
        let usage = KeyUsage::default();
        assert!(!usage.due(&key(Some(Millis(5_000))), Millis(6_000)));
    }
}
