//! Per-key budgets: what a key may start in a calendar month, the same in every backend.
//!
//! A budget is held as one impact limit row of its own (period `month`, dimension
//! `invocations`), hidden from the impact-limits API and from the impact tally, so that its
//! reservations live in `impact_reservations` next to every other and are settled by the same
//! statements (`change_effect`, recovery): success consumes, failure or rejection releases,
//! unknown keeps them as exposure. The backend reads the key's budget and its usage in the
//! submission's transaction, [`admit`] decides, and the backend writes the reservation or
//! answers the refusal ([`crate::SubmitOutcome::BudgetRefused`]) with nothing written.

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::records::{Submission, SubmitOutcome};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use steward_core::impact::Usage;
use steward_core::{EnvironmentId, KeyId, LimitId, Millis};

/// The one dimension a budget caps: each new invocation the key starts counts 1.
pub const BUDGET_DIMENSION_INVOCATIONS: &str = "invocations";

/// What one new invocation costs against its key's `invocations` cap.
pub const BUDGET_INVOCATION_UNITS: i64 = 1;

/// The amount recorded on a budget's limit row when it has no `invocations` cap: larger than
/// any real month's use, so the row still counts usage for the budget views.
pub const BUDGET_UNCAPPED_UNITS: i64 = steward_core::impact::LIMIT_AMOUNT_MAX;

/// What a budget caps and how it alerts; `None` caps nothing on that axis.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetSpec {
    /// Stored and reported; Steward prices nothing, so the estimated spend is always 0 cents.
    pub monthly_cost_cents_cap: Option<i64>,
    /// Per dimension, the most it may count in a month; only `invocations` exists.
    pub dimension_caps: BTreeMap<String, i64>,
    /// The share of a cap (0 < t <= 1) past which the view reports `alerting`.
    pub alert_threshold: f64,
    /// A disabled budget counts nothing and refuses nothing.
    pub enabled: bool,
}

impl BudgetSpec {
    /// The `invocations` cap, if any.
    pub fn invocations_cap(&self) -> Option<i64> {
        self.dimension_caps
            .get(BUDGET_DIMENSION_INVOCATIONS)
            .copied()
    }

    /// The caps as stored (`dimension_caps` column), a JSON object.
    pub fn caps_json(&self) -> String {
        json!(self.dimension_caps).to_string()
    }

    /// Reads the stored `dimension_caps` column back.
    pub fn caps_from_json(text: &str) -> Option<BTreeMap<String, i64>> {
        serde_json::from_str(text).ok()
    }

    /// The audit view of the spec (a budget holds no secret).
    pub fn audit_view(&self) -> Value {
        json!({
            "monthlyCostCentsCap": self.monthly_cost_cents_cap,
            "dimensionCaps": self.dimension_caps,
            "alertThreshold": self.alert_threshold,
            "enabled": self.enabled,
        })
    }
}

/// A key's budget as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetRecord {
    pub env_id: EnvironmentId,
    pub key_id: KeyId,
    /// The budget's own (hidden) impact limit row, which its reservations name.
    pub limit_id: LimitId,
    pub spec: BudgetSpec,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// A budget with its `invocations` usage in the month containing "now".
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetStatus {
    pub budget: BudgetRecord,
    pub window_start: Millis,
    pub usage: Usage,
}

/// Why a budget refused to admit an invocation. Nothing is written for a refused submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetRefusal {
    /// Even if every unknown effect turned out not to have happened, the cap has no room.
    Exceeded { cap: i64, used: i64 },
    /// Room exists only if some unknown effects did not happen: they must be reconciled first.
    ReconciliationRequired { cap: i64, used: i64, exposure: i64 },
}

impl BudgetRefusal {
    /// The details the caller hears (and the audit event's `after`).
    pub fn details(&self) -> Value {
        match self {
            BudgetRefusal::Exceeded { cap, used } => json!({
                "dimension": BUDGET_DIMENSION_INVOCATIONS, "cap": cap, "used": used,
            }),
            BudgetRefusal::ReconciliationRequired {
                cap,
                used,
                exposure,
            } => json!({
                "dimension": BUDGET_DIMENSION_INVOCATIONS, "cap": cap, "used": used,
                "unknownExposure": exposure,
            }),
        }
    }
}

