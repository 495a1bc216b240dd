use super::{EffectState, Rejection};
use serde::{Deserialize, Serialize};

/// The receipt grade of an effect, derived from its state and never stored by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grade {
    /// Succeeded, and the provider's own record or a read-back proves it.
    Confirmed,
    /// Succeeded on the provider's word (a 2xx) or an operator's, with nothing read back.
    Acknowledged,
    /// No usable answer; reconcile before anything else.
    Unknown,
    /// Definitively rejected, or provably never sent.
    Failed,
    /// Steward refused at dispatch.
    Refused,
    /// A human or a policy denied it (or its approval expired).
    Denied,
    /// No receipt yet.
    Pending,
}

impl Grade {
    pub fn of(state: EffectState) -> Grade {
        match state {
            EffectState::AwaitingApproval | EffectState::Ready | EffectState::Dispatching => {
                Grade::Pending
            }
            EffectState::Unknown => Grade::Unknown,
            EffectState::Succeeded { confirmed: true } => Grade::Confirmed,
            EffectState::Succeeded { confirmed: false } => Grade::Acknowledged,
            EffectState::Failed => Grade::Failed,
            EffectState::Rejected {
                reason: Rejection::Refused,
            } => Grade::Refused,
            EffectState::Rejected {
                reason: Rejection::Denied | Rejection::Expired,
            } => Grade::Denied,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Grade::Confirmed => "confirmed",
            Grade::Acknowledged => "acknowledged",
            Grade::Unknown => "unknown",
            Grade::Failed => "failed",
            Grade::Refused => "refused",
            Grade::Denied => "denied",
            Grade::Pending => "pending",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_the_documented_grade() {
        let expected = [
            (EffectState::AwaitingApproval, Grade::Pending),
            (EffectState::Ready, Grade::Pending),
            (EffectState::Dispatching, Grade::Pending),
            (EffectState::Unknown, Grade::Unknown),
            (EffectState::Succeeded { confirmed: true }, Grade::Confirmed),
            (
                EffectState::Succeeded { confirmed: false },
                Grade::Acknowledged,
            ),
            (EffectState::Failed, Grade::Failed),
            (
                EffectState::Rejected {
                    reason: Rejection::Denied,
                },
                Grade::Denied,
            ),
            (
                EffectState::Rejected {
                    reason: Rejection::Expired,
                },
                Grade::Denied,
            ),
            (
                EffectState::Rejected {
                    reason: Rejection::Refused,
                },
                Grade::Refused,
            ),
        ];
        assert_eq!(expected.len(), EffectState::ALL.len());
        for (state, grade) in expected {
            assert_eq!(Grade::of(state), grade, "{state:?}");
        }
    }
}
