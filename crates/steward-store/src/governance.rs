//! Governance rows: approval policies with their immutable versions, impact limits with their
//! usage, and the reservations effects hold against them.

use crate::records::Actor;
use steward_core::impact::{LimitSpec, Quantity, Refusal, Usage};
use steward_core::policy::{Policy, PolicySpec};
use steward_core::{EffectId, EnvironmentId, KeyId, LimitId, Millis, PolicyId};

/// A live approval policy at its current version.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRecord {
    pub id: PolicyId,
    pub env_id: EnvironmentId,
    pub version: u32,
    pub spec: PolicySpec,
    pub created_at: Millis,
    pub updated_at: Millis,
}

impl PolicyRecord {
    /// The policy as the evaluator sees it.
    pub fn policy(&self) -> Policy {
        Policy {
            id: self.id.clone(),
            version: self.version,
            created_at: self.created_at,
            spec: self.spec.clone(),
        }
    }
}

/// One immutable version of a policy. Deleting a policy appends a tombstone (`spec` is `None`);
/// every version stays readable after deletion.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyVersion {
    pub policy_id: PolicyId,
    pub version: u32,
    pub spec: Option<PolicySpec>,
    pub change_note: Option<String>,
    pub created_at: Millis,
    pub created_by: Option<KeyId>,
}

impl PolicyVersion {
    pub fn is_tombstone(&self) -> bool {
        self.spec.is_none()
    }
}

/// An impact limit.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitRecord {
    pub id: LimitId,
    pub env_id: EnvironmentId,
    pub spec: LimitSpec,
    pub archived_at: Option<Millis>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// A limit with its usage in the window that contains "now".
#[derive(Debug, Clone, PartialEq)]
pub struct LimitStatus {
    pub limit: LimitRecord,
    pub window_start: Millis,
    pub usage: Usage,
}

impl LimitStatus {
    pub fn available(&self) -> i64 {
        self.usage.available(self.limit.spec.amount)
    }
}

/// A request to reserve every applicable limit for one effect, just before its dispatch.
#[derive(Debug, Clone)]
pub struct ImpactRequest {
    pub env_id: EnvironmentId,
    pub effect_id: EffectId,
    pub action_name: String,
    pub quantities: Vec<Quantity>,
    pub actor: Actor,
}

/// What reserving found.
#[derive(Debug, Clone, PartialEq)]
pub enum ReserveOutcome {
    /// Every applicable limit now holds a reservation for the effect (possibly none applied):
    /// `(limit, amount)` per limit.
    Reserved(Vec<(LimitId, i64)>),
    /// The effect already holds its reservations (a dispatch resumed after a restart or a halt):
    /// nothing was added.
    AlreadyReserved,
    /// A limit refuses the effect; nothing was reserved.
    Refused {
        limit_id: LimitId,
        limit_name: String,
        refusal: Refusal,
    },
}
