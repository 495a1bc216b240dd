"""One business operation, as the journal records it, and the identities it carries."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, replace
from typing import Any

from .state import InvocationStatus, LocalState

#: The prefix of every operation id (the Rust client's ``OperationId::PREFIX``).
OPERATION_ID_PREFIX = "op_"
#: The longest operation or idempotency key Steward accepts, in bytes.
CLIENT_KEY_LEN_MAX = 255
#: The longest id suffix Steward accepts after its prefix, in characters.
ID_SUFFIX_LEN_MAX = 64

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def now_ms() -> int:
    """Milliseconds since the Unix epoch: the journal's timestamps."""
    return time.time_ns() // 1_000_000


def new_operation_id() -> str:
    """``op_`` and a fresh lower-case ULID (48 bits of milliseconds, 80 random bits), the form
    the Rust client draws."""
    n = (now_ms() << 80) | int.from_bytes(os.urandom(10), "big")
    return OPERATION_ID_PREFIX + "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


def idempotency_key_for(operation_id: str) -> str:
    """The ``Idempotency-Key`` of an operation's invoke: derived from its id alone, so the same
    operation sends the same key in this process and after any restart."""
    return f"{operation_id}:attempt-1"


def check_client_key(value: str, what: str = "operation key") -> str:
    """Steward's rule for client-chosen keys: 1 to 255 bytes of printable ASCII."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"the {what} must not be empty")
    if len(value.encode()) > CLIENT_KEY_LEN_MAX:
        raise ValueError(f"the {what} must be at most {CLIENT_KEY_LEN_MAX} bytes")
    if not all(0x20 <= ord(c) < 0x7F for c in value):
        raise ValueError(f"the {what} must contain only printable ASCII characters: {value!r}")
    return value


def canonical_json(value: Any) -> str:
    """Sorted object keys, no insignificant whitespace: Steward's canonical form (for integers,
    strings, booleans, null and the usual floats)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def fingerprint(value: Any) -> str:
    """``sha256:`` and the hex digest of the canonical form (``steward_core::fingerprint``)."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode()).hexdigest()


def compact_json(value: Any) -> str:
    """How the journal stores a JSON value (as the Rust client's ``Value::to_string``)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True)
class Operation:
    """The application's durable record of one intended action. Frozen: every change is a new
    record, saved with compare-and-set on ``version``."""

    id: str
    environment: str
    action: str
    operation_key: str
    input: Any
    input_fingerprint: str
    idempotency_key: str
    retry_of: str | None
    state: LocalState
    invocation_id: str | None = None
    effect_id: str | None = None
    approval_id: str | None = None
    server_status: InvocationStatus | None = None
    server_record: Any = None
    result: Any = None
    last_error: str | None = None
    assignee: str | None = None
    attempt_count: int = 0
    version: int = 0
    created_at: int = 0
    updated_at: int = 0

    @staticmethod
    def intended(environment: str, action: str, operation_key: str, input: Any,
                 retry_of: str | None = None, *, id: str | None = None,
                 now: int | None = None) -> Operation:
        """A new operation in state ``intended``, not yet in any journal."""
        op_id = id or new_operation_id()
        at = now_ms() if now is None else now
        return Operation(
            id=op_id,
            environment=environment,
            action=action,
            operation_key=check_client_key(operation_key),
            input=input,
            input_fingerprint=fingerprint(input),
            idempotency_key=idempotency_key_for(op_id),
            retry_of=retry_of,
            state=LocalState.INTENDED,
            created_at=at,
            updated_at=at,
        )

    def evolve(self, **changes: Any) -> Operation:
        """A copy with ``changes`` and ``updated_at`` set to now (the version is the journal's)."""
        changes.setdefault("updated_at", now_ms())
        return replace(self, **changes)
