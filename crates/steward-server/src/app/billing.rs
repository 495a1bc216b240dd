//! Billing, as a self-hosted runtime answers it: the calling key's own month (what it recorded,
//! and its budget's cap and room), read from its key's budget (`app/budgets.rs`). Steward bills
//! nothing: the hosted product's plans, invoices, usage history, cost estimate and payment
//! configuration are refused as not offered ([`not_offered`]). Every read needs
//! `impact-limits:read`. `api/billing.rs` is the HTTP door.

use super::{Error, Principal, Result};
use crate::error::codes;
use crate::state::AppState;
use steward_core::impact::Period;
use steward_core::{scopes, KeyId, Millis};

/// Long enough from a month's first instant to land in the next month, in milliseconds.
const MONTH_SPAN_MS_MAX: i64 = 32 * 86_400_000;

/// The UTC calendar month containing an instant: `start` inclusive, `end` exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Month {
    pub start: Millis,
    pub end: Millis,
}

/// What the calling key recorded this month.
#[derive(Debug)]
pub struct Usage {
    pub key_id: KeyId,
    pub month: Month,
    pub invocations: u64,
}

/// The calling key's cap this month and what it has used of it.
#[derive(Debug)]
pub struct Quota {
    pub key_id: KeyId,
    pub month: Month,
    /// Whether an enabled budget caps the key.
    pub budgeted: bool,
    /// The budget's invocations cap, if it has one.
    pub cap: Option<i64>,
    pub used: i64,
    /// Invocations whose outcome is unknown, still held against the cap.
    pub exposure: i64,
}

impl Quota {
    /// What is left of the cap (never below 0), if there is a cap.
    pub fn remaining(&self) -> Option<i64> {
        self.cap.map(|cap| cap.saturating_sub(self.used).max(0))
    }
}

/// The UTC calendar month containing `now`.
pub fn month(now: Millis) -> Month {
    let start = Period::Month.window_start(now);
    let end = Period::Month.window_start(Millis(start.0 + MONTH_SPAN_MS_MAX));
    Month { start, end }
}

/// What the principal's key recorded this month.
pub async fn current_usage(state: &AppState, principal: &Principal) -> Result<Usage> {
    principal.require(scopes::IMPACT_LIMITS_READ)?;
    let month = month(state.clock.now());
    let invocations = state
        .store
        .key_invocations_since(&principal.env.id, &principal.key.id, month.start)
        .await?;
    Ok(Usage {
        key_id: principal.key.id.clone(),
        month,
        invocations,
    })
}

/// The principal's key's cap this month (from its enabled budget, if any) and its use of it.
pub async fn quota(state: &AppState, principal: &Principal) -> Result<Quota> {
    principal.require(scopes::IMPACT_LIMITS_READ)?;
    let now = state.clock.now();
    let month = month(now);
    let budget = state
        .store
        .budget(&principal.env.id, &principal.key.id, now)
        .await?
        .filter(|b| b.budget.spec.enabled);
    let (cap, used, exposure) = match &budget {
        Some(b) => (
            b.budget.spec.invocations_cap(),
            b.usage.used(),
            b.usage.exposure,
        ),
        None => {
            let count = state
                .store
                .key_invocations_since(&principal.env.id, &principal.key.id, month.start)
                .await?;
            (None, i64::try_from(count).unwrap_or(i64::MAX), 0)
        }
    };
    Ok(Quota {
        key_id: principal.key.id.clone(),
        month,
        budgeted: budget.is_some(),
        cap,
        used,
        exposure,
    })
}

/// The workspace's alert-only spending target: Steward has none (caps are per key), so this
/// only checks the principal may read billing.
pub fn workspace_budget(principal: &Principal) -> Result<()> {
    principal.require(scopes::IMPACT_LIMITS_READ)?;
    Ok(())
}

/// A hosted product's billing read Steward does not offer (`what`: "invoices", ...): refused
/// with `FEATURE_NOT_AVAILABLE` once the principal is known to be allowed to read billing.
pub fn not_offered(principal: &Principal, what: &str) -> Error {
    if let Err(forbidden) = principal.require(scopes::IMPACT_LIMITS_READ) {
        return forbidden;
    }
    Error::of(
        codes::FEATURE_NOT_AVAILABLE,
        format!("{what} is not offered by Steward: it is self-hosted and bills nothing"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_runs_from_its_first_instant_to_the_next_months() {
        // 2026-02-14T12:00:00Z
        let Month { start, end } = month(Millis(1_771_070_400_000));
        assert_eq!(start.to_rfc3339(), "2026-02-01T00:00:00.000Z");
        assert_eq!(end.to_rfc3339(), "2026-03-01T00:00:00.000Z");
    }
}
