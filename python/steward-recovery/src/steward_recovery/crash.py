"""The client's crash points (docs/INVARIANTS.md, the crash windows), armed by
``STEWARD_CRASH_AT=<name>`` with the Rust client's names. Reaching the armed point aborts the
process at once (``os.abort``: no ``finally``, no flush, no atexit, like SIGKILL). Server points
(``server_*``) are ignored here. Unarmed, a check is one comparison."""

from __future__ import annotations

import os
import sys

CRASH_AT_ENV = "STEWARD_CRASH_AT"

BEFORE_DISPATCH = "before_dispatch"
"""The operation is durably submitted, nothing sent."""
AFTER_DISPATCH = "after_dispatch"
"""The invoke is sent and Steward has answered; nothing of the answer is read."""
AFTER_RESPONSE = "after_response"
"""The answer is read, not saved locally."""
AWAITING_APPROVAL = "awaiting_approval"
"""The operation is saved as parked for approval."""
AFTER_SAVE = "after_save"
"""The final local save (``complete``) is done, the continuation not."""

#: The client points, in the order of the crash-windows table.
CLIENT_POINTS = (BEFORE_DISPATCH, AFTER_DISPATCH, AFTER_RESPONSE, AWAITING_APPROVAL, AFTER_SAVE)


def armed() -> str | None:
    """The armed client point, read from the environment once per process."""
    global _ARMED
    if _ARMED is _UNREAD:
        value = os.environ.get(CRASH_AT_ENV, "").strip()
        _ARMED = value if value in CLIENT_POINTS else None
    return _ARMED  # type: ignore[return-value]


_UNREAD = object()
_ARMED: object = _UNREAD


def reach(point: str) -> None:
    """Aborts the process if ``point`` is the armed crash point."""
    assert point in CLIENT_POINTS, f"not a client crash point: {point}"
    if armed() == point:
        sys.stderr.write(f"steward-recovery: crash point {point} reached; aborting\n")
        sys.stderr.flush()
        os.abort()


def arm_after_dispatch(client: object) -> None:
    """Installs the ``after_dispatch`` point on an ``anlyon.Client``: an httpx response hook,
    which runs once the invoke's status line and headers are in and before its body is read.
    Installed only while that point is armed (the SDK keeps its httpx client private, so this
    is the one place that reaches into it)."""
    if armed() != AFTER_DISPATCH:
        return
    try:
        hooks = client._http._client.event_hooks["response"]  # type: ignore[attr-defined]
    except (AttributeError, KeyError) as e:
        raise RuntimeError(
            "after_dispatch is armed but this anlyon SDK has no httpx response hook to hold it"
        ) from e

    def hook(response: object) -> None:
        request = response.request  # type: ignore[attr-defined]
        if request.method == "POST" and request.url.path.endswith("/invoke"):
            reach(AFTER_DISPATCH)

    if hook not in hooks:
        hooks.append(hook)
