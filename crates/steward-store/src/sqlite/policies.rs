//! Approval policies: live rows plus immutable versions. An edit appends a version; deletion
//! marks the policy deleted and appends a tombstone version, so every decision that names a
//! policy version can still be read back.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::unavailable;
use super::rows::{self, col, query_all, query_one};
use super::SqliteStore;
use crate::error::{StoreError, StoreResult};
use crate::governance::{PolicyChange, PolicyRecord, PolicySetChange, PolicyVersion};
use crate::records::Actor;
use crate::store::Policies;
use async_trait::async_trait;
use rusqlite::{params, Connection, Row, Transaction};
use serde_json::json;
use steward_core::policy::PolicySpec;
use steward_core::{EnvironmentId, KeyId, Millis, PolicyId};

const COLUMNS: &str = "p.id, p.env_id, p.version, v.spec, p.created_at, p.updated_at";
const FROM: &str =
    "policies p JOIN policy_versions v ON v.policy_id = p.id AND v.version = p.version";

fn spec(raw: &str) -> StoreResult<PolicySpec> {
    serde_json::from_str(raw).map_err(|e| rows::corrupt("policy spec", e))
}

fn decode(row: &Row<'_>) -> StoreResult<PolicyRecord> {
    let raw: String = col(row, 3)?;
    Ok(PolicyRecord {
        id: PolicyId::parse(&col::<String>(row, 0)?).map_err(|e| rows::corrupt("id", e))?,
        env_id: EnvironmentId::parse(&col::<String>(row, 1)?)
            .map_err(|e| rows::corrupt("id", e))?,
        version: col(row, 2)?,
        spec: spec(&raw)?,
        created_at: Millis(col(row, 4)?),
        updated_at: Millis(col(row, 5)?),
    })
}

/// What the audit log says about a policy version.
fn audit_view(version: u32, spec: &PolicySpec, note: Option<&str>) -> serde_json::Value {
    json!({"version": version, "spec": spec, "changeNote": note})
}

fn insert_version(
    tx: &Transaction<'_>,
    id: &PolicyId,
    version: u32,
    spec: Option<&PolicySpec>,
    note: Option<&str>,
    actor: &Actor,
) -> StoreResult<()> {
    let raw = spec
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| rows::corrupt("policy spec", e))?;
    tx.execute(
        "INSERT INTO policy_versions (policy_id, version, spec, change_note, created_at, created_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            id.as_str(),
            version,
            raw,
            note,
            actor.now.0,
            actor.key.as_ref().map(|k| k.to_string())
        ],
    )
    .map_err(unavailable)?;
    Ok(())
}

pub(crate) fn policy(
    conn: &Connection,
    env: &EnvironmentId,
    id: &PolicyId,
) -> StoreResult<Option<PolicyRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM {FROM} WHERE p.env_id = ?1 AND p.id = ?2 AND p.deleted_at IS NULL"
    );
    query_one(conn, &sql, &[&env.as_str(), &id.as_str()], decode)
}

pub(crate) fn list(conn: &Connection, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM {FROM} WHERE p.env_id = ?1 AND p.deleted_at IS NULL ORDER BY p.created_at, p.id"
    );
    query_all(conn, &sql, &[&env.as_str()], decode)
}

/// Creates `p` at version 1, with its audit event, in `tx`.
fn create_in(
    tx: &Transaction<'_>,
    p: &PolicyRecord,
    note: Option<&str>,
    actor: &Actor,
) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO policies (id, env_id, name, version, created_at, updated_at) VALUES (?1, ?2, ?3, 1, ?4, ?4)",
        params![p.id.as_str(), p.env_id.as_str(), p.spec.name, actor.now.0],
    )
    .map_err(|e| super::conn::constraint(e, "policy"))?;
    insert_version(tx, &p.id, 1, Some(&p.spec), note, actor)?;
    append(
        tx,
        actor,
        AuditEntry::new(AuditKind::PolicyCreated, p.env_id.as_str(), p.id.as_str())
            .after(audit_view(1, &p.spec, note)),
    )
}

/// Appends version `expected + 1` of a live policy, with its audit event, in `tx`.
#[allow(clippy::too_many_arguments)] // one edit: where, which, from which version, to what, why, who
fn update_in(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    id: &PolicyId,
    expected: u32,
    new_spec: &PolicySpec,
    note: Option<&str>,
    actor: &Actor,
) -> StoreResult<PolicyRecord> {
    let current = policy(tx, env, id)?.ok_or(StoreError::NotFound { what: "policy" })?;
    if current.version != expected {
        return Err(StoreError::VersionConflict {
            expected,
            found: current.version,
        });
    }
    let version = expected + 1;
    tx.execute(
        "UPDATE policies SET version = ?1, name = ?2, updated_at = ?3 WHERE id = ?4 AND version = ?5",
        params![version, new_spec.name, actor.now.0, id.as_str(), expected],
    )
    .map_err(|e| super::conn::constraint(e, "policy"))?;
    insert_version(tx, id, version, Some(new_spec), note, actor)?;
    append(
        tx,
        actor,
        AuditEntry::new(AuditKind::PolicyUpdated, env.as_str(), id.as_str())
            .before(audit_view(expected, &current.spec, None))
            .after(audit_view(version, new_spec, note)),
    )?;
    policy(tx, env, id)?.ok_or(StoreError::NotFound { what: "policy" })
}

