"""The application's entry point: ``begin`` an operation (durably, before anything is sent),
``run`` it, ``complete`` it, mark its continuation done, and ``recover`` everything unfinished
after a restart (the Rust client's ``Operations``)."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from . import crash
from .api import Calls
from .config import Config
from .decide import RecoveryAction
from .drive import drive
from .errors import RunError, WrongState
from .journal.base import Journal, JournalError, NotFound
from .operation import Operation
from .state import InvocationStatus, LocalState

log = logging.getLogger("steward_recovery")


@dataclass
class Recovered:
    """What recovery did with one operation."""

    state_before: LocalState
    operation: Operation
    steps: list[RecoveryAction]
    error: str | None = None
    """Why it could not be brought to rest (it keeps its saved state)."""


@dataclass
class RecoveryReport:
    operations: list[Recovered] = field(default_factory=list)

    def _in(self, *states: LocalState) -> list[Operation]:
        return [r.operation for r in self.operations if r.operation.state in states]

    def to_complete(self) -> list[Operation]:
        """Settled by the server, waiting for the application's ``complete`` (and, for
        failures, its decision, which may be a new operation with ``retry_of``)."""
        return self._in(LocalState.SUCCEEDED, LocalState.FAILED, LocalState.DENIED,
                        LocalState.EXPIRED)

    def to_continue(self) -> list[Operation]:
        """Completed; the application's idempotent continuation is still to run."""
        return self._in(LocalState.COMPLETED)

    def pending_approval(self) -> list[Operation]:
        """Still waiting for a human decision: observed, not re-requested."""
        return self._in(LocalState.PENDING_APPROVAL)

    def unknown(self) -> list[Operation]:
        """Outcome unknown: assigned for reconciliation, not resent."""
        return self._in(LocalState.UNKNOWN)

    def errors(self) -> list[tuple[Operation, str]]:
        return [(r.operation, r.error) for r in self.operations if r.error is not None]

    def summary(self) -> str:
        """``state=count`` pairs, e.g. ``continued=2 unknown=1``."""
        counts = Counter(r.operation.state.value for r in self.operations)
        if not counts:
            return "nothing to recover"
        return " ".join(f"{s}={n}" for s, n in sorted(counts.items()))


class Operations:
    """Business operations against one Steward server through the official SDK, journaled in
    the application's database.

    ``client`` is an ``anlyon.Client`` with an agent key; ``journal`` a :class:`SqliteJournal`
    or :class:`PostgresJournal` on the application's connection; ``environment`` the key's
    Steward environment (part of each operation's identity)."""

    def __init__(self, client: Any, journal: Journal, config: Config | None = None, *,
                 environment: str | None = None) -> None:
        if config is None:
            if environment is None:
                raise ValueError("pass config=Config(environment=...) or environment=...")
            config = Config(environment=environment)
        self.config = config
        self.journal = journal
        self.calls = Calls(client, config)

    def begin(self, operation_key: str, action: str, input: Any,
              environment: str | None = None, *, join_transaction: bool = False) -> Operation:
        """Records the intent to invoke ``action`` with ``input`` under the stable
        ``operation_key``, durably and before anything is sent. Calling it again with the same
        key and input returns the same operation, in whatever state it has reached; with a
        different input it raises :class:`KeyConflict`.

        With ``join_transaction=True`` the intent is written into the transaction the caller has
        open on the journal's connection: it commits with the application's own rows, or is
        rolled back with them. Commit before ``run``; ``run`` refuses to send from inside it."""
        op = Operation.intended(environment or self.config.environment, action, operation_key,
                                input)
        return self.journal.begin(op, join=join_transaction).operation

    def begin_retry(self, failed: Operation, operation_key: str, input: Any) -> Operation:
        """Begins a new operation that retries ``failed`` (a settled-failed invocation) through
        the server's ``retryOf``. The retry needs its own operation key: the old key names the
        failed effect forever."""
        current = self._current(failed)
        is_failed = current.server_status is InvocationStatus.FAILED and current.state in (
            LocalState.FAILED, LocalState.COMPLETED, LocalState.CONTINUED)
        if not is_failed or current.invocation_id is None:
            raise WrongState(current.id, current.state,
                             "be retried (only a settled-failed invocation can be)")
        op = Operation.intended(current.environment, current.action, operation_key, input,
                                retry_of=current.invocation_id)
        return self.journal.begin(op).operation

    def run(self, op: Operation) -> Operation:
        """Dispatches the operation or observes it, per its saved state, until it rests:
        settled, ``unknown`` (assigned for reconciliation), or still pending approval / running
        after the configured waits. A timeout or a lost connection leaves the saved state and
        keys as they are: running it again resends the same request, never a new one."""
        return drive(self, self._current(op))[0]

    def complete(self, op: Operation, result: Any) -> Operation:
        """The final local save: records the application's ``result`` for a settled operation.
        Idempotent on an operation already completed."""
        current = self._current(op)
        if current.state in (LocalState.COMPLETED, LocalState.CONTINUED):
            return current
        if not current.state.is_settled():
            raise WrongState(current.id, current.state, "complete (it is not settled)")
        saved = self.journal.save(current.evolve(state=LocalState.COMPLETED, result=result))
        crash.reach(crash.AFTER_SAVE)
        return saved

    def mark_continued(self, op: Operation) -> Operation:
        """Records that the application's (idempotent) continuation of a completed operation is
        done. Idempotent."""
        current = self._current(op)
        if current.state is LocalState.CONTINUED:
            return current
        if current.state is not LocalState.COMPLETED:
            raise WrongState(current.id, current.state,
                             "mark the continuation done (it is not completed)")
        return self.journal.save(current.evolve(state=LocalState.CONTINUED))

    def recover(self) -> RecoveryReport:
        """Loads every operation not yet ``continued`` and drives each: a known invocation is
        read; one with no invocation id is resent with its saved keys (the server returns the
        original); a pending approval is observed; ``unknown`` is assigned for reconciliation;
        settled ones are handed back in the report.

        Only a journal failure fails the whole call; an operation the server could not be asked
        about keeps its state and is listed with its error."""
        report = RecoveryReport()
        for op in self.journal.unfinished():
            before = op.state
            try:
                operation, steps = drive(self, op)
                recovered = Recovered(before, operation, steps)
            except JournalError:
                raise
            except RunError as e:
                stored = self.journal.get(op.id)
                if stored is None:
                    raise NotFound(op.id) from e
                recovered = Recovered(before, stored, [], str(e))
            log.info("recovered %s: %s -> %s %s %s", op.id, before.value,
                     recovered.operation.state.value, [str(s) for s in recovered.steps],
                     recovered.error or "")
            report.operations.append(recovered)
        return report

    def _current(self, op: Operation) -> Operation:
        current = self.journal.get(op.id)
        if current is None:
            raise NotFound(op.id)
        return current
