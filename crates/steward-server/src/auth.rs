//! Bearer-key authentication and scope checks. A key is bound to one environment; every handler
//! reads and writes only that environment's records.
//!
//! Every request reads its key from the store (`Store::caller`, or `Store::invoke_context` on
//! the invoke path): there is no cache, so a revocation or an expiry committed by any process
//! refuses the next request on every replica. A key's last use is recorded separately
//! ([`note_used`]): at most once per key per
//! [`crate::key_usage::KEY_LAST_USED_INTERVAL_S`], in a task of its own.
//!
//! A request that stays open (the event stream, an approval's long poll) was authenticated
//! once, at its start; a [`KeyWatch`] reads its key again every [`KEY_RECHECK_INTERVAL_MS`] for
//! as long as it is open, so a revocation, the end of a rotation's overlap or an expiry ends it
//! within about that long, on every replica (the read goes to the database, like `caller`).

use crate::clock::Clock;
use crate::error::{codes, ApiError};
use crate::keys::hash_token;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use serde_json::json;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use steward_core::{KeyId, Millis};
use steward_store::{ApiKeyRecord, Environment, Store};

/// Records that `key` authenticated a request, when it is due ([`crate::key_usage::KeyUsage::due`]): in a task
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
        authenticate(state, &token_hash(&parts.headers)?).await
    }
}

/// The caller whose bearer token hashes to `token_hash`, read from the store (`Store::caller`):
/// 401 when the key is missing, revoked or expired. Every door authenticates here, except the
/// HTTP invoke, whose one read (`Store::invoke_context`) authenticates with what it reads.
pub async fn authenticate(state: &AppState, token_hash: &str) -> Result<Caller, ApiError> {
    let (key, env) = state
        .store
        .caller(token_hash, state.clock.now())
        .await?
        .ok_or_else(ApiError::unauthenticated)?;
    note_used(state, &key);
    Ok(Caller { key, env })
}

/// How often a long-lived request re-reads its key, in milliseconds: a key revoked, rotated out
/// or expired by any replica ends such a request within about this long (plus one read), at the
/// cost of one primary-key read a second per open request.
pub const KEY_RECHECK_INTERVAL_MS: u64 = 1_000;

/// How many re-reads of a key may fail in a row (storage unreachable) before the request it
/// guards is ended anyway, in reads: about five seconds at [`KEY_RECHECK_INTERVAL_MS`]. Past
/// that nobody can vouch for the key, and a client's reconnect authenticates afresh.
pub const KEY_RECHECK_FAILURES_MAX: u32 = 5;

/// Why a long-lived request's key no longer authenticates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyEnd {
    /// `steward keys revoke` (or a revocation through any replica).
    Revoked,
    /// The key reached its expiry: the one it was created with, or the end of a rotation's
    /// overlap (a rotation moves the old key's expiry to the overlap's end).
    Expired,
    /// The key is no longer stored at all.
    Missing,
    /// Storage could not be read for [`KEY_RECHECK_FAILURES_MAX`] re-reads in a row.
    Unverified,
}

impl KeyEnd {
    /// The stable reason a client matches on (the stream's `closed` event, the long poll's
    /// `details.reason`).
    pub fn reason(self) -> &'static str {
        match self {
            KeyEnd::Revoked => "key_revoked",
            KeyEnd::Expired => "key_expired",
            KeyEnd::Missing => "key_missing",
            KeyEnd::Unverified => "key_unverified",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            KeyEnd::Revoked => "the key was revoked while this request was open",
            KeyEnd::Expired => {
                "the key expired (or a rotation's overlap ended) while this request was open"
            }
            KeyEnd::Missing => "the key no longer exists",
            KeyEnd::Unverified => {
                "the key could not be checked again: storage is unavailable; reconnect"
            }
        }
    }

    /// The answer a request gets when its key ends under it: 401 naming why, or 503 when
    /// storage could not say.
    pub fn error(self) -> ApiError {
        let code = match self {
            KeyEnd::Unverified => codes::STORAGE_UNAVAILABLE,
            KeyEnd::Revoked | KeyEnd::Expired | KeyEnd::Missing => codes::AUTHENTICATION_FAILED,
        };
        ApiError::of(code, self.message()).with_details(json!({"reason": self.reason()}))
    }

    /// Why `key` (as read now; `None` when it is gone) no longer authenticates at `now`, or
    /// `None` while it does.
    pub fn of(key: Option<&ApiKeyRecord>, now: Millis) -> Option<KeyEnd> {
        let Some(key) = key else {
            return Some(KeyEnd::Missing);
        };
        if key.revoked_at.is_some() {
            Some(KeyEnd::Revoked)
        } else if !key.usable_at(now) {
            Some(KeyEnd::Expired)
        } else {
            None
        }
    }
}

/// Re-reads one request's key for as long as the request is open: [`KeyWatch::check`] once,
/// now; [`KeyWatch::ended`] every [`KEY_RECHECK_INTERVAL_MS`] until the key stops
/// authenticating. Each read is `Identity::key` (one primary-key read from the database, never
/// a cache), so a revocation committed on another replica is seen like one committed here.
pub struct KeyWatch {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    key: KeyId,
    /// Re-reads that failed in a row (see [`KEY_RECHECK_FAILURES_MAX`]).
    failures: AtomicU32,
}

