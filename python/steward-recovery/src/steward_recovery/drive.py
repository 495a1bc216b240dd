"""The driver: observe, ask :func:`decide`, perform the action, save, and again, until the
operation rests. ``run`` and ``recover`` both use it, so a first run and a recovery after a
crash take the same path through the same pure decision (the Rust client's ``drive.rs``)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from . import crash
from .api import Invocation, refusal_is_final
from .decide import RecoveryAction, ServerView, decide
from .errors import ApiFailure, ContradictionError
from .operation import Operation
from .state import LocalState

if TYPE_CHECKING:
    from .operations import Operations

log = logging.getLogger("steward_recovery")

#: The most steps one drive takes; each step is one decision. Waits are bounded by time (the
#: config); this bounds the loop itself against a server that keeps changing its mind.
DRIVE_STEPS_MAX = 10_000


class _Waits:
    """When each kind of waiting began, to bound it."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}

    def remaining(self, kind: str, budget_s: float) -> float | None:
        since = self.started.setdefault(kind, time.monotonic())
        left = budget_s - (time.monotonic() - since)
        return left if left > 0 else None


def drive(ops: Operations, op: Operation) -> tuple[Operation, list[RecoveryAction]]:
    """Drives ``op`` until it rests; returns it with the actions taken, in order."""
    steps: list[RecoveryAction] = []
    in_hand: Invocation | None = None
    waits = _Waits()
    reconciled = False
    for _ in range(DRIVE_STEPS_MAX):
        if in_hand is not None:
            view, inv, in_hand = ServerView.of(in_hand.status), in_hand, None
        else:
            view, inv = _observe(ops, op)
        action = decide(op.state, view)
        steps.append(action)
        kind = action.kind
        if kind == "dispatch":
            op, answer = _dispatch(ops, op)
            if answer is None:
                return op, steps
            in_hand = answer
        elif kind == "adopt":
            assert inv is not None, "a status view carries its invocation"
            op = _adopt(ops, op, inv)
        elif kind == "observe_approval":
            left = waits.remaining("approval", ops.config.approval_wait_s)
            if left is None:
                return op, steps
            _observe_approval(ops, op, left)
        elif kind == "await_settlement":
            if waits.remaining("settle", ops.config.settle_wait_s) is None:
                return op, steps
            time.sleep(ops.config.poll_interval_s)
        elif kind == "assign_reconciliation":
            assert inv is not None, "a status view carries its invocation"
            op, ran = _assign_reconciliation(ops, op, inv, try_server=not reconciled)
            if not ran or reconciled:
                return op, steps
            # The server reconciled: read the invocation once more in case it settled.
            reconciled = True
        elif kind in ("complete", "continue", "surface", "done"):
            return op, steps
        else:
            assert kind == "escalate" and action.contradiction is not None, action
            message = (
                f"the journal says {op.state.value} but the server says {view} "
                f"({action.contradiction.value})"
            )
            if op.last_error != message:
                op = ops.journal.save(op.evolve(last_error=message))
            raise ContradictionError(op.id, op.state, view, action.contradiction)
    return op, steps


def _observe(ops: Operations, op: Operation) -> tuple[ServerView, Invocation | None]:
    """Reads the invocation the journal names, if it names one."""
    if op.invocation_id is None:
        return ServerView.no_invocation_known(), None
    try:
        inv = ops.calls.invocation(op.invocation_id)
    except Exception as e:
        raise ApiFailure(op.id, e) from e
    if inv is None:
        return ServerView.not_found(), None
    return ServerView.of(inv.status), inv


def _dispatch(ops: Operations, op: Operation) -> tuple[Operation, Invocation | None]:
    """Marks the operation submitted (durably), then sends the invoke with its saved keys.
    Returns the invocation the server answered with, or ``None`` when the server refused for
    good (the operation is then settled ``failed`` locally)."""
    op = ops.journal.save(op.evolve(
        state=LocalState.SUBMITTED, attempt_count=op.attempt_count + 1, last_error=None,
    ))
    crash.reach(crash.BEFORE_DISPATCH)
    try:
        inv = ops.calls.invoke(op.action, op.input, op.operation_key, op.retry_of,
                               op.idempotency_key)
    except Exception as e:
        if refusal_is_final(e):
            failed = op.evolve(state=LocalState.FAILED, last_error=str(e))
            return ops.journal.save(failed), None
        # Nothing is known beyond "may have been sent": the operation stays submitted with its
        # keys, and the next run resends the identical request.
        ops.journal.save(op.evolve(last_error=str(e)))
        raise ApiFailure(op.id, e) from e
    crash.reach(crash.AFTER_RESPONSE)
    return op, inv


def _record(op: Operation, inv: Invocation, state: LocalState) -> Operation:
    """Copies the server's view of the invocation into a new record."""
    assert op.invocation_id in (None, inv.id), (
        f"{op.id}: the server answered with {inv.id} but the journal names {op.invocation_id}"
    )
    return op.evolve(
        state=state,
        invocation_id=inv.id,
        effect_id=inv.effect_id or op.effect_id,
        approval_id=inv.approval_id or op.approval_id,
        server_status=inv.status,
        server_record=inv.raw,
        last_error=None,
    )


def _adopt(ops: Operations, op: Operation, inv: Invocation) -> Operation:
    state = LocalState.from_server(inv.status)
    saved = ops.journal.save(_record(op, inv, state))
    if state is LocalState.PENDING_APPROVAL:
        crash.reach(crash.AWAITING_APPROVAL)
    return saved


def _observe_approval(ops: Operations, op: Operation, left_s: float) -> None:
    """Long-polls the operation's existing approval (never creates one). Returns when a
    decision lands or the wait ends; the caller reads the invocation again."""
    if op.approval_id is None:
        time.sleep(ops.config.poll_interval_s)
        return
    try:
        approval = ops.calls.approval(op.approval_id, left_s)
    except Exception as e:
        raise ApiFailure(op.id, e) from e
    if approval is None or approval.get("status") != "pending":
        # Decided (give the server a moment to move the invocation on), or no long poll on this
        # server (fall back to reading the invocation).
        time.sleep(ops.config.poll_interval_s)


def _assign_reconciliation(ops: Operations, op: Operation, inv: Invocation,
                           try_server: bool) -> tuple[Operation, bool]:
    """Saves the operation ``unknown`` with an assignee and asks the server to reconcile when it
    can (``try_server``). Returns whether the server ran a reconcile. Never resends."""
    nxt = _record(op, inv, LocalState.UNKNOWN)
    nxt = nxt.evolve(assignee=nxt.assignee or ops.config.assignee)
    unchanged = (
        nxt.state is op.state and nxt.assignee == op.assignee
        and nxt.server_status == op.server_status and nxt.server_record == op.server_record
    )
    if not unchanged:
        op = ops.journal.save(nxt)
    if op.effect_id is None or not try_server:
        return op, False
    try:
        return op, ops.calls.reconcile(op.effect_id)
    except Exception as e:
        # The local assignment stands; the server-side reconcile can be asked again.
        log.warning("%s: reconcile request failed; the operation stays assigned: %s", op.id, e)
        return op, False
