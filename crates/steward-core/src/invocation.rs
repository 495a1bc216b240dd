//! The invocation's wire status, derived from its effect's state.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationStatus {
    PendingApproval,
    Running,
    Succeeded,
    Failed,
    Unknown,
    Denied,
    Expired,
}

impl InvocationStatus {
    pub const ALL: [InvocationStatus; 7] = [
        InvocationStatus::PendingApproval,
        InvocationStatus::Running,
        InvocationStatus::Succeeded,
        InvocationStatus::Failed,
        InvocationStatus::Unknown,
        InvocationStatus::Denied,
        InvocationStatus::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InvocationStatus::PendingApproval => "pending_approval",
            InvocationStatus::Running => "running",
            InvocationStatus::Succeeded => "succeeded",
            InvocationStatus::Failed => "failed",
            InvocationStatus::Unknown => "unknown",
            InvocationStatus::Denied => "denied",
            InvocationStatus::Expired => "expired",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }
}