/// The admission rule: may one more invocation start under `cap` with `usage` this month?
/// Unknown exposure counts as used; when only it stands in the way, the answer is
/// `ReconciliationRequired` rather than `Exceeded`, since reconciling may free room.
pub fn admit(cap: Option<i64>, usage: Usage) -> Result<(), BudgetRefusal> {
    let Some(cap) = cap else {
        return Ok(());
    };
    if usage.fits(cap, BUDGET_INVOCATION_UNITS) {
        return Ok(());
    }
    let known = Usage {
        exposure: 0,
        ..usage
    };
    if usage.exposure > 0 && known.fits(cap, BUDGET_INVOCATION_UNITS) {
        return Err(BudgetRefusal::ReconciliationRequired {
            cap,
            used: usage.used(),
            exposure: usage.exposure,
        });
    }
    Err(BudgetRefusal::Exceeded {
        cap,
        used: usage.used(),
    })
}

/// What admitting a submission under its key's live, enabled budget writes, decided from the
/// budget's status as read in the submission's transaction.
pub(crate) enum Admission {
    /// Refused: append `entry` and nothing else; the submission answers `outcome`.
    Refuse {
        entry: AuditEntry,
        outcome: Box<SubmitOutcome>,
    },
    /// Reserve [`BUDGET_INVOCATION_UNITS`] of the budget's limit in its window for the
    /// submission's effect, then append `entry`.
    Reserve { entry: AuditEntry },
}

/// The admission of submission `s` under `status` ([`admit`] on its cap and usage).
pub(crate) fn admission(s: &Submission, status: &BudgetStatus) -> Admission {
    match admit(status.budget.spec.invocations_cap(), status.usage) {
        Err(refusal) => Admission::Refuse {
            entry: AuditEntry::new(
                AuditKind::BudgetRefused,
                s.env_id.as_str(),
                s.actor.as_str(),
            )
            .after(refusal.details()),
            outcome: Box::new(SubmitOutcome::BudgetRefused(refusal)),
        },
        Ok(()) => Admission::Reserve {
            entry: AuditEntry::new(
                AuditKind::BudgetReserved,
                s.env_id.as_str(),
                s.effect_id.as_str(),
            )
            .after(json!({
                "keyId": s.actor, "limitId": status.budget.limit_id,
                "amount": BUDGET_INVOCATION_UNITS,
            })),
        },
    }
}

/// The `budget.put` event of `key`'s budget set to `spec`; `before` is the live budget's view,
/// if there was one.
pub(crate) fn put_entry(
    env: &EnvironmentId,
    key: &KeyId,
    before: Option<Value>,
    spec: &BudgetSpec,
) -> AuditEntry {
    AuditEntry::new(AuditKind::BudgetPut, env.as_str(), key.as_str())
        .before(before)
        .after(spec.audit_view())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(consumed: i64, reserved: i64, exposure: i64) -> Usage {
        Usage {
            consumed,
            reserved,
            exposure,
        }
    }

    #[test]
    fn admission_counts_every_state_and_names_what_blocks_it() {
        assert_eq!(admit(None, usage(5, 5, 5)), Ok(()));
        assert_eq!(admit(Some(10), usage(4, 5, 0)), Ok(()));
        assert_eq!(
            admit(Some(10), usage(5, 5, 0)),
            Err(BudgetRefusal::Exceeded { cap: 10, used: 10 })
        );
        assert_eq!(
            admit(Some(10), usage(5, 3, 2)),
            Err(BudgetRefusal::ReconciliationRequired {
                cap: 10,
                used: 10,
                exposure: 2
            })
        );
        // Exposure is not what blocks it when the known usage alone fills the cap.
        assert_eq!(
            admit(Some(10), usage(7, 3, 2)),
            Err(BudgetRefusal::Exceeded { cap: 10, used: 12 })
        );
        assert_eq!(
            admit(Some(0), usage(0, 0, 0)),
            Err(BudgetRefusal::Exceeded { cap: 0, used: 0 })
        );
    }
}
