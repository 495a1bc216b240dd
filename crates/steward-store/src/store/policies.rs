//! Approval policies and their immutable versions.

use crate::error::StoreResult;
use crate::governance::{PolicyRecord, PolicySetChange, PolicyVersion};
use crate::records::Actor;
use async_trait::async_trait;
use steward_core::policy::PolicySpec;
use steward_core::{EnvironmentId, PolicyId};

/// Approval policies: the rules that deny a request or require approvals before anything is
/// recorded. An edit appends a version and deletion a tombstone; no version ever changes.
#[async_trait]
pub trait Policies: Send + Sync {
    /// Creates the policy at version 1 (its first immutable version, with `change_note`).
    /// `Duplicate` if a live policy in the environment has that name.
    async fn create_policy(
        &self,
        policy: &PolicyRecord,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<()>;
    /// Appends version `expected_version + 1` holding `spec`; `VersionConflict` if another edit
    /// came first, `NotFound` if the policy is deleted or in another environment, `Duplicate`
    /// if the new name is taken. Earlier versions never change.
    async fn update_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        expected_version: u32,
        spec: &PolicySpec,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<PolicyRecord>;
    /// Deletes a live policy: it stops applying at once, and a tombstone version is appended.
    /// Its versions stay readable (`policy_versions`). `false` if there was no live policy.
    async fn delete_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<bool>;
    /// A live policy at its current version.
    async fn policy(&self, env: &EnvironmentId, id: &PolicyId)
        -> StoreResult<Option<PolicyRecord>>;
    /// Every live policy of the environment (enabled or not), oldest first.
    async fn list_policies(&self, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>>;
    /// Every version of a policy, live or deleted, oldest first (empty if no such policy in
    /// this environment).
    async fn policy_versions(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Vec<PolicyVersion>>;

    /// Applies a whole policy set's change in one transaction (a policy file's apply): if the
    /// environment's live policies and their versions are exactly `change.expected`, every
    /// change is written (deletions first, then updates, then creations, so a name freed by one
    /// policy can be taken by another), each with its version and audit event as the single
    /// calls write them; otherwise `VersionConflict` and nothing is written. `Duplicate` if a
    /// creation or an update takes a live name. Returns the live policies afterwards, oldest
    /// first.
    async fn apply_policy_set(
        &self,
        change: &PolicySetChange,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<Vec<PolicyRecord>>;
}
