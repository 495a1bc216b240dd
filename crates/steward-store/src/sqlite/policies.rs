//! Approval policies: live rows plus immutable versions. An edit appends a version; deletion
//! marks the policy deleted and appends a tombstone version, so every decision that names a
//! policy version can still be read back.

use super::audit_log::append;
use super::conn::unavailable;
use super::rows::{query_all, query_one};
use super::SqliteStore;
use crate::error::{StoreError, StoreResult};
use crate::governance::{PolicyChange, PolicyRecord, PolicySetChange, PolicyVersion};
use crate::policy_plan::{self, LiveRow, PolicyPlan, COLUMNS, FROM, VERSION_COLUMNS};
use crate::records::Actor;
use crate::store::Policies;
use async_trait::async_trait;
use rusqlite::{params, Connection, Transaction};
use steward_core::policy::PolicySpec;
use steward_core::{EnvironmentId, PolicyId};

/// Applies `plan` in `tx`: the live row's move, the version row, the audit event.
fn apply(tx: &Transaction<'_>, plan: &PolicyPlan) -> StoreResult<()> {
    let (id, at) = (plan.id.as_str(), plan.actor.now.0);
    match &plan.live {
        LiveRow::Insert { name } => tx.execute(
            "INSERT INTO policies (id, env_id, name, version, created_at, updated_at) VALUES (?1, ?2, ?3, 1, ?4, ?4)",
            params![id, plan.env_id.as_str(), name, at],
        ),
        LiveRow::Update { from, name } => tx.execute(
            "UPDATE policies SET version = ?1, name = ?2, updated_at = ?3 WHERE id = ?4 AND version = ?5",
            params![plan.version, name, at, id, from],
        ),
        LiveRow::Delete => tx.execute(
            "UPDATE policies SET deleted_at = ?1, version = ?2, updated_at = ?1 WHERE id = ?3 AND deleted_at IS NULL",
            params![at, plan.version, id],
        ),
    }
    .map_err(|e| super::conn::constraint(e, "policy"))?;
    tx.execute(
        "INSERT INTO policy_versions (policy_id, version, spec, change_note, created_at, created_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            id,
            plan.version,
            plan.spec,
            plan.note,
            at,
            plan.actor.key.as_ref().map(|k| k.to_string())
        ],
    )
    .map_err(unavailable)?;
    append(tx, &plan.actor, plan.entry.clone())
}

pub(crate) fn policy(
    conn: &Connection,
    env: &EnvironmentId,
    id: &PolicyId,
) -> StoreResult<Option<PolicyRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM {FROM} WHERE p.env_id = ?1 AND p.id = ?2 AND p.deleted_at IS NULL"
    );
    query_one(conn, &sql, &[&env.as_str(), &id.as_str()], |row| {
        policy_plan::policy(row)
    })
}

pub(crate) fn list(conn: &Connection, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM {FROM} WHERE p.env_id = ?1 AND p.deleted_at IS NULL ORDER BY p.created_at, p.id"
    );
    query_all(conn, &sql, &[&env.as_str()], |row| policy_plan::policy(row))
}

#[async_trait]
impl Policies for SqliteStore {
    async fn create_policy(
        &self,
        policy: &PolicyRecord,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<()> {
        let (env, change) = (policy.env_id.clone(), PolicyChange::Create(policy.clone()));
        let (note, actor) = (change_note.map(str::to_string), actor.clone());
        self.write(move |tx| {
            apply(
                tx,
                &policy_plan::plan(&env, &change, None, note.as_deref(), &actor)?,
            )
        })
        .await
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
        let (env, id) = (env.clone(), id.clone());
        let (note, actor) = (change_note.map(str::to_string), actor.clone());
        self.write(move |tx| {
            let current = policy(tx, &env, &id)?;
            let plan = policy_plan::plan(&env, &change, current.as_ref(), note.as_deref(), &actor)?;
            apply(tx, &plan)?;
            policy(tx, &env, &id)?.ok_or(StoreError::NotFound { what: "policy" })
        })
        .await
    }

    async fn delete_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, id) = (env.clone(), id.clone());
        let (note, actor) = (change_note.map(str::to_string), actor.clone());
        self.write(move |tx| {
            let Some(current) = policy(tx, &env, &id)? else {
                return Ok(false);
            };
            let change = policy_plan::delete_of(&current);
            let plan = policy_plan::plan(&env, &change, Some(&current), note.as_deref(), &actor)?;
            apply(tx, &plan).map(|()| true)
        })
        .await
    }

    async fn apply_policy_set(
        &self,
        change: &PolicySetChange,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<Vec<PolicyRecord>> {
        let (set, note, actor) = (
            change.clone(),
            change_note.map(str::to_string),
            actor.clone(),
        );
        self.write(move |tx| {
            let env = &set.env_id;
            set.check_expected(&list(tx, env)?)?;
            for change in set.in_write_order() {
                let current = policy(tx, env, policy_plan::named(change))?;
                let plan =
                    policy_plan::plan(env, change, current.as_ref(), note.as_deref(), &actor)?;
                apply(tx, &plan)?;
            }
            list(tx, env)
        })
        .await
    }

    async fn policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Option<PolicyRecord>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |conn| policy(conn, &env, &id)).await
    }

    async fn list_policies(&self, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>> {
        let env = env.clone();
        self.read(move |conn| list(conn, &env)).await
    }

    async fn policy_versions(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
    ) -> StoreResult<Vec<PolicyVersion>> {
        let (env, id) = (env.clone(), id.clone());
        self.read(move |conn| {
            let sql = format!(
                "SELECT {VERSION_COLUMNS} FROM policy_versions v JOIN policies p ON p.id = v.policy_id
                 WHERE p.env_id = ?1 AND p.id = ?2 ORDER BY v.version"
            );
            query_all(conn, &sql, &[&env.as_str(), &id.as_str()], |row| {
                policy_plan::version(row)
            })
        })
        .await
    }
}
