//! Governance rows: approval policies with their immutable versions, impact limits with their
//! usage, and the reservations effects hold against them.

use crate::records::Actor;
use steward_core::impact::{LimitSpec, Quantity, Refusal, Usage};
use steward_core::policy::{Policy, PolicySpec};
use steward_core::{EffectId, EnvironmentId, KeyId, LimitId, Millis, PolicyId};

/// A live approval policy at its current version.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRecord {
    pub id: PolicyId,
    pub env_id: EnvironmentId,
    pub version: u32,
    pub spec: PolicySpec,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl PolicyRecord {
    /// The policy as the evaluator sees it.
    pub fn policy(&self) -> Policy {
        Policy {
            id: self.id.clone(),
            version: self.version,
            created_at: self.created_at,
            spec: self.spec.clone(),
        }
    }
}

/// One change of a policy set applied as a whole ([`crate::Policies::apply_policy_set`]).
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyChange {
    /// A new policy at version 1 (its `version` field is ignored).
    Create(PolicyRecord),
    /// A new version of a live policy, which must still be at `expected_version`.
    Update {
        id: PolicyId,
        expected_version: u32,
        spec: PolicySpec,
    },
    /// A live policy deleted (a tombstone version appended), which must still be at
    /// `expected_version`.
    Delete { id: PolicyId, expected_version: u32 },
}

/// A whole policy set's change, planned against the set as it was read: `expected` is every
/// live policy of the environment with its version at that read. Applied in one transaction
/// only if the live set is still exactly `expected`; otherwise nothing is written.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySetChange {
    pub env_id: EnvironmentId,
    pub expected: Vec<(PolicyId, u32)>,
    pub changes: Vec<PolicyChange>,
}

impl PolicySetChange {
    /// `Ok` when `live` (the environment's live policies, read in the applying transaction) is
    /// exactly the set this change was planned against; else the first difference as a
    /// `VersionConflict` (a policy missing on either side is version 0 there).
    pub(crate) fn check_expected(&self, live: &[PolicyRecord]) -> crate::StoreResult<()> {
        let mut planned: Vec<(&str, u32)> = self
            .expected
            .iter()
            .map(|(id, version)| (id.as_str(), *version))
            .collect();
        let mut found: Vec<(&str, u32)> = live.iter().map(|p| (p.id.as_str(), p.version)).collect();
        planned.sort_unstable();
        found.sort_unstable();
        if planned == found {
            return Ok(());
        }
        let first_difference = planned
            .iter()
            .map(|&(id, version)| {
                let now = found.iter().find(|f| f.0 == id).map_or(0, |f| f.1);
                (version, now)
            })
            .chain(found.iter().map(|&(id, version)| {
                let then = planned.iter().find(|p| p.0 == id).map_or(0, |p| p.1);
                (then, version)
            }))
            .find(|(then, now)| then != now)
            .unwrap_or((0, 0));
        Err(crate::StoreError::VersionConflict {
            expected: first_difference.0,
            found: first_difference.1,
        })
    }

    /// The changes in the order they are written: deletions, then updates, then creations, so
    /// that a name one policy gives up is free before another takes it.
    pub(crate) fn in_write_order(&self) -> Vec<&PolicyChange> {
        let rank = |c: &PolicyChange| match c {
            PolicyChange::Delete { .. } => 0,
            PolicyChange::Update { .. } => 1,
            PolicyChange::Create(_) => 2,
        };
        let mut changes: Vec<&PolicyChange> = self.changes.iter().collect();
        changes.sort_by_key(|c| rank(c));
        changes
    }
}

/// One immutable version of a policy. Deleting a policy appends a tombstone (`spec` is `None`);
/// every version stays readable after deletion.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyVersion {
    pub policy_id: PolicyId,
    pub version: u32,
    pub spec: Option<PolicySpec>,
    pub change_note: Option<String>,
    pub created_at: Millis,
    pub created_by: Option<KeyId>,
}

impl PolicyVersion {
    pub fn is_tombstone(&self) -> bool {
        self.spec.is_none()
    }
}