/// Deletes a live policy (a tombstone version), with its audit event, in `tx`; `None` if there
/// is no live policy `id`, else the version it was deleted at.
fn delete_in(
    tx: &Transaction<'_>,
    env: &EnvironmentId,
    id: &PolicyId,
    note: Option<&str>,
    actor: &Actor,
) -> StoreResult<Option<u32>> {
    let Some(current) = policy(tx, env, id)? else {
        return Ok(None);
    };
    let tombstone = current.version + 1;
    tx.execute(
        "UPDATE policies SET deleted_at = ?1, version = ?2, updated_at = ?1 WHERE id = ?3 AND deleted_at IS NULL",
        params![actor.now.0, tombstone, id.as_str()],
    )
    .map_err(unavailable)?;
    insert_version(tx, id, tombstone, None, note, actor)?;
    append(
        tx,
        actor,
        AuditEntry::new(AuditKind::PolicyDeleted, env.as_str(), id.as_str())
            .before(audit_view(current.version, &current.spec, None))
            .after(json!({"version": tombstone, "deleted": true, "changeNote": note})),
    )?;
    Ok(Some(current.version))
}

#[async_trait]
impl Policies for SqliteStore {
    async fn create_policy(
        &self,
        policy: &PolicyRecord,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<()> {
        let (p, note, actor) = (
            policy.clone(),
            change_note.map(str::to_string),
            actor.clone(),
        );
        self.write(move |tx| create_in(tx, &p, note.as_deref(), &actor))
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
        let (env, id, expected, new_spec, note, actor) = (
            env.clone(),
            id.clone(),
            expected_version,
            spec.clone(),
            change_note.map(str::to_string),
            actor.clone(),
        );
        self.write(move |tx| update_in(tx, &env, &id, expected, &new_spec, note.as_deref(), &actor))
            .await
    }

    async fn delete_policy(
        &self,
        env: &EnvironmentId,
        id: &PolicyId,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<bool> {
        let (env, id, note, actor) = (
            env.clone(),
            id.clone(),
            change_note.map(str::to_string),
            actor.clone(),
        );
        self.write(move |tx| {
            delete_in(tx, &env, &id, note.as_deref(), &actor).map(|deleted| deleted.is_some())
        })
        .await
    }

    async fn apply_policy_set(
        &self,
        change: &PolicySetChange,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<Vec<PolicyRecord>> {
        let (change, note, actor) = (
            change.clone(),
            change_note.map(str::to_string),
            actor.clone(),
        );
        self.write(move |tx| {
            let env = &change.env_id;
            change.check_expected(&list(tx, env)?)?;
            let note = note.as_deref();
            for step in change.in_write_order() {
                match step {
                    PolicyChange::Create(p) => create_in(tx, p, note, &actor)?,
                    PolicyChange::Update {
                        id,
                        expected_version,
                        spec,
                    } => {
                        update_in(tx, env, id, *expected_version, spec, note, &actor)?;
                    }
                    PolicyChange::Delete {
                        id,
                        expected_version,
                    } => match delete_in(tx, env, id, note, &actor)? {
                        Some(version) if version == *expected_version => {}
                        found => {
                            return Err(StoreError::VersionConflict {
                                expected: *expected_version,
                                found: found.unwrap_or(0),
                            })
                        }
                    },
                }
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
            let sql =
                "SELECT v.policy_id, v.version, v.spec, v.change_note, v.created_at, v.created_by
               FROM policy_versions v JOIN policies p ON p.id = v.policy_id
               WHERE p.env_id = ?1 AND p.id = ?2 ORDER BY v.version";
            query_all(conn, sql, &[&env.as_str(), &id.as_str()], |row| {
                Ok(PolicyVersion {
                    policy_id: PolicyId::parse(&col::<String>(row, 0)?)
                        .map_err(|e| rows::corrupt("id", e))?,
                    version: col(row, 1)?,
                    spec: col::<Option<String>>(row, 2)?
                        .map(|raw| spec(&raw))
                        .transpose()?,
                    change_note: col(row, 3)?,
                    created_at: Millis(col(row, 4)?),
                    created_by: col::<Option<String>>(row, 5)?
                        .map(|k| KeyId::parse(&k).map_err(|e| rows::corrupt("id", e)))
                        .transpose()?,
                })
            })
        })
        .await
    }
}
