//! Approval policies: live rows plus immutable versions. An edit appends a version; deletion
//! marks the policy deleted and appends a tombstone version, so every decision that names a
//! policy version can still be read back. Edits are compare-and-sets on the version, checked
//! behind the write lock.

use super::audit_log::{append, AuditEntry, AuditKind};
use super::conn::Tx;
use super::conn::{in_transaction, Mode};
use super::rows::{self, col, id, id_opt, int, millis};
use super::PostgresStore;
use crate::error::{StoreError, StoreResult};
use crate::governance::{PolicyChange, PolicyRecord, PolicySetChange, PolicyVersion};
use crate::records::Actor;
use crate::store::Policies;
use async_trait::async_trait;
use serde_json::json;
use steward_core::policy::PolicySpec;
use steward_core::{EnvironmentId, KeyId, PolicyId};
use tokio_postgres::Row;

const COLUMNS: &str = "p.id, p.env_id, p.version, v.spec, p.created_at, p.updated_at";
const FROM: &str =
    "policies p JOIN policy_versions v ON v.policy_id = p.id AND v.version = p.version";

fn spec(raw: &str) -> StoreResult<PolicySpec> {
    serde_json::from_str(raw).map_err(|e| rows::corrupt("policy spec", e))
}

fn decode(row: &Row) -> StoreResult<PolicyRecord> {
    Ok(PolicyRecord {
        id: id(row, 0, PolicyId::parse)?,
        env_id: id(row, 1, EnvironmentId::parse)?,
        version: int(row, 2)?,
        spec: spec(col(row, 3)?)?,
        created_at: millis(row, 4)?,
        updated_at: millis(row, 5)?,
    })
}

fn decode_version(row: &Row) -> StoreResult<PolicyVersion> {
    Ok(PolicyVersion {
        policy_id: id(row, 0, PolicyId::parse)?,
        version: int(row, 1)?,
        spec: col::<Option<&str>>(row, 2)?.map(spec).transpose()?,
        change_note: col(row, 3)?,
        created_at: millis(row, 4)?,
        created_by: id_opt(row, 5, KeyId::parse)?,
    })
}

/// What the audit log says about a policy version.
fn audit_view(version: u32, spec: &PolicySpec, note: Option<&str>) -> serde_json::Value {
    json!({"version": version, "spec": spec, "changeNote": note})
}

async fn insert_version(
    tx: &Tx<'_>,
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
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &id.as_str(),
            &i64::from(version),
            &raw,
            &note,
            &actor.now.0,
            &actor.key.as_ref().map(KeyId::as_str),
        ],
    )
    .await?;
    Ok(())
}

pub(crate) async fn policy(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &PolicyId,
) -> StoreResult<Option<PolicyRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM {FROM} WHERE p.env_id = $1 AND p.id = $2 AND p.deleted_at IS NULL"
    );
    tx.one(&sql, &[&env.as_str(), &id.as_str()], decode).await
}

pub(crate) async fn list(tx: &Tx<'_>, env: &EnvironmentId) -> StoreResult<Vec<PolicyRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM {FROM} WHERE p.env_id = $1 AND p.deleted_at IS NULL ORDER BY p.created_at, p.id"
    );
    tx.all(&sql, &[&env.as_str()], decode).await
}

/// Creates `p` at version 1, with its audit event, in `tx`.
async fn create_in(
    tx: &Tx<'_>,
    p: &PolicyRecord,
    note: Option<&str>,
    actor: &Actor,
) -> StoreResult<()> {
    tx.execute_unique(
        "policy",
        "INSERT INTO policies (id, env_id, name, version, created_at, updated_at) VALUES ($1, $2, $3, 1, $4, $4)",
        &[&p.id.as_str(), &p.env_id.as_str(), &p.spec.name, &actor.now.0],
    )
    .await?;
    insert_version(tx, &p.id, 1, Some(&p.spec), note, actor).await?;
    append(
        tx,
        actor,
        AuditEntry::new(AuditKind::PolicyCreated, p.env_id.as_str(), p.id.as_str())
            .after(audit_view(1, &p.spec, note)),
    )
    .await
}

