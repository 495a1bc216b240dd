use serde::{Deserialize, Serialize};

/// What an operator decided for an effect whose outcome Steward could not learn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ManualOutcome {
    Succeeded,
    Failed,
}

/// Something that happened to an effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "event")]
pub enum EffectEvent {
    /// Enough approvers said yes.
    Approve,
    /// An approver or a policy said no.
    Deny,
    /// The approval ran out.
    Expire,
    /// Steward refused at dispatch time (limits); nothing is sent.
    Refuse,
    /// Steward found, before recording any attempt, that it must not send (outbound safety, a
    /// secret missing or not allowed for the host); nothing is sent.
    Block,
    /// The first attempt is about to be recorded durably.
    BeginAttempt,
    /// A repeat under the same provider identity (provider idempotency), only from `Unknown`.
    Replay,
    /// The attempt provably never left Steward (connection refused before any byte).
    NotSent,
    /// The provider answered success.
    ProviderAccepted { confirmed: bool },
    /// The provider definitively rejected the request.
    ProviderRejected,
    /// No usable answer: timeout, reset after sending, ambiguous 5xx.
    Ambiguous,
    /// Steward restarted and found the attempt still `dispatching`.
    Restarted,
    /// A read-only lookup found the provider's record of the write.
    ReconcileFound { confirmed: bool },
    /// A conclusive lookup: no record, and no attempt can still be in flight.
    ReconcileAbsent,
    /// A lookup that could not decide.
    ReconcileInconclusive,
    /// A reasoned manual resolution by a key other than the invoker.
    Resolve { outcome: ManualOutcome },
}

impl EffectEvent {
    /// Every event, for table tests.
    pub const ALL: [EffectEvent; 19] = [
        EffectEvent::Approve,
        EffectEvent::Deny,
        EffectEvent::Expire,
        EffectEvent::Refuse,
        EffectEvent::Block,
        EffectEvent::BeginAttempt,
        EffectEvent::Replay,
        EffectEvent::NotSent,
        EffectEvent::ProviderAccepted { confirmed: true },
        EffectEvent::ProviderAccepted { confirmed: false },
        EffectEvent::ProviderRejected,
        EffectEvent::Ambiguous,
        EffectEvent::Restarted,
        EffectEvent::ReconcileFound { confirmed: true },
        EffectEvent::ReconcileFound { confirmed: false },
        EffectEvent::ReconcileAbsent,
        EffectEvent::ReconcileInconclusive,
        EffectEvent::Resolve {
            outcome: ManualOutcome::Succeeded,
        },
        EffectEvent::Resolve {
            outcome: ManualOutcome::Failed,
        },
    ];
}
