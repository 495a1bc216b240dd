//! Holds as stored, read the same way on both backends, and the SQL both use to ask whether a
//! hold covers an effect.

use crate::columns::Columns;
use crate::error::StoreResult;
use crate::records::HoldRecord;
use steward_core::{EnvironmentId, HoldId};

/// The columns [`hold`] reads, in order.
pub(crate) const HOLD_COLUMNS: &str =
    "id, env_id, action_name, operation_key, reason, created_by, created_at";

/// Whether a hold of the environment (`?1`/`$1`) covers the invocation of the effect (`?2`/`$2`):
/// one names its action (or none), and its operation key (or none). The placeholder style is
/// the backend's (`{p1}`, `{p2}`).
pub(crate) fn covered_sql(p1: &str, p2: &str) -> String {
    format!(
        "SELECT EXISTS (SELECT 1 FROM holds h JOIN invocations i ON i.env_id = h.env_id
            WHERE h.env_id = {p1}
              AND i.id = (SELECT invocation_id FROM effects WHERE id = {p2})
              AND (h.action_name IS NULL OR h.action_name = i.action_name)
              AND (h.operation_key IS NULL OR h.operation_key = i.operation_key))"
    )
}

/// True (as SQL) when a hold covers the invocation of effect `e` (the sweeps' alias): a held
/// `ready` orphan is kept `ready` (taken over, like approved work) rather than settled `failed`,
/// so that releasing the hold still runs it once after a restart or a replica's death.
pub(crate) const HELD_EFFECT: &str = "EXISTS (SELECT 1 FROM holds h
            JOIN invocations i ON i.id = e.invocation_id
            WHERE h.env_id = e.env_id
              AND (h.action_name IS NULL OR h.action_name = i.action_name)
              AND (h.operation_key IS NULL OR h.operation_key = i.operation_key))";

/// A hold row, columns as [`HOLD_COLUMNS`].
pub(crate) fn hold(row: &impl Columns) -> StoreResult<HoldRecord> {
    Ok(HoldRecord {
        id: row.id(0, HoldId::parse)?,
        env_id: row.id(1, EnvironmentId::parse)?,
        action_name: row.get(2)?,
        operation_key: row.get(3)?,
        reason: row.get(4)?,
        created_by: row.get(5)?,
        created_at: row.millis(6)?,
    })
}
