"""The durable operation journal: one record per business operation, in the application's own
database. Recovery trusts only what is here, so every method states its crash contract.

Both backends (SQLite and PostgreSQL) keep the Rust client's table, ``steward_operations``,
with the same columns and encodings, so a Rust tool (``steward chaos``) reads a Python journal
and the other way round.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from ..operation import Operation, compact_json
from ..state import InvocationStatus, LocalState


class JournalError(Exception):
    """A journal call failed; whatever it did not commit did not happen."""


class KeyConflict(JournalError):
    """The operation key already names an operation with a different input."""

    def __init__(self, action: str, key: str, existing: str) -> None:
        super().__init__(
            f"operation key `{key}` of action `{action}` already names {existing} with a "
            "different input"
        )
        self.action, self.key, self.existing = action, key, existing


class Stale(JournalError):
    """Someone saved the operation since it was read; read it again."""

    def __init__(self, id: str, expected: int) -> None:
        super().__init__(f"{id} changed since it was read (expected version {expected})")
        self.id, self.expected = id, expected


class NotFound(JournalError):
    def __init__(self, id: str) -> None:
        super().__init__(f"{id} is not in the journal")
        self.id = id


class TransactionState(JournalError):
    """The connection's transaction is not what the call needs (an open transaction where the
    journal must commit on its own, or none where the call joins the caller's)."""


class Storage(JournalError):
    """The database failed (the backend's own error is the ``__cause__``); nothing of this call
    is durable."""


class Corrupt(JournalError):
    def __init__(self, id: str, reason: str) -> None:
        super().__init__(f"journal record {id} is corrupt: {reason}")
        self.id, self.reason = id, reason


@dataclass(frozen=True)
class Begun:
    """What :meth:`Journal.begin` found: a new operation (``created``) or the one the same key
    and input began before, as it stands."""

    operation: Operation
    created: bool


class Journal(Protocol):
    def begin(self, intended: Operation, *, join: bool = False) -> Begun:
        """Records ``intended`` (state ``intended``, version 0) unless its ``(environment,
        action, operation_key)`` is already recorded: then the existing operation is returned
        when the input fingerprint matches, and :class:`KeyConflict` is raised when it does not.

        Crash contract: with ``join=False`` the journal commits its own transaction, and once
        this returns ``created`` the record is durable and :meth:`unfinished` finds it after any
        crash. With ``join=True`` the record is written into the caller's open transaction and
        is durable exactly when the caller commits: with the application's own rows, or not at
        all."""
        ...

    def save(self, op: Operation) -> Operation:
        """Saves every mutable field of ``op`` if the stored version is still ``op.version``;
        returns it with the version bumped, :class:`Stale` otherwise.

        Crash contract: once this returns, the new state is durable. It refuses to run inside
        an open transaction of the caller's (:class:`TransactionState`): nothing is sent for an
        operation whose intent is not committed."""
        ...

    def get(self, id: str) -> Operation | None: ...

    def unfinished(self) -> list[Operation]:
        """Every operation not yet ``continued``, oldest first: what recovery loads."""
        ...

    def all(self) -> list[Operation]: ...


#: The columns, in the order both backends read and write them (the Rust journal's order).
COLUMNS = (
    "id", "environment", "action", "operation_key", "input", "input_fingerprint",
    "idempotency_key", "retry_of", "state", "invocation_id", "effect_id", "approval_id",
    "server_status", "server_record", "result", "last_error", "assignee", "attempt_count",
    "version", "created_at", "updated_at",
)
#: The columns ``save`` changes.
MUTABLE = (
    "state", "invocation_id", "effect_id", "approval_id", "server_status", "server_record",
    "result", "last_error", "assignee", "attempt_count", "version", "updated_at",
)


def _json_text(value: Any) -> str | None:
    return None if value is None else compact_json(value)


def encode(op: Operation) -> dict[str, Any]:
    """The row of ``op``: JSON as compact text, states and statuses by name, times in ms."""
    return {
        "id": op.id,
        "environment": op.environment,
        "action": op.action,
        "operation_key": op.operation_key,
        "input": compact_json(op.input),
        "input_fingerprint": op.input_fingerprint,
        "idempotency_key": op.idempotency_key,
        "retry_of": op.retry_of,
        "state": op.state.value,
        "invocation_id": op.invocation_id,
        "effect_id": op.effect_id,
        "approval_id": op.approval_id,
        "server_status": op.server_status.value if op.server_status else None,
        "server_record": _json_text(op.server_record),
        "result": _json_text(op.result),
        "last_error": op.last_error,
        "assignee": op.assignee,
        "attempt_count": op.attempt_count,
        "version": op.version,
        "created_at": op.created_at,
        "updated_at": op.updated_at,
    }


def decode(row: tuple[Any, ...]) -> Operation:
    """An operation from a row in :data:`COLUMNS` order; :class:`Corrupt` if it does not read."""
    r = dict(zip(COLUMNS, row, strict=True))
    rid = str(r["id"])
    try:
        return Operation(
            id=rid,
            environment=r["environment"],
            action=r["action"],
            operation_key=r["operation_key"],
            input=json.loads(r["input"]),
            input_fingerprint=r["input_fingerprint"],
            idempotency_key=r["idempotency_key"],
            retry_of=r["retry_of"],
            state=LocalState(r["state"]),
            invocation_id=r["invocation_id"],
            effect_id=r["effect_id"],
            approval_id=r["approval_id"],
            server_status=InvocationStatus(r["server_status"]) if r["server_status"] else None,
            server_record=None if r["server_record"] is None else json.loads(r["server_record"]),
            result=None if r["result"] is None else json.loads(r["result"]),
            last_error=r["last_error"],
            assignee=r["assignee"],
            attempt_count=int(r["attempt_count"]),
            version=int(r["version"]),
            created_at=int(r["created_at"]),
            updated_at=int(r["updated_at"]),
        )
    except (ValueError, TypeError, KeyError) as e:
        raise Corrupt(rid, str(e)) from e
