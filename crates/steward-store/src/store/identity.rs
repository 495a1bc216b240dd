//! Who is calling: environments, API keys and operator console sessions.

use crate::console_session::ConsoleSessionRecord;
use crate::error::StoreResult;
use crate::records::{Actor, ApiKeyRecord, Environment, KeyRotation, NewEnvironment};
use async_trait::async_trait;
use steward_core::{EnvironmentId, KeyId, Millis};

/// Environments, the API keys that act in them, and the console sessions signed in with a key:
/// what authenticating a request reads, and what creating, rotating and revoking keys writes.
#[async_trait]
pub trait Identity: Send + Sync {
    // --- environments and keys -------------------------------------------------------------

    /// The environment called `env.name`, created with `env.id` if it does not exist yet.
    async fn ensure_environment(
        &self,
        env: NewEnvironment<'_>,
        actor: &Actor,
    ) -> StoreResult<Environment>;
    async fn environment(&self, id: &EnvironmentId) -> StoreResult<Option<Environment>>;
    /// Stores a key's hash and metadata. `Duplicate` if the hash exists.
    async fn insert_key(&self, key: &ApiKeyRecord, actor: &Actor) -> StoreResult<()>;
    /// The key with this hash, usable or not (revoked and expired keys included).
    async fn key_by_hash(&self, token_hash: &str) -> StoreResult<Option<ApiKeyRecord>>;
    async fn key(&self, id: &KeyId) -> StoreResult<Option<ApiKeyRecord>>;
    /// `key_by_hash` and that key's environment, in one read: what authenticating a request
    /// needs. `None` when either is missing, or when the key is not usable at `now`
    /// (`ApiKeyRecord::usable_at`: revoked or expired). Read from the database every time, so
    /// a revocation committed by any process refuses the next request on every replica.
    async fn caller(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ApiKeyRecord, Environment)>>;
    async fn list_keys(&self) -> StoreResult<Vec<ApiKeyRecord>>;
    /// Revokes a key, with its `key.revoked` audit event in the same transaction. `false` when
    /// there is no such key or it was already revoked (nothing is written).
    async fn revoke_key(&self, id: &KeyId, actor: &Actor) -> StoreResult<bool>;
    /// Rotates a key in one transaction: inserts the new key with the old one's environment,
    /// name and scopes, moves the old key's expiry to `rotation.old_expires_at` (never later
    /// than it already was), and appends the `key.rotated` audit event. `NotFound` when the old
    /// key does not exist or is no longer usable at `actor.now`. Returns the new key.
    async fn rotate_key(&self, rotation: &KeyRotation, actor: &Actor) -> StoreResult<ApiKeyRecord>;
    /// Records that the key authenticated a request at `at` (only moves `last_used_at`
    /// forward). Bookkeeping, not a state change: no audit event, and callers run it off the
    /// request's path and at most once per key per interval.
    async fn mark_key_used(&self, id: &KeyId, at: Millis) -> StoreResult<()>;

    // --- operator console sessions -----------------------------------------------------------

    /// Records a console sign-in, with its `console.session.started` audit event in the same
    /// transaction. `Duplicate` if the token hash exists; `NotFound` if the key does not.
    async fn create_console_session(
        &self,
        session: &ConsoleSessionRecord,
        actor: &Actor,
    ) -> StoreResult<()>;
    /// The session with this token hash, its key and the key's environment, in one read: what
    /// authenticating a console request needs. `None` when any is missing, when the session
    /// has expired at `now`, or when its key is not usable at `now` (revoked or expired). Read
    /// from the database every time, like [`Identity::caller`].
    async fn console_session(
        &self,
        token_hash: &str,
        now: Millis,
    ) -> StoreResult<Option<(ConsoleSessionRecord, ApiKeyRecord, Environment)>>;
    /// Ends a session (sign-out), with its `console.session.ended` audit event in the same
    /// transaction. `false` when there is no such session (nothing is written).
    async fn end_console_session(&self, token_hash: &str, actor: &Actor) -> StoreResult<bool>;
}
