//! The recovery decision: what to do next with one operation, given its local state and what the
//! server says about its invocation. A pure function; the driver (`drive.rs`) performs the
//! action, saves, observes again and asks again. The same function serves a first run and
//! recovery after a crash, so both take the same path.
//!
//! The rules, from docs/INVARIANTS.md (the crash windows):
//! - no invocation id known and nothing settled: send with the operation's saved keys (the
//!   first send, or a resend that the server's identity behaviour answers with the original);
//! - `pending_approval`: observe the existing approval, never request another;
//! - `running`: wait and read again;
//! - `unknown`: assign reconciliation, never resend;
//! - `succeeded`: record it; the application completes and continues the workflow;
//! - `failed`, `denied`, `expired`: record it and surface it to the application;
//! - a server record that contradicts a settled local one is escalated, not papered over.

use crate::state::LocalState;
use steward_core::InvocationStatus;

#[cfg(test)]
mod vectors;

/// What the server says about an operation's invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerView {
    /// The journal holds no invocation id, so there is nothing to read.
    NoInvocationKnown,
    /// The journal holds an invocation id the server does not know (in this environment).
    NotFound,
    /// The invocation as it stands.
    Status(InvocationStatus),
}

impl ServerView {
    pub const ALL: [ServerView; 9] = [
        ServerView::NoInvocationKnown,
        ServerView::NotFound,
        ServerView::Status(InvocationStatus::PendingApproval),
        ServerView::Status(InvocationStatus::Running),
        ServerView::Status(InvocationStatus::Succeeded),
        ServerView::Status(InvocationStatus::Failed),
        ServerView::Status(InvocationStatus::Unknown),
        ServerView::Status(InvocationStatus::Denied),
        ServerView::Status(InvocationStatus::Expired),
    ];
}

/// Why local and server records cannot both be right.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Contradiction {
    /// The journal names an invocation the server does not have.
    InvocationMissing,
    /// The local state needs an invocation id and the journal has none.
    NoInvocationRecorded,
    /// The server reports a status that cannot follow the local one.
    StatusDisagrees,
}

impl Contradiction {
    pub fn as_str(self) -> &'static str {
        match self {
            Contradiction::InvocationMissing => "invocation_missing",
            Contradiction::NoInvocationRecorded => "no_invocation_recorded",
            Contradiction::StatusDisagrees => "status_disagrees",
        }
    }
}

/// The next step for one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecoveryAction {
    /// Send the invoke with the operation's saved operation key, input and `Idempotency-Key`.
    Dispatch,
    /// Save the server's status as the local state.
    Adopt(InvocationStatus),
    /// Long-poll the existing approval; never create another.
    ObserveApproval,
    /// The server is still dispatching: wait, then read again.
    AwaitSettlement,
    /// The outcome is unknown: assign reconciliation (locally, and on the server when it offers
    /// reconcile). Never resend.
    AssignReconciliation,
    /// Succeeded: the application makes its final local save (`complete`).
    Complete,
    /// Completed: the application runs its idempotent continuation.
    Continue,
    /// Failed, denied or expired: the application decides (it may start a `retryOf` operation).
    Surface,
    /// Continued: nothing left to do.
    Done,
    /// The records contradict each other: leave everything as it is and tell a person.
    Escalate(Contradiction),
}

