"""steward-recovery: Python agents resume without repeating their action.

A business operation is recorded in the application's own database *before* anything is sent,
under the application's stable operation key, with its input, its fingerprint and the
``Idempotency-Key`` every send will carry. Running it invokes the action through the official
Anlyon SDK (``anlyon.Client``) pointed at Steward; restarting loads every unfinished operation
and drives it with the same pure decision (:func:`decide`) the Rust client uses.

    import sqlite3, anlyon
    from steward_recovery import Operations, SqliteJournal

    db = sqlite3.connect("app.db")
    ops = Operations(anlyon.Client(api_key=key, base_url=url), SqliteJournal(db),
                     environment="test")
    report = ops.recover()                       # first: finish what the last run left
    op = ops.begin("refund:order-42", "refund-order", {"paymentIntent": "pi_1", "amount": 1250})
    op = ops.run(op)                             # same keys on every send, now or after a crash
    if op.state.is_settled():
        op = ops.complete(op, {"refunded": op.state == "succeeded"})
        ...                                      # the idempotent continuation
        ops.mark_continued(op)

Crash points (``STEWARD_CRASH_AT=before_dispatch|after_dispatch|after_response|
awaiting_approval|after_save``) abort the process inside each window, for ``steward chaos``.
"""

from .config import (
    APPROVAL_WAIT_S_DEFAULT,
    ASSIGNEE_DEFAULT,
    POLL_INTERVAL_S_DEFAULT,
    SETTLE_WAIT_S_DEFAULT,
    Config,
)
from .decide import VECTORS_VERSION, Contradiction, RecoveryAction, ServerView, decide
from .errors import ApiFailure, ContradictionError, RunError, WrongState
from .journal import (
    Begun,
    Journal,
    JournalError,
    KeyConflict,
    NotFound,
    SqliteJournal,
    Stale,
    Storage,
    TransactionState,
)
from .operation import Operation, canonical_json, fingerprint
from .operations import Operations, Recovered, RecoveryReport
from .state import InvocationStatus, LocalState
from .tools import operation_tool


def __getattr__(name: str):
    if name == "PostgresJournal":
        from .journal.postgres import PostgresJournal

        return PostgresJournal
    raise AttributeError(name)


__all__ = [
    "APPROVAL_WAIT_S_DEFAULT", "ASSIGNEE_DEFAULT", "POLL_INTERVAL_S_DEFAULT",
    "SETTLE_WAIT_S_DEFAULT", "VECTORS_VERSION", "ApiFailure", "Begun", "Config", "Contradiction",
    "ContradictionError", "InvocationStatus", "Journal", "JournalError", "KeyConflict",
    "LocalState", "NotFound", "Operation", "Operations", "PostgresJournal", "Recovered",
    "RecoveryAction", "RecoveryReport", "RunError", "ServerView", "SqliteJournal", "Stale",
    "Storage",
    "TransactionState", "WrongState", "canonical_json", "decide", "fingerprint",
    "operation_tool",
]
