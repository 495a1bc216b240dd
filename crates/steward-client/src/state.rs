//! A business operation's local state, as the application's journal records it.
//!
//! ```text
//! intended --dispatch--> submitted --answer saved--> pending_approval | running | unknown
//!                                                   | succeeded | failed | denied | expired
//! succeeded | failed | denied | expired --complete--> completed --continuation--> continued
//! ```
//!
//! `unknown` means "needs reconciliation": the journal names an assignee and nothing is re-sent.

use steward_core::InvocationStatus;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocalState {
    /// Durably intended; nothing sent yet.
    Intended,
    /// The invoke may have been sent; no answer saved.
    Submitted,
    /// Parked on the server for a human decision; the approval id is saved.
    PendingApproval,
    /// The server was still dispatching when last read.
    Running,
    /// The server cannot know whether the provider acted: assigned for reconciliation.
    Unknown,
    /// The server settled it succeeded; the application has not completed it yet.
    Succeeded,
    /// Settled failed (provably not sent, or definitively refused).
    Failed,
    /// The approval was denied; it never ran.
    Denied,
    /// The approval expired; it never ran.
    Expired,
    /// The application's final local save is done (`complete`).
    Completed,
    /// The idempotent workflow continuation is done. The only state recovery never loads.
    Continued,
}

impl LocalState {
    pub const ALL: [LocalState; 11] = [
        LocalState::Intended,
        LocalState::Submitted,
        LocalState::PendingApproval,
        LocalState::Running,
        LocalState::Unknown,
        LocalState::Succeeded,
        LocalState::Failed,
        LocalState::Denied,
        LocalState::Expired,
        LocalState::Completed,
        LocalState::Continued,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LocalState::Intended => "intended",
            LocalState::Submitted => "submitted",
            LocalState::PendingApproval => "pending_approval",
            LocalState::Running => "running",
            LocalState::Unknown => "unknown",
            LocalState::Succeeded => "succeeded",
            LocalState::Failed => "failed",
            LocalState::Denied => "denied",
            LocalState::Expired => "expired",
            LocalState::Completed => "completed",
            LocalState::Continued => "continued",
        }
    }

    pub fn parse(value: &str) -> Option<LocalState> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }

    /// The local state that records a server status.
    pub fn from_server(status: InvocationStatus) -> LocalState {
        match status {
            InvocationStatus::PendingApproval => LocalState::PendingApproval,
            InvocationStatus::Running => LocalState::Running,
            InvocationStatus::Succeeded => LocalState::Succeeded,
            InvocationStatus::Failed => LocalState::Failed,
            InvocationStatus::Unknown => LocalState::Unknown,
            InvocationStatus::Denied => LocalState::Denied,
            InvocationStatus::Expired => LocalState::Expired,
        }
    }

    /// Settled by the server, waiting for the application's `complete`.
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            LocalState::Succeeded | LocalState::Failed | LocalState::Denied | LocalState::Expired
        )
    }

    /// Where an operation may rest between runs of the application: finished, or explicitly
    /// pending or unknown. Anything else (intended, submitted, running) is work in flight.
    pub fn is_resting(self) -> bool {
        !matches!(
            self,
            LocalState::Intended | LocalState::Submitted | LocalState::Running
        )
    }
}

impl std::fmt::Display for LocalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_every_server_status_has_a_local_state() {
        for state in LocalState::ALL {
            assert_eq!(LocalState::parse(state.as_str()), Some(state));
        }
        assert_eq!(LocalState::parse("done"), None);
        for status in InvocationStatus::ALL {
            assert_eq!(LocalState::from_server(status).as_str(), status.as_str());
        }
    }
}
