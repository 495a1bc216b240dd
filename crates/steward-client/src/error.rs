//! What running or recovering an operation can end in, short of a resting state.

use crate::api::ApiError;
use crate::decide::{Contradiction, ServerView};
use crate::journal::JournalError;
use crate::operation::OperationId;
use crate::state::LocalState;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The journal failed; whatever was not saved did not happen as far as recovery knows.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// Steward could not be reached or refused. The operation keeps its saved state (and its
    /// keys): running or recovering it later resends the same request.
    #[error("{op}: {source}")]
    Api {
        op: OperationId,
        #[source]
        source: ApiError,
    },
    /// The journal and the server disagree in a way no rule resolves; nothing was changed on
    /// either side. A person has to look.
    #[error("{op}: the journal says {local} but the server says {server:?} ({})", reason.as_str())]
    Contradiction {
        op: OperationId,
        local: LocalState,
        server: ServerView,
        reason: Contradiction,
    },
    /// The call does not apply to the operation's state.
    #[error("{op} is {state}: cannot {what}")]
    WrongState {
        op: OperationId,
        state: LocalState,
        what: &'static str,
    },
}
