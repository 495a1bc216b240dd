use steward_core::{EffectId, EffectState, EnvironmentId};

/// Storage errors. Every backend maps its own failures onto these variants, so callers (and the
/// conformance suite) see the same error for the same situation everywhere.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was hit (an action name, a key hash).
    #[error("{what} already exists")]
    Duplicate { what: &'static str },
    /// A compare-and-set found another state than expected; someone else moved first.
    #[error("expected state `{}`, found `{}`", expected.name(), found.name())]
    StateConflict {
        expected: EffectState,
        found: EffectState,
    },
    /// A compare-and-set on a version found another version.
    #[error("expected version {expected}, found {found}")]
    VersionConflict { expected: u32, found: u32 },
    #[error("{what} not found")]
    NotFound { what: &'static str },
    /// The database could not durably record the change (I/O error, disk full, read-only,
    /// unreachable). Nothing was committed: the failure came before the commit was asked for,
    /// or the database answered that it refused it. Callers must fail closed.
    #[error("storage unavailable: {message}")]
    Unavailable {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The commit was asked for and its answer was lost: the connection dropped while
    /// PostgreSQL's `COMMIT` was in flight, or SQLite's commit failed with an I/O error while
    /// writing or syncing its log. The change may be durable or not, and only a read after the
    /// database is back tells which. A caller must not act as if it were committed (dispatch,
    /// answer success) nor as if it were not (say "nothing was changed"); see
    /// [`StoreError::commit_unknown`] and docs/DECISIONS.md, "Failover: honest answers and
    /// ambiguous commits".
    #[error("storage: the commit's outcome is unknown: {message}")]
    CommitUnknown {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The environment is halted (the kill switch): no attempt was recorded, nothing may be
    /// sent. Returned by `change_effect` for `AttemptChange::Begin`.
    #[error("the environment is halted")]
    Halted,
    /// An operator's hold covers the effect's invocation: no first attempt was recorded,
    /// nothing may be sent. Returned by `change_effect` for `AttemptChange::Begin` from `ready`.
    #[error("an operator's hold covers this operation")]
    Held,
    /// A change asked for a move no event of the effect's rules makes (`steward_core::is_legal`):
    /// a bug in the caller, refused before anything is written.
    #[error("effect {effect} in environment {env} cannot take {step} from `{}`", from.name())]
    IllegalTransition {
        env: EnvironmentId,
        effect: EffectId,
        from: EffectState,
        /// The event or the move that was refused, e.g. `the event Approve`, `a move to `failed``.
        step: String,
    },
    /// Stored data could not be decoded: a bug or corruption, never user input.
    #[error("corrupt record: {0}")]
    Corrupt(String),
    /// A write by the holder of a fencing token (the replica owning an attempt, the audit
    /// sealer, a webhook claim) found the work taken over since the token was handed out: its
    /// epoch moved on. Nothing was written; the new holder's writes stand. The holder lost
    /// its lease without knowing (a pause, a partition) and must drop the work.
    #[error("fenced: {what} was taken over (held epoch {held}, current epoch {current})")]
    Fenced {
        /// The work, e.g. `attempt 1 of eff_...`, `the audit sealer`, `webhook claim on whs_...`.
        what: String,
        /// The epoch the writer held.
        held: i64,
        /// The epoch the store holds now.
        current: i64,
    },
}

impl StoreError {
    /// Whether the failed call may nonetheless have committed ([`StoreError::CommitUnknown`]).
    /// Every other error means nothing of the call was committed.
    pub fn commit_unknown(&self) -> bool {
        matches!(self, StoreError::CommitUnknown { .. })
    }

    /// Whether the database could not be used ([`StoreError::Unavailable`] or
    /// [`StoreError::CommitUnknown`]): what a retry once it is back may resolve.
    pub fn storage_failed(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable { .. } | StoreError::CommitUnknown { .. }
        )
    }

    /// The environment a change names does not exist.
    pub(crate) fn environment_not_found() -> Self {
        StoreError::NotFound {
            what: "environment",
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
