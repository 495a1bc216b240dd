//! What one change of an approval policy writes, the same in every backend: the backend reads
//! the live policy in the change's transaction, [`plan`] decides (the version check, the next
//! version, the version row, the audit event), and the backend applies the [`PolicyPlan`] with
//! its own SQL. Also the columns a policy is read from and how a row becomes a record.

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::columns::Columns;
use crate::error::{StoreError, StoreResult};
use crate::governance::{PolicyChange, PolicyRecord, PolicyVersion};
use crate::records::Actor;
use serde_json::{json, Value};
use steward_core::policy::PolicySpec;
use steward_core::{EnvironmentId, KeyId, PolicyId};

/// The columns [`policy`] reads, in its order, from [`FROM`].
pub(crate) const COLUMNS: &str = "p.id, p.env_id, p.version, v.spec, p.created_at, p.updated_at";
/// A live policy row with its current version's row.
pub(crate) const FROM: &str =
    "policies p JOIN policy_versions v ON v.policy_id = p.id AND v.version = p.version";
/// The columns [`version`] reads, in its order (`v` is `policy_versions`).
pub(crate) const VERSION_COLUMNS: &str =
    "v.policy_id, v.version, v.spec, v.change_note, v.created_at, v.created_by";

fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {detail}"))
}

fn spec(raw: &str) -> StoreResult<PolicySpec> {
    serde_json::from_str(raw).map_err(|e| corrupt("policy spec", e))
}

/// One row of [`COLUMNS`].
pub(crate) fn policy(row: &impl Columns) -> StoreResult<PolicyRecord> {
    Ok(PolicyRecord {
        id: row.id(0, PolicyId::parse)?,
        env_id: row.id(1, EnvironmentId::parse)?,
        version: row.int(2)?,
        spec: spec(&row.get::<String>(3)?)?,
        created_at: row.millis(4)?,
        updated_at: row.millis(5)?,
    })
}

/// One row of [`VERSION_COLUMNS`].
pub(crate) fn version(row: &impl Columns) -> StoreResult<PolicyVersion> {
    Ok(PolicyVersion {
        policy_id: row.id(0, PolicyId::parse)?,
        version: row.int(1)?,
        spec: row
            .get::<Option<String>>(2)?
            .map(|raw| spec(&raw))
            .transpose()?,
        change_note: row.get(3)?,
        created_at: row.millis(4)?,
        created_by: row
            .get::<Option<String>>(5)?
            .map(|k| KeyId::parse(&k).map_err(|e| corrupt("id", e)))
            .transpose()?,
    })
}

/// How the live `policies` row moves.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LiveRow {
    /// A new row at version 1, called `name`.
    Insert { name: String },
    /// The row moves from version `from` to the plan's version, called `name`.
    Update { from: u32, name: String },
    /// The row is marked deleted at the plan's (tombstone) version.
    Delete,
}

/// Everything one change of a policy writes, in one transaction: the live row's move, the
/// new version row (`spec` is `None` for a tombstone), and the audit event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PolicyPlan {
    pub env_id: EnvironmentId,
    pub id: PolicyId,
    pub live: LiveRow,
    pub version: u32,
    /// The version's spec as stored (JSON text); `None` for a tombstone.
    pub spec: Option<String>,
    pub note: Option<String>,
    pub actor: Actor,
    pub entry: AuditEntry,
}

/// What the audit log says about a policy version.
fn audit_view(version: u32, spec: &PolicySpec, note: Option<&str>) -> Value {
    json!({"version": version, "spec": spec, "changeNote": note})
}

fn spec_text(spec: &PolicySpec) -> StoreResult<String> {
    serde_json::to_string(spec).map_err(|e| corrupt("policy spec", e))
}

