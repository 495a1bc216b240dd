//! Fault injection for refund writes.
//!
//! A [`FaultPlan`] is armed with `POST /_fixture/faults` (or
//! [`FixtureHandle::set_faults`](crate::FixtureHandle::set_faults)) and applies
//! to the next `count` refund *writes*: `POST /v1/refunds` requests that passed
//! authentication and validation and are not idempotent replays. Once `count`
//! writes have consumed it, the fixture is back to [`FaultMode::None`].
//!
//! The modes split on one question: was the refund committed?
//!
//! | mode                  | committed | client sees                                   |
//! |-----------------------|-----------|-----------------------------------------------|
//! | `none`                | yes       | 200 + refund                                  |
//! | `hold_after_commit`   | yes       | 200 + refund, after `ms` milliseconds         |
//! | `drop_after_commit`   | yes       | connection closed, no HTTP response           |
//! | `error_after_commit`  | yes       | 500 `api_error`, no `Stripe-Should-Retry`     |
//! | `error_before_commit` | no        | 500 `api_error`, `Stripe-Should-Retry: true`  |
//! | `reject`              | no        | 402 `card_error` / `charge_already_refunded`  |
//!
//! Committed outcomes (and the 402) are saved under the request's
//! `Idempotency-Key`, so a resend with the same key replays them instead of
//! writing again. `error_before_commit` saves nothing, exactly like Stripe.

use serde::{Deserialize, Serialize};

/// What to do to the next refund write(s).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FaultMode {
    /// Behave normally.
    None,
    /// Commit, sleep `ms` milliseconds, then answer 200 normally.
    HoldAfterCommit,
    /// Commit, then close the connection without writing any HTTP response.
    DropAfterCommit,
    /// Commit, then answer 500 `api_error` with no `Stripe-Should-Retry` header.
    ErrorAfterCommit,
    /// Commit nothing; answer 500 `api_error` (+ `Stripe-Should-Retry: true`
    /// when [`FaultPlan::should_retry_header`] is set).
    ErrorBeforeCommit,
    /// Commit nothing; answer 402 `card_error` / `charge_already_refunded`.
    Reject,
}

/// A fault to inject, as posted to `POST /_fixture/faults`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultPlan {
    /// Which fault.
    pub mode: FaultMode,
    /// Milliseconds to hold, for [`FaultMode::HoldAfterCommit`].
    #[serde(default)]
    pub ms: u64,
    /// How many refund writes the fault applies to (default 1; 0 disarms).
    #[serde(default = "one")]
    pub count: u32,
    /// For [`FaultMode::ErrorBeforeCommit`]: send `Stripe-Should-Retry: true`
    /// (default true).
    #[serde(default = "yes")]
    pub should_retry_header: bool,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

impl FaultPlan {
    /// No fault.
    pub fn none() -> Self {
        FaultPlan::new(FaultMode::None)
    }

    /// A plan for one write in the given mode (`ms` 0, header on).
    pub fn new(mode: FaultMode) -> Self {
        FaultPlan {
            mode,
            ms: 0,
            count: 1,
            should_retry_header: true,
        }
    }

    /// Builder: apply to `count` writes.
    pub fn times(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    /// Builder: hold for `ms` milliseconds (for `hold_after_commit`).
    pub fn hold_ms(mut self, ms: u64) -> Self {
        self.ms = ms;
        self
    }
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan::none()
    }
}

/// The armed plan and how many writes it still applies to.
#[derive(Clone, Debug, Default)]
pub(crate) struct FaultState {
    plan: Option<FaultPlan>,
    remaining: u32,
}

impl FaultState {
    /// Arms `plan` (replacing any previous one).
    pub fn arm(&mut self, plan: FaultPlan) {
        if plan.mode == FaultMode::None || plan.count == 0 {
            *self = FaultState::default();
        } else {
            self.remaining = plan.count;
            self.plan = Some(plan);
        }
    }

    /// Consumes the fault for one refund write; `None` means behave normally.
    pub fn take(&mut self) -> Option<FaultPlan> {
        let plan = self.plan.clone()?;
        self.remaining = self.remaining.saturating_sub(1);
        if self.remaining == 0 {
            self.plan = None;
        }
        Some(plan)
    }

    /// The plan still armed (mode `none` when disarmed) and the writes left.
    pub fn status(&self) -> (FaultPlan, u32) {
        match &self.plan {
            Some(plan) => (plan.clone(), self.remaining),
            None => (FaultPlan::none().times(0), 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_defaults_from_json() {
        let plan: FaultPlan = serde_json::from_str(r#"{"mode":"error_before_commit"}"#).unwrap();
        assert_eq!(plan.mode, FaultMode::ErrorBeforeCommit);
        assert_eq!(plan.count, 1);
        assert_eq!(plan.ms, 0);
        assert!(plan.should_retry_header);
    }

    #[test]
    fn fault_is_consumed_after_count_writes() {
        let mut state = FaultState::default();
        state.arm(FaultPlan::new(FaultMode::Reject).times(2));
        assert_eq!(state.take().map(|p| p.mode), Some(FaultMode::Reject));
        assert_eq!(state.take().map(|p| p.mode), Some(FaultMode::Reject));
        assert!(state.take().is_none());
        assert_eq!(state.status().0.mode, FaultMode::None);
    }

    #[test]
    fn zero_count_or_none_disarms() {
        let mut state = FaultState::default();
        state.arm(FaultPlan::new(FaultMode::Reject).times(0));
        assert!(state.take().is_none());
        state.arm(FaultPlan::new(FaultMode::Reject));
        state.arm(FaultPlan::none());
        assert!(state.take().is_none());
    }
}