/// Appends version `expected + 1` of a live policy, with its audit event, in `tx` (behind the
/// write lock, so the version checked cannot move before the update).
#[allow(clippy::too_many_arguments)] // one edit: where, which, from which version, to what, why, who
async fn update_in(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &PolicyId,
    expected: u32,
    new_spec: &PolicySpec,
    note: Option<&str>,
    actor: &Actor,
) -> StoreResult<PolicyRecord> {
    let current = policy(tx, env, id)
        .await?
        .ok_or(StoreError::NotFound { what: "policy" })?;
    if current.version != expected {
        return Err(StoreError::VersionConflict {
            expected,
            found: current.version,
        });
    }
    let version = expected + 1;
    let changed = tx
        .execute_unique(
            "policy",
            "UPDATE policies SET version = $1, name = $2, updated_at = $3 WHERE id = $4 AND version = $5",
            &[&i64::from(version), &new_spec.name, &actor.now.0, &id.as_str(), &i64::from(expected)],
        )
        .await?;
    assert_eq!(
        changed, 1,
        "policy {id}: version {expected} checked under the write lock moved"
    );
    insert_version(tx, id, version, Some(new_spec), note, actor).await?;
    append(
        tx,
        actor,
        AuditEntry::new(AuditKind::PolicyUpdated, env.as_str(), id.as_str())
            .before(audit_view(expected, &current.spec, None))
            .after(audit_view(version, new_spec, note)),
    )
    .await?;
    policy(tx, env, id)
        .await?
        .ok_or(StoreError::NotFound { what: "policy" })
}

/// Deletes a live policy (a tombstone version), with its audit event, in `tx`; `None` if there
/// is no live policy `id`, else the version it was deleted at.
async fn delete_in(
    tx: &Tx<'_>,
    env: &EnvironmentId,
    id: &PolicyId,
    note: Option<&str>,
    actor: &Actor,
) -> StoreResult<Option<u32>> {
    let Some(current) = policy(tx, env, id).await? else {
        return Ok(None);
    };
    let tombstone = current.version + 1;
    tx.execute(
        "UPDATE policies SET deleted_at = $1, version = $2, updated_at = $1 WHERE id = $3 AND deleted_at IS NULL",
        &[&actor.now.0, &i64::from(tombstone), &id.as_str()],
    )
    .await?;
    insert_version(tx, id, tombstone, None, note, actor).await?;
    append(
        tx,
        actor,
        AuditEntry::new(AuditKind::PolicyDeleted, env.as_str(), id.as_str())
            .before(audit_view(current.version, &current.spec, None))
            .after(json!({"version": tombstone, "deleted": true, "changeNote": note})),
    )
    .await?;
    Ok(Some(current.version))
}

#[async_trait]
impl Policies for PostgresStore {
    async fn create_policy(
        &self,
        policy: &PolicyRecord,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<()> {
        in_transaction!(self, Mode::Write, |tx| async {
            create_in(&tx, policy, change_note, actor).await
        })
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
        in_transaction!(self, Mode::Write, |tx| async {
            update_in(&tx, env, id, expected_version, spec, change_note, actor).await
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
            delete_in(&tx, env, id, change_note, actor)
                .await
                .map(|deleted| deleted.is_some())
        })
    }

    async fn apply_policy_set(
        &self,
        change: &PolicySetChange,
        change_note: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<Vec<PolicyRecord>> {
        in_transaction!(self, Mode::Write, |tx| async {
            let env = &change.env_id;
            change.check_expected(&list(&tx, env).await?)?;
            for step in change.in_write_order() {
                match step {
                    PolicyChange::Create(p) => create_in(&tx, p, change_note, actor).await?,
                    PolicyChange::Update {
                        id,
                        expected_version,
                        spec,
                    } => {
                        update_in(&tx, env, id, *expected_version, spec, change_note, actor)
                            .await?;
                    }
                    PolicyChange::Delete {
                        id,
                        expected_version,
                    } => match delete_in(&tx, env, id, change_note, actor).await? {
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
            let sql =
                "SELECT v.policy_id, v.version, v.spec, v.change_note, v.created_at, v.created_by
               FROM policy_versions v JOIN policies p ON p.id = v.policy_id
               WHERE p.env_id = $1 AND p.id = $2 ORDER BY v.version";
            tx.all(sql, &[&env.as_str(), &id.as_str()], decode_version)
                .await
        })
    }
}
