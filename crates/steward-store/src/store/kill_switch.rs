//! The kill switch: halting an environment, and the work a halt parked.

use crate::error::StoreResult;
use crate::records::{Actor, Environment, InvocationRecord};
use async_trait::async_trait;
use steward_core::{EnvironmentId, UnkeyedInvokes};

/// Halting and resuming an environment, and its other switch: whether governed invokes without
/// any key are refused. The halt itself is enforced by `Effects::change_effect`, in the
/// transaction that would record an attempt.
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
    /// Sets what a governed HTTP invoke without an operation key or `Idempotency-Key` gets in
    /// the environment, with its audit event (`environment.updated`, before and after), and
    /// answers the environment as it now stands. Invokes read it with their key
    /// (`Effects::invoke_context`, `Identity::caller`), so it holds from the next request on.
    async fn set_unkeyed_invokes(
        &self,
        env: &EnvironmentId,
        setting: UnkeyedInvokes,
        actor: &Actor,
    ) -> StoreResult<Environment>;
    /// Every invocation of the environment whose effect is `ready` (allowed, never attempted),
    /// oldest first: the work a halt parked.
    async fn ready_invocations(&self, env: &EnvironmentId) -> StoreResult<Vec<InvocationRecord>>;
}
