"""The recovery decision: what to do next with one operation, given its local state and what
the server says about its invocation. A pure function, the same one as the Rust client's
(``crates/steward-client/src/decide.rs``); both are tested against every vector of
``tests/vectors/recovery-decisions.json``, which is generated from the Rust table.

The rules (docs/INVARIANTS.md, the crash windows):

- no invocation id known and nothing settled: send with the operation's saved keys (the first
  send, or a resend that the server's identity behaviour answers with the original);
- ``pending_approval``: observe the existing approval, never request another;
- ``running``: wait and read again;
- ``unknown``: assign reconciliation, never resend;
- ``succeeded``: record it; the application completes and continues the workflow;
- ``failed``, ``denied``, ``expired``: record it and surface it to the application;
- a server record that contradicts a settled local one is escalated, not papered over.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .state import InvocationStatus as S
from .state import LocalState as L

#: The version of the shared vectors this table was checked against.
VECTORS_VERSION = 1


class Contradiction(str, Enum):
    """Why local and server records cannot both be right."""

    INVOCATION_MISSING = "invocation_missing"
    """The journal names an invocation the server does not have."""
    NO_INVOCATION_RECORDED = "no_invocation_recorded"
    """The local state needs an invocation id and the journal has none."""
    STATUS_DISAGREES = "status_disagrees"
    """The server reports a status that cannot follow the local one."""


@dataclass(frozen=True)
class ServerView:
    """What the server says about an operation's invocation: ``no_invocation_known`` (the
    journal holds no invocation id), ``not_found`` (the server does not know the id), or
    ``status`` with the invocation's status."""

    view: str
    status: S | None = None

    @staticmethod
    def no_invocation_known() -> ServerView:
        return ServerView("no_invocation_known")

    @staticmethod
    def not_found() -> ServerView:
        return ServerView("not_found")

    @staticmethod
    def of(status: S) -> ServerView:
        return ServerView("status", S(status))

    def __str__(self) -> str:
        return self.status.value if self.status else self.view


@dataclass(frozen=True)
class RecoveryAction:
    """The next step for one operation. ``kind`` is one of ``dispatch``, ``adopt`` (with
    ``status``), ``observe_approval``, ``await_settlement``, ``assign_reconciliation``,
    ``complete``, ``continue``, ``surface``, ``done``, ``escalate`` (with ``contradiction``)."""

    kind: str
    status: S | None = None
    contradiction: Contradiction | None = None

    def __str__(self) -> str:
        extra = self.status or self.contradiction
        return f"{self.kind}({extra.value})" if extra else self.kind


DISPATCH = RecoveryAction("dispatch")
OBSERVE_APPROVAL = RecoveryAction("observe_approval")
AWAIT_SETTLEMENT = RecoveryAction("await_settlement")
ASSIGN_RECONCILIATION = RecoveryAction("assign_reconciliation")
COMPLETE = RecoveryAction("complete")
CONTINUE = RecoveryAction("continue")
SURFACE = RecoveryAction("surface")
DONE = RecoveryAction("done")


def adopt(status: S) -> RecoveryAction:
    return RecoveryAction("adopt", status=S(status))


def escalate(reason: Contradiction) -> RecoveryAction:
    return RecoveryAction("escalate", contradiction=reason)


_IN_FLIGHT = (L.INTENDED, L.SUBMITTED, L.PENDING_APPROVAL, L.RUNNING)
# The one server status that agrees with each settled local state.
_AGREES = {L.SUCCEEDED: S.SUCCEEDED, L.FAILED: S.FAILED, L.DENIED: S.DENIED, L.EXPIRED: S.EXPIRED}


def decide(local: L, server: ServerView) -> RecoveryAction:
    """Decides the next step. Total over every ``(local, server)`` pair, in the order of the
    Rust match arms."""
    local = L(local)
    # Finished work is never re-read or re-done.
    if local is L.CONTINUED:
        return DONE
    # The server lost (or never had, in this environment) an invocation we were told about.
    if server.view == "not_found":
        return escalate(Contradiction.INVOCATION_MISSING)
    known = server.view == "status"
    status = server.status

    if local in _IN_FLIGHT:
        # With no invocation id, a resend with the same keys returns the original invocation
        # (or creates it, the first time).
        if not known:
            return DISPATCH
        if local is L.PENDING_APPROVAL and status is S.PENDING_APPROVAL:
            return OBSERVE_APPROVAL
        if local is L.RUNNING and status is S.RUNNING:
            return AWAIT_SETTLEMENT
        if status is S.UNKNOWN:
            return ASSIGN_RECONCILIATION
        return adopt(status)

    if local is L.UNKNOWN:
        # Only a reconcile on the server (or an explicit replay) moves it on.
        if not known:
            return escalate(Contradiction.NO_INVOCATION_RECORDED)
        if status is S.UNKNOWN:
            return ASSIGN_RECONCILIATION
        if status is S.RUNNING:
            return AWAIT_SETTLEMENT
        if status in (S.SUCCEEDED, S.FAILED):
            return adopt(status)
        return escalate(Contradiction.STATUS_DISAGREES)

    if local in _AGREES:
        # Settled locally: the server must agree.
        if not known:
            # Refused before an invocation existed (validation, unknown action): nothing to read.
            if local is L.FAILED:
                return SURFACE
            return escalate(Contradiction.NO_INVOCATION_RECORDED)
        if status is not _AGREES[local]:
            return escalate(Contradiction.STATUS_DISAGREES)
        return COMPLETE if local is L.SUCCEEDED else SURFACE

    assert local is L.COMPLETED, f"decide: unhandled local state {local}"
    # Completed: the final local save is done, whatever the outcome; continue the workflow
    # (also after a refusal that created no invocation).
    if not known or status in (S.SUCCEEDED, S.FAILED, S.DENIED, S.EXPIRED):
        return CONTINUE
    return escalate(Contradiction.STATUS_DISAGREES)
