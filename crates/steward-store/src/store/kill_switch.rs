//! The kill switch: halting an environment, and the work a halt parked.

use crate::error::StoreResult;
use crate::records::{Actor, Environment, InvocationRecord};
use async_trait::async_trait;
use steward_core::{EnvironmentId, UnkeyedInvokes};

/// What an operator sets an environment's kill switch to: halted (with a reason, if given) or
/// resumed. A resumed environment keeps no reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HaltChange<'a> {
    pub env: &'a EnvironmentId,
    pub halted: bool,
    reason: Option<&'a str>,
}

impl<'a> HaltChange<'a> {
    /// Halts `env`, for `reason`.
    pub fn halt(env: &'a EnvironmentId, reason: Option<&'a str>) -> Self {
        HaltChange {
            env,
            halted: true,
            reason,
        }
    }

    /// Resumes `env`.
    pub fn resume(env: &'a EnvironmentId) -> Self {
        HaltChange {
            env,
            halted: false,
            reason: None,
        }
    }

    /// The reason stored with the change: `None` when resuming.
    pub fn reason(&self) -> Option<&'a str> {
        self.reason
    }
}

/// What an operator sets an environment's `unkeyedInvokes` to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnkeyedChange<'a> {
    pub env: &'a EnvironmentId,
    pub setting: UnkeyedInvokes,
}

/// Halting and resuming an environment, and its other switch: whether governed invokes without
/// any key are refused. The halt itself is enforced by `Effects::change_effect`, in the
/// transaction that would record an attempt.
#[async_trait]
pub trait KillSwitch: Send + Sync {
    /// Halts (with its reason) or resumes the environment `change` names. While it is halted,
    /// `change_effect` refuses every `AttemptChange::Begin` with `Halted` in the same
    /// transaction that would record the attempt, so nothing committed after the halt is sent.
    async fn set_halted(&self, change: HaltChange<'_>, actor: &Actor) -> StoreResult<Environment>;
    /// Sets what a governed HTTP invoke without an operation key or `Idempotency-Key` gets in
    /// the environment, with its audit event (`environment.updated`, before and after), and
    /// answers the environment as it now stands. Invokes read it with their key
    /// (`Effects::invoke_context`, `Identity::caller`), so it holds from the next request on.
    async fn set_unkeyed_invokes(
        &self,
        change: UnkeyedChange<'_>,
        actor: &Actor,
    ) -> StoreResult<Environment>;
    /// Every invocation of the environment whose effect is `ready` (allowed, never attempted),
    /// oldest first: the work a halt parked.
    async fn ready_invocations(&self, env: &EnvironmentId) -> StoreResult<Vec<InvocationRecord>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_halt_keeps_its_reason_and_a_resume_keeps_none() {
        let env = EnvironmentId::from_unique("env");
        let halt = HaltChange::halt(&env, Some("incident"));
        assert!(halt.halted);
        assert_eq!(halt.reason(), Some("incident"));
        let resume = HaltChange::resume(&env);
        assert!(!resume.halted);
        assert_eq!(resume.reason(), None);
    }
}