/// Decides the next step. Total over every `(local, server)` pair; see the table test.
pub fn decide(local: LocalState, server: ServerView) -> RecoveryAction {
    use InvocationStatus as S;
    use LocalState as L;
    use RecoveryAction as A;
    use ServerView as V;
    match (local, server) {
        // Finished work is never re-read or re-done.
        (L::Continued, _) => A::Done,

        // Work in flight. With no invocation id the server's identity behaviour makes a resend
        // with the same keys return the original invocation (or create it, the first time).
        (L::Intended | L::Submitted | L::PendingApproval | L::Running, V::NoInvocationKnown) => {
            A::Dispatch
        }
        (L::PendingApproval, V::Status(S::PendingApproval)) => A::ObserveApproval,
        (L::Running, V::Status(S::Running)) => A::AwaitSettlement,
        (L::Intended | L::Submitted | L::PendingApproval | L::Running, V::Status(S::Unknown)) => {
            A::AssignReconciliation
        }
        (
            L::Intended | L::Submitted | L::PendingApproval | L::Running,
            V::Status(
                s @ (S::PendingApproval
                | S::Running
                | S::Succeeded
                | S::Failed
                | S::Denied
                | S::Expired),
            ),
        ) => A::Adopt(s),

        // Unknown: only a reconcile on the server (or an explicit replay) moves it on.
        (L::Unknown, V::Status(S::Unknown)) => A::AssignReconciliation,
        (L::Unknown, V::Status(S::Running)) => A::AwaitSettlement,
        (L::Unknown, V::Status(s @ (S::Succeeded | S::Failed))) => A::Adopt(s),
        (L::Unknown, V::Status(S::PendingApproval | S::Denied | S::Expired)) => {
            A::Escalate(Contradiction::StatusDisagrees)
        }
        (L::Unknown, V::NoInvocationKnown) => A::Escalate(Contradiction::NoInvocationRecorded),

        // Settled locally: the server must agree.
        (L::Succeeded, V::Status(S::Succeeded)) => A::Complete,
        (L::Failed, V::Status(S::Failed)) => A::Surface,
        // Refused before an invocation existed (validation, unknown action): nothing to read.
        (L::Failed, V::NoInvocationKnown) => A::Surface,
        (L::Denied, V::Status(S::Denied)) => A::Surface,
        (L::Expired, V::Status(S::Expired)) => A::Surface,
        (L::Succeeded | L::Denied | L::Expired, V::NoInvocationKnown) => {
            A::Escalate(Contradiction::NoInvocationRecorded)
        }
        (
            L::Succeeded,
            V::Status(
                S::PendingApproval | S::Running | S::Failed | S::Unknown | S::Denied | S::Expired,
            ),
        )
        | (
            L::Failed,
            V::Status(
                S::PendingApproval
                | S::Running
                | S::Succeeded
                | S::Unknown
                | S::Denied
                | S::Expired,
            ),
        )
        | (
            L::Denied,
            V::Status(
                S::PendingApproval
                | S::Running
                | S::Succeeded
                | S::Failed
                | S::Unknown
                | S::Expired,
            ),
        )
        | (
            L::Expired,
            V::Status(
                S::PendingApproval | S::Running | S::Succeeded | S::Failed | S::Unknown | S::Denied,
            ),
        ) => A::Escalate(Contradiction::StatusDisagrees),

        // Completed: the final local save is done, whatever the outcome; continue the workflow.
        (L::Completed, V::Status(S::Succeeded | S::Failed | S::Denied | S::Expired)) => A::Continue,
        // Completed after a refusal that created no invocation.
        (L::Completed, V::NoInvocationKnown) => A::Continue,
        (L::Completed, V::Status(S::PendingApproval | S::Running | S::Unknown)) => {
            A::Escalate(Contradiction::StatusDisagrees)
        }

        // The server lost (or never had, in this environment) an invocation we were told about.
        (
            L::Intended
            | L::Submitted
            | L::PendingApproval
            | L::Running
            | L::Unknown
            | L::Succeeded
            | L::Failed
            | L::Denied
            | L::Expired
            | L::Completed,
            V::NotFound,
        ) => A::Escalate(Contradiction::InvocationMissing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Contradiction as C;
    use InvocationStatus as S;
    use RecoveryAction as A;

    /// One row per local state; columns in `ServerView::ALL` order:
    /// no-id, not-found, pending_approval, running, succeeded, failed, unknown, denied, expired.
    fn expected(local: LocalState) -> [RecoveryAction; 9] {
        let miss = A::Escalate(C::InvocationMissing);
        let none = A::Escalate(C::NoInvocationRecorded);
        let bad = A::Escalate(C::StatusDisagrees);
        let adopt = |s| A::Adopt(s);
        match local {
            LocalState::Intended | LocalState::Submitted => [
                A::Dispatch,
                miss,
                adopt(S::PendingApproval),
                adopt(S::Running),
                adopt(S::Succeeded),
                adopt(S::Failed),
                A::AssignReconciliation,
                adopt(S::Denied),
                adopt(S::Expired),
            ],
            LocalState::PendingApproval => [
                A::Dispatch,
                miss,
                A::ObserveApproval,
                adopt(S::Running),
                adopt(S::Succeeded),
                adopt(S::Failed),
                A::AssignReconciliation,
                adopt(S::Denied),
                adopt(S::Expired),
            ],
            LocalState::Running => [
                A::Dispatch,
                miss,
                adopt(S::PendingApproval),
                A::AwaitSettlement,
                adopt(S::Succeeded),
                adopt(S::Failed),
                A::AssignReconciliation,
                adopt(S::Denied),
                adopt(S::Expired),
            ],
            LocalState::Unknown => [
                none,
                miss,
                bad,
                A::AwaitSettlement,
                adopt(S::Succeeded),
                adopt(S::Failed),
                A::AssignReconciliation,
                bad,
                bad,
            ],
            LocalState::Succeeded => [none, miss, bad, bad, A::Complete, bad, bad, bad, bad],
            LocalState::Failed => [A::Surface, miss, bad, bad, bad, A::Surface, bad, bad, bad],
            LocalState::Denied => [none, miss, bad, bad, bad, bad, bad, A::Surface, bad],
            LocalState::Expired => [none, miss, bad, bad, bad, bad, bad, bad, A::Surface],
            LocalState::Completed => [
                A::Continue,
                miss,
                bad,
                bad,
                A::Continue,
                A::Continue,
                bad,
                A::Continue,
                A::Continue,
            ],
            LocalState::Continued => [A::Done; 9],
        }
    }

    #[test]
    fn every_local_state_and_server_view_has_the_tabled_action() {
        let mut checked = 0;
        for local in LocalState::ALL {
            let row = expected(local);
            for (view, want) in ServerView::ALL.into_iter().zip(row) {
                assert_eq!(decide(local, view), want, "decide({local:?}, {view:?})");
                checked += 1;
            }
        }
        assert_eq!(checked, LocalState::ALL.len() * ServerView::ALL.len());
    }

    #[test]
    fn nothing_is_ever_resent_once_an_outcome_may_exist() {
        // Dispatch is only ever chosen when no invocation id is known and nothing is settled or
        // unknown locally: the one case where a resend cannot create a second effect.
        for local in LocalState::ALL {
            for view in ServerView::ALL {
                if decide(local, view) == A::Dispatch {
                    assert_eq!(view, ServerView::NoInvocationKnown, "{local:?}");
                    assert!(
                        !local.is_settled() && local != LocalState::Unknown,
                        "{local:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn unknown_is_never_dispatched_and_pending_is_only_observed() {
        for view in ServerView::ALL {
            assert_ne!(decide(LocalState::Unknown, view), A::Dispatch, "{view:?}");
        }
        assert_eq!(
            decide(
                LocalState::PendingApproval,
                ServerView::Status(S::PendingApproval)
            ),
            A::ObserveApproval
        );
    }
}
