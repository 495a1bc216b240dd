//! Connected accounts (`crate::connection`): which secrets hold an integration's credential,
//! and whether that credential still works.

use crate::connection::{ConnectionRecord, HealthCheck};
use crate::error::StoreResult;
use crate::records::Actor;
use async_trait::async_trait;
use steward_core::EnvironmentId;

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
}
