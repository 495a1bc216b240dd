"""A business operation's local state, and the server's invocation statuses.

```text
intended --dispatch--> submitted --answer saved--> pending_approval | running | unknown
                                                  | succeeded | failed | denied | expired
succeeded | failed | denied | expired --complete--> completed --continuation--> continued
```

``unknown`` means "needs reconciliation": the journal names an assignee and nothing is re-sent.
The names are the Rust client's (``crates/steward-client/src/state.rs``) and the journal stores
them as they are, so either language can read the other's journal.
"""

from __future__ import annotations

from enum import Enum


class InvocationStatus(str, Enum):
    """An invocation's status as the server reports it (``/api/v2``)."""

    PENDING_APPROVAL = "pending_approval"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    DENIED = "denied"
    EXPIRED = "expired"


class LocalState(str, Enum):
    INTENDED = "intended"
    """Durably intended; nothing sent yet."""
    SUBMITTED = "submitted"
    """The invoke may have been sent; no answer saved."""
    PENDING_APPROVAL = "pending_approval"
    """Parked on the server for a human decision; the approval id is saved."""
    RUNNING = "running"
    """The server was still dispatching when last read."""
    UNKNOWN = "unknown"
    """The server cannot know whether the provider acted: assigned for reconciliation."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DENIED = "denied"
    EXPIRED = "expired"
    COMPLETED = "completed"
    """The application's final local save is done (``complete``)."""
    CONTINUED = "continued"
    """The idempotent continuation is done. The only state recovery never loads."""

    @staticmethod
    def from_server(status: InvocationStatus) -> LocalState:
        return LocalState(status.value)

    def is_settled(self) -> bool:
        """Settled by the server, waiting for the application's ``complete``."""
        return self in _SETTLED

    def is_resting(self) -> bool:
        """Finished, or explicitly pending or unknown; anything else is work in flight."""
        return self not in (LocalState.INTENDED, LocalState.SUBMITTED, LocalState.RUNNING)

    def __str__(self) -> str:
        return self.value


_SETTLED = frozenset(
    {LocalState.SUCCEEDED, LocalState.FAILED, LocalState.DENIED, LocalState.EXPIRED}
)
