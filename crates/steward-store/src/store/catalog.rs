//! What an environment can call: its secrets, the master key they are sealed with, and its
//! actions.

use crate::error::StoreResult;
use crate::records::{ActionRecord, ActionVersion, Actor, SecretRecord};
use async_trait::async_trait;
use steward_core::{ActionDefinition, ActionId, EnvironmentId};

/// Sealed secrets, the check value of the master key that seals them, and versioned actions.
#[async_trait]
pub trait Catalog: Send + Sync {
    // --- secrets ---------------------------------------------------------------------------

    /// Creates the secret, or rotates it when `expected_version` matches the stored version
    /// (`VersionConflict` otherwise). Returns the stored record.
    async fn put_secret(
        &self,
        secret: &SecretRecord,
        expected_version: Option<u32>,
        actor: &Actor,
    ) -> StoreResult<SecretRecord>;
    async fn secret(&self, env: &EnvironmentId, name: &str) -> StoreResult<Option<SecretRecord>>;
    async fn list_secrets(&self, env: &EnvironmentId) -> StoreResult<Vec<SecretRecord>>;
    async fn delete_secret(
        &self,
        env: &EnvironmentId,
        name: &str,
        actor: &Actor,
    ) -> StoreResult<bool>;

    // --- the master key's check value --------------------------------------------------------

    /// The check value of the master key the database's secrets are sealed with, if recorded.
    async fn master_key_check(&self) -> StoreResult<Option<String>>;
    /// Records `check` as the master key's check value unless one is recorded already (with
    /// its audit event), and returns the recorded one: of replicas starting together on a
    /// new database, the first one's value wins and the others compare against it.
    async fn init_master_key_check(&self, check: &str, actor: &Actor) -> StoreResult<String>;
    /// One stored secret of any environment (the oldest), to prove a master key against a
    /// database that has secrets but no check value yet.
    async fn any_secret(&self) -> StoreResult<Option<SecretRecord>>;

    // --- actions ---------------------------------------------------------------------------

    /// Creates the action with version 1. `Duplicate` if a live action has that name.
    async fn create_action(&self, action: &ActionRecord, actor: &Actor) -> StoreResult<()>;
    /// Appends version `expected_version + 1`; `VersionConflict` if another edit came first.
    async fn update_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        expected_version: u32,
        definition: &ActionDefinition,
        actor: &Actor,
    ) -> StoreResult<ActionRecord>;
    /// A live action by id or by name.
    async fn action(
        &self,
        env: &EnvironmentId,
        reference: &str,
    ) -> StoreResult<Option<ActionRecord>>;
    async fn list_actions(&self, env: &EnvironmentId) -> StoreResult<Vec<ActionRecord>>;
    /// Marks the action deleted. Its versions and invocations are kept.
    async fn delete_action(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
        actor: &Actor,
    ) -> StoreResult<bool>;
    async fn action_versions(
        &self,
        env: &EnvironmentId,
        id: &ActionId,
    ) -> StoreResult<Vec<ActionVersion>>;
}
