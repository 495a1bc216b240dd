"""How patient the driver is, and who reconciles: the Rust client's defaults."""

from __future__ import annotations

from dataclasses import dataclass

#: How long run and recover observe a pending approval before leaving it explicitly
#: ``pending_approval``, in seconds: two long polls. The next run observes the same approval.
APPROVAL_WAIT_S_DEFAULT = 110.0
#: How long the driver waits for a ``running`` invocation to settle, in seconds: Steward's
#: provider deadline (10 s by default) plus a wide margin.
SETTLE_WAIT_S_DEFAULT = 40.0
#: The pause between reads of an invocation that is still running, in seconds.
POLL_INTERVAL_S_DEFAULT = 0.2
#: Who an ``unknown`` outcome is assigned to unless the application says otherwise.
ASSIGNEE_DEFAULT = "reconciliation-queue"
#: The longest approval long poll the server grants, in seconds (it clamps to this).
LONG_POLL_WAIT_S_MAX = 55
#: Sends of one request, the first included, on answers that say "not now" (429, 5xx,
#: 409 ``idempotency_request_in_progress``) or a lost connection; each is the same request with
#: the same ``Idempotency-Key`` (the SDK's own retries run underneath, with the same key too).
TRANSPORT_ATTEMPTS_MAX = 8
#: The first pause between those sends, in seconds; it doubles up to the next.
BACKOFF_INITIAL_S = 0.1
#: The longest pause between those sends, in seconds.
BACKOFF_MAX_S = 2.0


@dataclass
class Config:
    environment: str
    """The Steward environment of the API key (part of each operation's identity)."""
    assignee: str = ASSIGNEE_DEFAULT
    approval_wait_s: float = APPROVAL_WAIT_S_DEFAULT
    settle_wait_s: float = SETTLE_WAIT_S_DEFAULT
    poll_interval_s: float = POLL_INTERVAL_S_DEFAULT
    attempts_max: int = TRANSPORT_ATTEMPTS_MAX
