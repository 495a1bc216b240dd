"""What running or recovering an operation can end in, short of a resting state."""

from __future__ import annotations

from .decide import Contradiction, ServerView
from .state import LocalState


class RunError(Exception):
    """Base of every error ``run``, ``recover`` and friends raise besides journal errors."""


class ApiFailure(RunError):
    """Steward could not be reached or refused. The operation keeps its saved state and keys:
    running or recovering it later resends the same request."""

    def __init__(self, op: str, cause: BaseException) -> None:
        super().__init__(f"{op}: {cause}")
        self.op, self.cause = op, cause


class ContradictionError(RunError):
    """The journal and the server disagree in a way no rule resolves; nothing was changed on
    either side. A person has to look."""

    def __init__(self, op: str, local: LocalState, server: ServerView,
                 reason: Contradiction) -> None:
        super().__init__(
            f"{op}: the journal says {local.value} but the server says {server} ({reason.value})"
        )
        self.op, self.local, self.server, self.reason = op, local, server, reason


class WrongState(RunError):
    """The call does not apply to the operation's state."""

    def __init__(self, op: str, state: LocalState, what: str) -> None:
        super().__init__(f"{op} is {state.value}: cannot {what}")
        self.op, self.state, self.what = op, state, what
