//! Budgets, as the invoke meets them: the refusal of a key whose budget has no room.

use crate::error::{codes, ApiError};
use steward_store::BudgetRefusal;

/// The answer to an invoke its key's budget refused (no invocation exists).
pub fn refused(refusal: &BudgetRefusal) -> ApiError {
    let (code, message) = match refusal {
        BudgetRefusal::Exceeded { cap, .. } => (
            codes::BUDGET_EXCEEDED,
            format!("this key's budget allows {cap} invocations this month and has no room left"),
        ),
        BudgetRefusal::ReconciliationRequired { exposure, .. } => (
            codes::BUDGET_RECONCILIATION_REQUIRED,
            format!(
                "this key's budget has room only if some of its {exposure} unknown effects did not happen: reconcile them first"
            ),
        ),
    };
    ApiError::of(code, message).with_details(refusal.details())
}
