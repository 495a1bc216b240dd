//! The named crash windows of docs/INVARIANTS.md. Test harnesses make a process abort at one of
//! them (`STEWARD_CRASH_AT=<name>`) to prove that recovery neither loses nor repeats a write.

/// A point where a process may die with work half done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrashPoint {
    /// Client: the operation is durably intended, nothing sent.
    BeforeDispatch,
    /// Client: the request is sent, the response not read.
    AfterDispatch,
    /// Client: the response is read, the local save not done.
    AfterResponse,
    /// Client: the operation is parked for approval.
    AwaitingApproval,
    /// Client: the final local save is done, the workflow continuation not.
    AfterSave,
    /// Server: the dispatch attempt is committed, nothing sent.
    ServerAfterRecord,
    /// Server: the provider may have the request, the response is not saved.
    ServerAfterSend,
    /// Server: the provider's response is received, not saved.
    ServerAfterResponse,
    /// Server: an approval's decision is committed without the released invocation's attempt
    /// (a halted environment, a release not foreseen), which is not yet attempted. An approval
    /// that begins its attempt in the decision's commit passes `ServerAfterRecord` instead.
    /// (Beyond the client's list; Steward's own tests use it.)
    ServerAfterApproval,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 8] = [
        CrashPoint::BeforeDispatch,
        CrashPoint::AfterDispatch,
        CrashPoint::AfterResponse,
        CrashPoint::AwaitingApproval,
        CrashPoint::AfterSave,
        CrashPoint::ServerAfterRecord,
        CrashPoint::ServerAfterSend,
        CrashPoint::ServerAfterResponse,
    ];

    /// Points beyond the original list, used by Steward's own tests.
    pub const EXTRA: [CrashPoint; 1] = [CrashPoint::ServerAfterApproval];

    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::BeforeDispatch => "before_dispatch",
            CrashPoint::AfterDispatch => "after_dispatch",
            CrashPoint::AfterResponse => "after_response",
            CrashPoint::AwaitingApproval => "awaiting_approval",
            CrashPoint::AfterSave => "after_save",
            CrashPoint::ServerAfterRecord => "server_after_record",
            CrashPoint::ServerAfterSend => "server_after_send",
            CrashPoint::ServerAfterResponse => "server_after_response",
            CrashPoint::ServerAfterApproval => "server_after_approval",
        }
    }

    pub fn parse(name: &str) -> Option<CrashPoint> {
        Self::ALL
            .into_iter()
            .chain(Self::EXTRA)
            .find(|p| p.name() == name)
    }

    /// True for the points inside the Steward server rather than the client application.
    pub fn is_server(self) -> bool {
        matches!(
            self,
            CrashPoint::ServerAfterRecord
                | CrashPoint::ServerAfterSend
                | CrashPoint::ServerAfterResponse
                | CrashPoint::ServerAfterApproval
        )
    }
}

/// The environment variable that arms a crash point.
pub const CRASH_AT_ENV: &str = "STEWARD_CRASH_AT";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for point in CrashPoint::ALL.into_iter().chain(CrashPoint::EXTRA) {
            assert_eq!(CrashPoint::parse(point.name()), Some(point));
        }
        assert_eq!(CrashPoint::parse("nowhere"), None);
    }
}
