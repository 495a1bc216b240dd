use serde::{Deserialize, Serialize};

/// Why an effect was stopped before it could run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// A human or a policy said no.
    Denied,
    /// The approval ran out before anyone decided.
    Expired,
    /// Steward refused at dispatch (an exhausted limit, a missing quantity).
    Refused,
}

/// Where an effect stands. Each variant is one legal combination of the wire's `stage` and
/// `outcome`; storing this rather than the pair makes illegal pairs unrepresentable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum EffectState {
    /// Parked until a human decides.
    AwaitingApproval,
    /// Accepted and allowed; no attempt recorded yet.
    Ready,
    /// An attempt is durably recorded; the provider may have the request.
    Dispatching,
    /// The provider may or may not have acted. Needs reconciliation; never re-sent silently.
    Unknown,
    /// Settled: the provider acted. `confirmed` when its own record or a read-back proves it.
    Succeeded { confirmed: bool },
    /// Settled: provably never sent, or definitively rejected by the provider.
    Failed,
    /// Stopped before dispatch.
    Rejected { reason: Rejection },
}

/// The wire's effect `stage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    AwaitingApproval,
    Ready,
    Dispatching,
    Reconciling,
    Settled,
    Rejected,
}

/// The wire's effect `outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    NotDispatched,
    Pending,
    Succeeded,
    Failed,
    Unknown,
}

impl EffectState {
    /// Every state, for table tests.
    pub const ALL: [EffectState; 10] = [
        EffectState::AwaitingApproval,
        EffectState::Ready,
        EffectState::Dispatching,
        EffectState::Unknown,
        EffectState::Succeeded { confirmed: true },
        EffectState::Succeeded { confirmed: false },
        EffectState::Failed,
        EffectState::Rejected {
            reason: Rejection::Denied,
        },
        EffectState::Rejected {
            reason: Rejection::Expired,
        },
        EffectState::Rejected {
            reason: Rejection::Refused,
        },
    ];

    pub fn stage(self) -> Stage {
        match self {
            EffectState::AwaitingApproval => Stage::AwaitingApproval,
            EffectState::Ready => Stage::Ready,
            EffectState::Dispatching => Stage::Dispatching,
            EffectState::Unknown => Stage::Reconciling,
            EffectState::Succeeded { .. } | EffectState::Failed => Stage::Settled,
            EffectState::Rejected { .. } => Stage::Rejected,
        }
    }

    pub fn outcome(self) -> Outcome {
        match self {
            EffectState::AwaitingApproval | EffectState::Ready | EffectState::Rejected { .. } => {
                Outcome::NotDispatched
            }
            EffectState::Dispatching => Outcome::Pending,
            EffectState::Unknown => Outcome::Unknown,
            EffectState::Succeeded { .. } => Outcome::Succeeded,
            EffectState::Failed => Outcome::Failed,
        }
    }

    /// True once nothing more can happen to the effect.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            EffectState::Succeeded { .. } | EffectState::Failed | EffectState::Rejected { .. }
        )
    }

    /// True while the effect may have changed the world without Steward knowing the answer:
    /// it counts as exposure and is listed by `unresolved=true`.
    pub fn is_unresolved(self) -> bool {
        matches!(self, EffectState::Dispatching | EffectState::Unknown)
    }

    /// The invocation status that this effect state implies.
    pub fn invocation_status(self) -> crate::InvocationStatus {
        use crate::InvocationStatus as S;
        match self {
            EffectState::AwaitingApproval => S::PendingApproval,
            EffectState::Ready | EffectState::Dispatching => S::Running,
            EffectState::Unknown => S::Unknown,
            EffectState::Succeeded { .. } => S::Succeeded,
            EffectState::Failed
            | EffectState::Rejected {
                reason: Rejection::Refused,
            } => S::Failed,
            EffectState::Rejected {
                reason: Rejection::Denied,
            } => S::Denied,
            EffectState::Rejected {
                reason: Rejection::Expired,
            } => S::Expired,
        }
    }

    /// A short stable name, used in storage and logs.
    pub fn name(self) -> &'static str {
        match self {
            EffectState::AwaitingApproval => "awaiting_approval",
            EffectState::Ready => "ready",
            EffectState::Dispatching => "dispatching",
            EffectState::Unknown => "unknown",
            EffectState::Succeeded { confirmed: true } => "succeeded_confirmed",
            EffectState::Succeeded { confirmed: false } => "succeeded_acknowledged",
            EffectState::Failed => "failed",
            EffectState::Rejected {
                reason: Rejection::Denied,
            } => "denied",
            EffectState::Rejected {
                reason: Rejection::Expired,
            } => "expired",
            EffectState::Rejected {
                reason: Rejection::Refused,
            } => "refused",
        }
    }

    /// The inverse of [`EffectState::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "awaiting_approval" => EffectState::AwaitingApproval,
            "ready" => EffectState::Ready,
            "dispatching" => EffectState::Dispatching,
            "unknown" => EffectState::Unknown,
            "succeeded_confirmed" => EffectState::Succeeded { confirmed: true },
            "succeeded_acknowledged" => EffectState::Succeeded { confirmed: false },
            "failed" => EffectState::Failed,
            "denied" => EffectState::Rejected {
                reason: Rejection::Denied,
            },
            "expired" => EffectState::Rejected {
                reason: Rejection::Expired,
            },
            "refused" => EffectState::Rejected {
                reason: Rejection::Refused,
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for state in EffectState::ALL {
            assert_eq!(EffectState::from_name(state.name()), Some(state));
        }
        assert_eq!(EffectState::from_name("bogus"), None);
    }

    #[test]
    fn unresolved_is_exactly_dispatching_and_unknown() {
        for state in EffectState::ALL {
            let expected = matches!(state.outcome(), Outcome::Pending | Outcome::Unknown);
            assert_eq!(state.is_unresolved(), expected, "{state:?}");
        }
    }
}
