//! The kill switch: halting an environment, and the work a halt parked.

use crate::error::StoreResult;
use crate::records::{Actor, Environment, InvocationRecord};
use async_trait::async_trait;
use steward_core::EnvironmentId;

/// Halting and resuming an environment. The halt itself is enforced by
/// `Effects::change_effect`, in the transaction that would record an attempt.
#[async_trait]
pub trait KillSwitch: Send + Sync {
    /// Halts (`halted = true`, with `reason`) or resumes the environment. While it is halted,
    /// `change_effect` refuses every `AttemptChange::Begin` with `Halted` in the same
    /// transaction that would record the attempt, so nothing committed after the halt is sent.
    async fn set_halted(
        &self,
        env: &EnvironmentId,
        halted: bool,
        reason: Option<&str>,
        actor: &Actor,
    ) -> StoreResult<Environment>;
    /// Every invocation of the environment whose effect is `ready` (allowed, never attempted),
    /// oldest first: the work a halt parked.
    async fn ready_invocations(&self, env: &EnvironmentId) -> StoreResult<Vec<InvocationRecord>>;
}