impl KeyWatch {
    /// Watches the key `caller` authenticated with.
    pub fn new(state: &AppState, caller: &Caller) -> Self {
        Self::of(
            state.store.clone(),
            state.clock.clone(),
            caller.key.id.clone(),
        )
    }

    /// Watches `key` in `store`, as of `clock`.
    pub fn of(store: Arc<dyn Store>, clock: Arc<dyn Clock>, key: KeyId) -> Self {
        KeyWatch {
            store,
            clock,
            key,
            failures: AtomicU32::new(0),
        }
    }

    /// Reads the key now: why it no longer authenticates, or `None` while it does. A failed
    /// read is `None` (the key is given the benefit of its last good read) until
    /// [`KEY_RECHECK_FAILURES_MAX`] reads in a row have failed; then [`KeyEnd::Unverified`].
    pub async fn check(&self) -> Option<KeyEnd> {
        match self.store.key(&self.key).await {
            Ok(key) => {
                self.failures.store(0, Ordering::Relaxed);
                KeyEnd::of(key.as_ref(), self.clock.now())
            }
            Err(e) => {
                let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(error = %e, key = %self.key, failures, "could not read a long-lived request's key again");
                (failures >= KEY_RECHECK_FAILURES_MAX).then_some(KeyEnd::Unverified)
            }
        }
    }

    /// Resolves when the key no longer authenticates, with why, reading it every
    /// [`KEY_RECHECK_INTERVAL_MS`]. Pending for as long as the key is good; drop it to stop
    /// watching.
    pub async fn ended(&self) -> KeyEnd {
        loop {
            tokio::time::sleep(Duration::from_millis(KEY_RECHECK_INTERVAL_MS)).await;
            if let Some(end) = self.check().await {
                return end;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_usage::{KeyUsage, KEY_LAST_USED_INTERVAL_S};
    use steward_core::EnvironmentId;
    use steward_store::Identity;

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
    fn a_key_ends_when_revoked_expired_or_gone_and_revocation_wins() {
        let now = Millis(10_000);
        let good = key(None);
        assert_eq!(KeyEnd::of(Some(&good), now), None);
        let later = ApiKeyRecord {
            expires_at: Some(Millis(10_001)),
            ..good.clone()
        };
        assert_eq!(KeyEnd::of(Some(&later), now), None);
        let expired = ApiKeyRecord {
            expires_at: Some(now),
            ..good.clone()
        };
        assert_eq!(KeyEnd::of(Some(&expired), now), Some(KeyEnd::Expired));
        let revoked = ApiKeyRecord {
            revoked_at: Some(Millis(1)),
            ..expired
        };
        assert_eq!(KeyEnd::of(Some(&revoked), now), Some(KeyEnd::Revoked));
        assert_eq!(KeyEnd::of(None, now), Some(KeyEnd::Missing));
    }

    #[test]
    fn an_ended_key_answers_401_naming_why_and_503_when_storage_could_not_say() {
        for end in [KeyEnd::Revoked, KeyEnd::Expired, KeyEnd::Missing] {
            let error = end.error();
            assert_eq!(error.code, codes::AUTHENTICATION_FAILED.code);
            assert_eq!(error.details, Some(json!({"reason": end.reason()})));
        }
        assert_eq!(
            KeyEnd::Unverified.error().code,
            codes::STORAGE_UNAVAILABLE.code
        );
    }

    #[tokio::test]
    async fn a_watch_ends_within_a_recheck_of_a_revocation_and_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(steward_store::SqliteStore::open(&dir.path().join("s.db")).unwrap());
        let clock: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock);
        let now = clock.now();
        let env = store
            .ensure_environment(
                steward_store::NewEnvironment {
                    name: "watch",
                    id: &EnvironmentId::from_unique("watch"),
                },
                &steward_store::Actor::system(now),
            )
            .await
            .unwrap();
        let watched = ApiKeyRecord {
            env_id: env.id,
            ..key(None)
        };
        let actor = steward_store::Actor::system(now);
        store.insert_key(&watched, &actor).await.unwrap();
        let watch = KeyWatch::of(store.clone(), clock, watched.id.clone());
        assert_eq!(watch.check().await, None);
        let ended = watch.ended();
        tokio::pin!(ended);
        let wait = Duration::from_millis(KEY_RECHECK_INTERVAL_MS * 2);
        assert!(
            tokio::time::timeout(wait, &mut ended).await.is_err(),
            "a good key's watch ended"
        );
        assert!(store.revoke_key(&watched.id, &actor).await.unwrap());
        let started = std::time::Instant::now();
        let end = tokio::time::timeout(wait, &mut ended).await;
        assert_eq!(end, Ok(KeyEnd::Revoked));
        assert!(started.elapsed() <= wait);
    }

    #[test]
    fn a_recent_last_use_written_by_another_replica_is_not_written_again() {
        let usage = KeyUsage::default();
        assert!(!usage.due(&key(Some(Millis(5_000))), Millis(6_000)));
    }
}
