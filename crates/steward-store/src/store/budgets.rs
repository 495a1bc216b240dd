//! Per-key budgets (`crate::budget`): admission caps on what one API key starts in a month.

use crate::budget::{BudgetSpec, BudgetStatus};
use crate::error::StoreResult;
use crate::records::Actor;
use async_trait::async_trait;
use steward_core::{EnvironmentId, KeyId, LimitId, Millis};

/// Budgets are written here and enforced inside `Effects::submit` / `submit_and_begin`: a
/// submission that would create an invocation reserves one unit of its key's live, enabled
/// budget in the same transaction, or is refused (`SubmitOutcome::BudgetRefused`) with nothing
/// written. Concurrent submissions by one key serialize on its budget row, so their sum never
/// passes the cap.
#[async_trait]
pub trait Budgets: Send + Sync {
    /// Creates or replaces `key`'s budget (`limit_id` names the hidden limit row a new budget
    /// gets; an existing budget keeps its own). Once it returns, the next submission by `key`
    /// is admitted under `spec`. Reservations already held are untouched.
    async fn put_budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        limit_id: &LimitId,
        spec: &BudgetSpec,
        actor: &Actor,
    ) -> StoreResult<BudgetStatus>;
    /// A live budget with its usage this month.
    async fn budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        now: Millis,
    ) -> StoreResult<Option<BudgetStatus>>;
    /// Every live budget of the environment, by key id.
    async fn list_budgets(
        &self,
        env: &EnvironmentId,
        now: Millis,
    ) -> StoreResult<Vec<BudgetStatus>>;
    /// How many invocations `key` recorded in `env` at or after `since`, whatever became of
    /// them (the billing usage read).
    async fn key_invocations_since(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        since: Millis,
    ) -> StoreResult<u64>;
    /// Removes `key`'s budget: its submissions are no longer capped. Reservations already held
    /// still settle. `false` if it had none.
    async fn delete_budget(
        &self,
        env: &EnvironmentId,
        key: &KeyId,
        actor: &Actor,
    ) -> StoreResult<bool>;
}
