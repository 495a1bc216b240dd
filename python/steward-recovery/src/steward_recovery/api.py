"""The calls recovery makes, through the official SDK (``anlyon.Client``): invoke with the
operation's saved keys, read an invocation, long-poll an approval, ask for a reconcile. Every
resend here is the identical request with the same ``Idempotency-Key``; a new key is never drawn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from anlyon.errors import AnlyonError, NetworkError
from anlyon.errors import TimeoutError as SdkTimeout

from . import crash
from .config import BACKOFF_INITIAL_S, BACKOFF_MAX_S, LONG_POLL_WAIT_S_MAX, Config
from .state import InvocationStatus

_RETRYABLE_STATUSES = (429, 500, 502, 503, 504)


def _retryable(e: AnlyonError) -> bool:
    """Answers that say "not now" rather than "no": the request may be resent unchanged."""
    if isinstance(e, NetworkError | SdkTimeout):
        return True
    return e.status in _RETRYABLE_STATUSES or (
        e.status == 409 and e.code == "idempotency_request_in_progress"
    )


def refusal_is_final(e: BaseException) -> bool:
    """Invoke refusals that are final for this input: nothing was recorded and nothing ever will
    be (a 400, or a 404 ``NOT_FOUND`` for an unknown action)."""
    return isinstance(e, AnlyonError) and (
        e.status == 400 or (e.status == 404 and e.code == "NOT_FOUND")
    )


@dataclass(frozen=True)
class Invocation:
    """One invocation as the server returned it; ``raw`` is the whole record, as saved."""

    id: str
    status: InvocationStatus
    approval_id: str | None
    effect_id: str | None
    raw: dict[str, Any]

    @staticmethod
    def from_json(raw: Any) -> Invocation:
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise ValueError(f"not an invocation: {raw!r:.200}")
        return Invocation(
            id=raw["id"],
            status=InvocationStatus(raw["status"]),
            approval_id=raw.get("approvalId"),
            effect_id=raw.get("effectId"),
            raw=raw,
        )


def _data(answer: Any) -> Any:
    """The envelope's ``data`` (the SDK returns an ``ApiResponse``)."""
    return getattr(answer, "data", answer)


class Calls:
    """The server calls of the driver, over one ``anlyon.Client``."""

    def __init__(self, client: Any, config: Config) -> None:
        self.client = client
        self._config = config
        crash.arm_after_dispatch(client)

    def _again(self, call: Any) -> Any:
        """Runs ``call`` and, on a retryable failure, the identical call again (bounded)."""
        delay = BACKOFF_INITIAL_S
        for attempt in range(1, self._config.attempts_max + 1):
            try:
                return call()
            except AnlyonError as e:
                if not _retryable(e) or attempt == self._config.attempts_max:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def invoke(self, action: str, input: Any, operation_key: str, retry_of: str | None,
               idempotency_key: str) -> Invocation:
        """``POST /actions/{ref}/invoke`` with the saved keys. Answers with the recorded
        invocation whatever its status; an error means Steward refused before any invocation
        existed, or the answer never arrived."""
        answer = self._again(lambda: self.client.actions.invoke(
            action, input, idempotency_key=idempotency_key, retry_of=retry_of,
            operation_key=operation_key,
        ))
        return Invocation.from_json(_data(answer))

    def invocation(self, invocation_id: str) -> Invocation | None:
        """The invocation, or ``None`` when the server has no such one (404)."""
        try:
            answer = self._again(lambda: self.client.actions.invocation(invocation_id))
        except AnlyonError as e:
            if e.status == 404:
                return None
            raise
        return Invocation.from_json(_data(answer))

    def approval(self, approval_id: str, wait_s: float) -> dict[str, Any] | None:
        """Long-polls an existing approval (never creates one): answers as soon as a decision
        lands, or after the wait with the approval still pending; ``None`` on 404."""
        wait = max(0, min(int(wait_s), LONG_POLL_WAIT_S_MAX))
        try:
            answer = self._again(
                lambda: self.client.approvals.get(approval_id, wait_seconds=wait or None)
            )
        except AnlyonError as e:
            if e.status == 404:
                return None
            raise
        return _data(answer)

    def reconcile(self, effect_id: str) -> bool:
        """Asks the server for a read-only reconcile; ``False`` when it has no such endpoint."""
        try:
            self.client.actions.reconcile_effect(effect_id)
        except AnlyonError as e:
            if e.status in (404, 405):
                return False
            raise
        return True