/// An impact limit.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitRecord {
    pub id: LimitId,
    pub env_id: EnvironmentId,
    pub spec: LimitSpec,
    pub archived_at: Option<Millis>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl LimitRecord {
    /// What the audit log records of a limit.
    pub(crate) fn audit_view(&self) -> serde_json::Value {
        let s = &self.spec;
        serde_json::json!({
            "name": s.name, "dimension": s.dimension, "unit": s.unit,
            "period": s.period.as_str(), "amount": s.amount, "actionName": s.action_name,
            "resourcePrefix": s.resource_prefix,
            "archived": self.archived_at.is_some(),
        })
    }
}

/// A limit with its usage in the window that contains "now".
#[derive(Debug, Clone, PartialEq)]
pub struct LimitStatus {
    pub limit: LimitRecord,
    pub window_start: Millis,
    pub usage: Usage,
}

impl LimitStatus {
    pub fn available(&self) -> i64 {
        self.usage.available(self.limit.spec.amount)
    }
}

/// A request to reserve every applicable limit for one effect, just before its dispatch.
#[derive(Debug, Clone)]
pub struct ImpactRequest {
    pub env_id: EnvironmentId,
    pub effect_id: EffectId,
    pub action_name: String,
    /// What the effect changes (`LimitSpec::resource_prefix` narrows by it); `None` when it
    /// cannot be told.
    pub resource: Option<String>,
    pub quantities: Vec<Quantity>,
    pub actor: Actor,
}

/// What reserving found.
#[derive(Debug, Clone, PartialEq)]
pub enum ReserveOutcome {
    /// Every applicable limit now holds a reservation for the effect (possibly none applied):
    /// `(limit, amount)` per limit.
    Reserved(Vec<(LimitId, i64)>),
    /// The effect already holds its reservations (a dispatch resumed after a restart or a halt):
    /// nothing was added.
    AlreadyReserved,
    /// A limit refuses the effect; nothing was reserved.
    Refused {
        limit_id: LimitId,
        limit_name: String,
        refusal: Refusal,
    },
}

/// Sets the effect's reservations under every limit of one dimension and unit to an actual
/// amount and state (`$1` amount, `$2` state, `$3` time, `$4` effect, `$5` dimension, `$6` unit).
pub(crate) const SETTLE_ACTUAL_SQL_POSTGRES: &str =
    "UPDATE impact_reservations SET amount = $1, state = $2, updated_at = $3
     WHERE effect_id = $4 AND limit_id IN (SELECT id FROM impact_limits WHERE dimension = $5 AND unit = $6)";
/// [`SETTLE_ACTUAL_SQL_POSTGRES`] for SQLite.
pub(crate) const SETTLE_ACTUAL_SQL_SQLITE: &str =
    "UPDATE impact_reservations SET amount = ?1, state = ?2, updated_at = ?3
     WHERE effect_id = ?4 AND limit_id IN (SELECT id FROM impact_limits WHERE dimension = ?5 AND unit = ?6)";

/// An actual amount is consumed; an actual of nothing releases the reservation.
pub(crate) fn actual_state(
    a: &crate::records::ActualImpact,
) -> steward_core::impact::ReservationState {
    if a.amount > 0 {
        steward_core::impact::ReservationState::Consumed
    } else {
        steward_core::impact::ReservationState::Released
    }
}

/// The `impact.actual` audit event of a manual resolution `c` that recorded `actual` and
/// changed `changed` reservations.
pub(crate) fn actual_entry(
    c: &crate::records::EffectChange,
    actual: &[crate::records::ActualImpact],
    changed: usize,
) -> crate::audit_entry::AuditEntry {
    crate::audit_entry::AuditEntry::new(
        crate::audit_entry::AuditKind::ImpactActual,
        c.env_id.as_str(),
        c.effect_id.as_str(),
    )
    .after(actual_audit(actual, changed))
}

/// The `impact.actual` audit event's record.
pub(crate) fn actual_audit(
    actual: &[crate::records::ActualImpact],
    changed: usize,
) -> serde_json::Value {
    serde_json::json!({
        "actual": actual.iter()
            .map(|a| serde_json::json!({"dimension": a.dimension, "unit": a.unit, "amount": a.amount}))
            .collect::<Vec<_>>(),
        "reservations": changed,
    })
}