/// The plan for `change` in environment `env`, given the live policy it names as read in the
/// change's transaction (`current`; a create ignores it, and its insert refuses a duplicate).
/// An update of a policy that is not live is `NotFound`; an update or a delete of a policy not
/// at the version it expects is `VersionConflict` (a delete of one that is not live finds 0).
pub(crate) fn plan(
    env: &EnvironmentId,
    change: &PolicyChange,
    current: Option<&PolicyRecord>,
    note: Option<&str>,
    actor: &Actor,
) -> StoreResult<PolicyPlan> {
    let base = |id: &PolicyId, live, version, spec, entry| PolicyPlan {
        env_id: env.clone(),
        id: id.clone(),
        live,
        version,
        spec,
        note: note.map(str::to_string),
        actor: actor.clone(),
        entry,
    };
    match change {
        PolicyChange::Create(p) => Ok(base(
            &p.id,
            LiveRow::Insert {
                name: p.spec.name.clone(),
            },
            1,
            Some(spec_text(&p.spec)?),
            AuditEntry::new(AuditKind::PolicyCreated, p.env_id.as_str(), p.id.as_str())
                .after(audit_view(1, &p.spec, note)),
        )),
        PolicyChange::Update {
            id,
            expected_version,
            spec,
        } => {
            let current = current.ok_or(StoreError::NotFound { what: "policy" })?;
            let expected = *expected_version;
            if current.version != expected {
                return Err(StoreError::VersionConflict {
                    expected,
                    found: current.version,
                });
            }
            let version = expected + 1;
            Ok(base(
                id,
                LiveRow::Update {
                    from: expected,
                    name: spec.name.clone(),
                },
                version,
                Some(spec_text(spec)?),
                AuditEntry::new(AuditKind::PolicyUpdated, env.as_str(), id.as_str())
                    .before(audit_view(expected, &current.spec, None))
                    .after(audit_view(version, spec, note)),
            ))
        }
        PolicyChange::Delete {
            id,
            expected_version,
        } => {
            let expected = *expected_version;
            let current = current.filter(|c| c.version == expected).ok_or_else(|| {
                StoreError::VersionConflict {
                    expected,
                    found: current.map_or(0, |c| c.version),
                }
            })?;
            let tombstone = current.version + 1;
            Ok(base(
                id,
                LiveRow::Delete,
                tombstone,
                None,
                AuditEntry::new(AuditKind::PolicyDeleted, env.as_str(), id.as_str())
                    .before(audit_view(current.version, &current.spec, None))
                    .after(json!({"version": tombstone, "deleted": true, "changeNote": note})),
            ))
        }
    }
}

/// Deleting `current` at the version it is at (a single delete, which expects none).
pub(crate) fn delete_of(current: &PolicyRecord) -> PolicyChange {
    PolicyChange::Delete {
        id: current.id.clone(),
        expected_version: current.version,
    }
}

/// The policy `change` names.
pub(crate) fn named(change: &PolicyChange) -> &PolicyId {
    match change {
        PolicyChange::Create(p) => &p.id,
        PolicyChange::Update { id, .. } | PolicyChange::Delete { id, .. } => id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steward_core::Millis;

    fn record(version: u32) -> PolicyRecord {
        let body = json!({"name": "p", "matchKind": "action", "matchActionName": "refund",
                          "effect": "require_approval"});
        let spec =
            PolicySpec::from_create(body.as_object().expect("object")).expect("a valid policy");
        PolicyRecord {
            id: PolicyId::from_unique("p"),
            env_id: EnvironmentId::from_unique("e"),
            version,
            spec,
            created_at: Millis(1),
            updated_at: Millis(1),
        }
    }

    #[test]
    fn an_update_or_delete_off_its_expected_version_is_a_conflict_and_plans_nothing() {
        let current = record(3);
        let actor = Actor::system(Millis(5));
        let env = current.env_id.clone();
        let update = PolicyChange::Update {
            id: current.id.clone(),
            expected_version: 2,
            spec: current.spec.clone(),
        };
        let delete = PolicyChange::Delete {
            id: current.id.clone(),
            expected_version: 2,
        };
        for change in [&update, &delete] {
            assert!(matches!(
                plan(&env, change, Some(&current), None, &actor),
                Err(StoreError::VersionConflict {
                    expected: 2,
                    found: 3
                })
            ));
        }
        assert!(matches!(
            plan(&env, &delete, None, None, &actor),
            Err(StoreError::VersionConflict {
                expected: 2,
                found: 0
            })
        ));
        assert!(matches!(
            plan(&env, &update, None, None, &actor),
            Err(StoreError::NotFound { what: "policy" })
        ));
    }

    #[test]
    fn a_delete_at_its_version_plans_the_next_version_as_a_tombstone() {
        let current = record(3);
        let change = PolicyChange::Delete {
            id: current.id.clone(),
            expected_version: 3,
        };
        let plan = plan(
            &current.env_id,
            &change,
            Some(&current),
            Some("gone"),
            &Actor::system(Millis(5)),
        )
        .expect("a delete at its version is planned");
        assert_eq!(plan.live, LiveRow::Delete);
        assert_eq!((plan.version, plan.spec), (4, None));
        assert_eq!(plan.entry.kind, AuditKind::PolicyDeleted);
        assert_eq!(plan.entry.after.as_ref().unwrap()["version"], 4);
    }
}
