//! Connected accounts (`crate::connection`): which secrets hold an integration's credential,
//! and whether that credential still works.

use crate::connection::{ConnectionRecord, ConnectionSession, HealthCheck, SessionStatus};
use crate::error::StoreResult;
use crate::records::Actor;
use async_trait::async_trait;
use steward_core::{EnvironmentId, Millis};

/// The secret is written first (`Catalog::put_secret`), then its connection here: a crash in
/// between leaves a plain secret, which connecting again under the same name turns into the
/// account. An account whose secret is gone (or was created again) is not listed.
#[async_trait]
pub trait Connections: Send + Sync {
    /// Records (or replaces) the account of `connection.secret_name`. Once it returns, the
    /// account is listed with its health.
    async fn record_connection(
        &self,
        connection: &ConnectionRecord,
        actor: &Actor,
    ) -> StoreResult<ConnectionRecord>;
    /// The account held by secret `name`, if the secret it was connected into still exists.
    async fn connection(
        &self,
        env: &EnvironmentId,
        name: &str,
    ) -> StoreResult<Option<ConnectionRecord>>;
    /// Every account of the environment, by secret name.
    async fn list_connections(&self, env: &EnvironmentId) -> StoreResult<Vec<ConnectionRecord>>;
    /// Records what the provider answered of the account `check` names; `NotFound` if there is
    /// none.
    async fn record_health(
        &self,
        check: &HealthCheck,
        actor: &Actor,
    ) -> StoreResult<ConnectionRecord>;

    // --- consent sessions (OAuth) ------------------------------------------------------------

    /// Records a new `pending` consent session. Once it returns, the callback can find it by
    /// its state digest.
    async fn create_session(
        &self,
        session: &ConnectionSession,
        actor: &Actor,
    ) -> StoreResult<ConnectionSession>;
    /// The session `id` of the environment, whatever its status.
    async fn session(
        &self,
        env: &EnvironmentId,
        id: &str,
    ) -> StoreResult<Option<ConnectionSession>>;
    /// Spends a session's `state`: the one `pending` session with `state_digest` whose
    /// `expires_at` is after `now` moves to `exchanging` and is returned. Compare-and-set: of
    /// any number of callbacks carrying one `state`, at most one ever gets `Some`; an expired,
    /// spent or unknown state gets `None` and changes nothing.
    async fn claim_session(
        &self,
        state_digest: &str,
        now: Millis,
    ) -> StoreResult<Option<ConnectionSession>>;
    /// Settles an `exchanging` session as `completed` or `failed` (with `reason`). `NotFound`
    /// if the session is not `exchanging`.
    async fn finish_session(
        &self,
        env: &EnvironmentId,
        id: &str,
        status: SessionStatus,
        reason: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<ConnectionSession>;
}
