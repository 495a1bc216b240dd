//! Approval policies: live rows plus immutable versions. An edit appends a version; deletion
//! marks the policy deleted and appends a tombstone version, so every decision that names a
//! policy version can still be read back. Edits are compare-and-sets on the version, checked
//! behind the write lock.

use super::audit_log::append;
use super::conn::Tx;
use super::conn::{in_transaction, Mode};
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::governance::{PolicyChange, PolicyRecord, PolicySetChange, PolicyVersion};
use crate::policy_plan::{self, LiveRow, PolicyPlan, COLUMNS, FROM, VERSION_COLUMNS};
use crate::records::Actor;
use crate::store::Policies;
use async_trait::async_trait;
use steward_core::policy::PolicySpec;
use steward_core::{EnvironmentId, KeyId, PolicyId};

/// Applies `plan` in `tx`: the live row's move, the version row, the audit event. An update
/// runs behind the write lock, so the version its plan checked cannot move before it.
async fn apply(tx: &Tx<'_>, plan: &PolicyPlan) -> StoreResult<()> {
    let (id, at, version) = (plan.id.as_str(), plan.actor.now.0, i64::from(plan.version));
    match &plan.live {
        LiveRow::Insert { name } => {
            tx.execute_unique(
                "policy",
                "INSERT INTO policies (id, env_id, name, version, created_at, updated_at) VALUES ($1, $2, $3, 1, $4, $4)",
                &[&id, &plan.env_id.as_str(), name, &at],
            )
            .await?;
        }
        LiveRow::Update { from, name } => {
            let changed = tx
                .execute_unique(
                    "policy",
                    "UPDATE policies SET version = $1, name = $2, updated_at = $3 WHERE id = $4 AND version = $5",
                    &[&version, name, &at, &id, &i64::from(*from)],
                )
                .await?;
            assert_eq!(
                changed, 1,
                "policy {id}: version {from} checked under the write lock moved"
            );
        }
        LiveRow::Delete => {
            tx.execute(
                "UPDATE policies SET deleted_at = $1, version = $2, updated_at = $1 WHERE id = $3 AND deleted_at IS NULL",
                &[&at, &version, &id],
            )
            .await?;
        }
    }
    tx.execute(
        "INSERT INTO policy_versions (policy_id, version, spec, change_note, created_at, created_by)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &id,
            &version,
            &plan.spec,
            &plan.note,
            &at,
            &plan.actor.key.as_ref().map(KeyId::as_str),
        ],
    )
    .await?;
    append(tx, &plan.actor, plan.entry.clone()).await
}

pub(crate) async fn policy(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &PolicyId,
) -> StoreResult<Option<PolicyRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM {FROM} WHERE p.env_id = $1 AND p.id = $2 AND p.deleted_at IS NULL"
    );
    tx.one(&sql, &[&env.as_str(), &id.as_str()], policy_plan::policy)
        .await
}

pub(crate) async fn list(tx: &Tx<'_>, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM {FROM} WHERE p.env_id = $1 AND p.deleted_at IS NULL ORDER BY p.created_at, p.id"
    );
    tx.all(&sql, &[&env.as_str()], policy_plan::policy).await
}

#[async_trait]
impl Policies for PostgresStore {
    async fn create_policy(
        &self,
        policy: &PolicyRecord,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<()> {
        let change = PolicyChange::Create(policy.clone());
        let plan = policy_plan::plan(&policy.env_id, &change, None, change_note, actor)?;
        in_transaction!(self, Mode::Write, |tx| apply(&tx, &plan))
    }

    async fn update_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        expected_version: u32,
        spec: &PolicySpec,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<PolicyRecord> {
        let change = PolicyChange::Update {
            id: id.clone(),
            expected_version,
            spec: spec.clone(),
        };
        in_transaction!(self, Mode::Write, |tx| async {
            let current = policy(&tx, env, id).await?;
            let plan = policy_plan::plan(env, &change, current.as_ref(), change_note, actor)?;
            apply(&tx, &plan).await?;
            policy(&tx, env, id)
                .await?
                .ok_or(StoreError::NotFound { what: "policy" })
        })
    }

    async fn delete_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<bool> {
        in_transaction!(self, Mode::Write, |tx| async {
            let Some(current) = policy(&tx, env, id).await? else {
                return Ok(false);
            };
            let change = policy_plan::delete_of(&current);
            let plan = policy_plan::plan(env, &change, Some(&current), change_note, actor)?;
            apply(&tx, &plan).await.map(|()| true)
        })
    }

    async fn apply_policy_set(
        &self,
        set: &PolicySetChange,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<Vec<PolicyRecord>> {
        in_transaction!(self, Mode::Write, |tx| async {
            let env = &set.env_id;
            set.check_expected(&list(&tx, env).await?)?;
            for change in set.in_write_order() {
                let current = policy(&tx, env, policy_plan::named(change)).await?;
                let plan = policy_plan::plan(env, change, current.as_ref(), change_note, actor)?;
                apply(&tx, &plan).await?;
            }
            list(&tx, env).await
        })
    }

    async fn policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Option<PolicyRecord>> {
        in_transaction!(self, Mode::Read, |tx| policy(&tx, env, id))
    }

    async fn list_policies(&self, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>> {
        in_transaction!(self, Mode::Read, |tx| list(&tx, env))
    }

    async fn policy_versions(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Vec<PolicyVersion>> {
        in_transaction!(self, Mode::Read, |tx| async {
            let sql = format!(
                "SELECT {VERSION_COLUMNS} FROM policy_versions v JOIN policies p ON p.id = v.policy_id
                 WHERE p.env_id = $1 AND p.id = $2 ORDER BY v.version"
            );
            tx.all(&sql, &[&env.as_str(), &id.as_str()], policy_plan::version)
                .await
        })
    }
}
