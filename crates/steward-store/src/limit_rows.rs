//! Impact limits, the same in every backend: the columns read, how a row becomes a
//! [`LimitRecord`], how a window's sums become its [`Usage`], and what the audit log records.
//! The backends keep only their SQL (`sqlite/limits.rs`, `postgres/limits.rs`); the tally
//! itself is `crate::tally`.

use crate::audit_entry::{AuditEntry, AuditKind};
use crate::columns::Columns;
use crate::error::{StoreError, StoreResult};
use crate::governance::LimitRecord;
use serde_json::json;
use steward_core::impact::{LimitSpec, Period, ReservationState, Usage};
use steward_core::{EnvironmentId, LimitId, Millis};

/// The columns [`limit`] reads, in its order.
pub(crate) const COLUMNS: &str = "id, env_id, name, dimension, unit, currency, period, amount, action_name, archived_at, created_at, updated_at, resource_prefix";

/// Leaves out the limit rows that hold per-key budgets (`crate::budget`): they are reserved at
/// admission, never by the impact tally, and are read through the budgets API only.
pub(crate) const NOT_A_BUDGET: &str = "id NOT IN (SELECT limit_id FROM budgets)";

fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {detail}"))
}

/// One row of [`COLUMNS`].
pub(crate) fn limit(row: &impl Columns) -> StoreResult<LimitRecord> {
    let period: String = row.get(6)?;
    Ok(LimitRecord {
        id: row.id(0, LimitId::parse)?,
        env_id: row.id(1, EnvironmentId::parse)?,
        spec: LimitSpec {
            name: row.get(2)?,
            dimension: row.get(3)?,
            unit: row.get(4)?,
            currency: row.get(5)?,
            period: Period::parse(&period).ok_or_else(|| corrupt("period", &period))?,
            amount: row.get(7)?,
            action_name: row.get(8)?,
            resource_prefix: row.get(12)?,
        },
        archived_at: row.get::<Option<i64>>(9)?.map(Millis),
        created_at: row.millis(10)?,
        updated_at: row.millis(11)?,
    })
}

/// Counts the sum of a limit's reservations in `state` (one row of a window's sums by state)
/// into its usage.
pub(crate) fn add_sum(usage: &mut Usage, state: &str, sum: i64) -> StoreResult<()> {
    match ReservationState::parse(state) {
        Some(ReservationState::Consumed) => usage.consumed = sum,
        Some(ReservationState::Reserved) => usage.reserved = sum,
        Some(ReservationState::Exposure) => usage.exposure = sum,
        Some(ReservationState::Released) => {}
        None => return Err(corrupt("reservation state", state)),
    }
    Ok(())
}

/// A limit created.
pub(crate) fn created(l: &LimitRecord) -> AuditEntry {
    AuditEntry::new(
        AuditKind::ImpactLimitCreated,
        l.env_id.as_str(),
        l.id.as_str(),
    )
    .after(l.audit_view())
}

/// A limit renamed or given another amount, from `before` to `after`.
pub(crate) fn updated(before: &LimitRecord, after: &LimitRecord) -> AuditEntry {
    AuditEntry::new(
        AuditKind::ImpactLimitUpdated,
        after.env_id.as_str(),
        after.id.as_str(),
    )
    .before(before.audit_view())
    .after(after.audit_view())
}

/// A limit archived.
pub(crate) fn archived(env: &EnvironmentId, id: &LimitId) -> AuditEntry {
    AuditEntry::new(AuditKind::ImpactLimitArchived, env.as_str(), id.as_str())
        .after(json!({"archived": true}))
}
