"""Framework glue: a tool call becomes a business operation with a stable key derived from the
application's own identifiers, so a retried tool call (the model asks again, the framework
retries, the process restarts) observes the first one instead of acting twice.

    @operation_tool(ops, "refund-order", key="refund:{order_id}")
    def refund(order_id: str, payment_intent: str, amount: int) -> dict:
        return {"paymentIntent": payment_intent, "amount": amount}   # the action's input

    refund("order-42", "pi_1", 1250)   # begins refund:order-42, runs it, returns the envelope
    refund("order-42", "pi_1", 1250)   # the same operation: nothing is sent again
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .operation import Operation
from .operations import Operations
from .state import LocalState

KeySpec = str | Callable[..., str]

_INSTRUCTIONS = {
    LocalState.CONTINUED: "done: this is the recorded result of the operation; do not call again",
    LocalState.PENDING_APPROVAL: (
        "waiting for a person to approve: call again with the same arguments to see the decision; "
        "never ask for another approval"
    ),
    LocalState.UNKNOWN: (
        "do not retry: the outcome is unknown and is being reconciled; call again with the same "
        "arguments to see the settled result"
    ),
    LocalState.RUNNING: "still running: call again with the same arguments to see the result",
    LocalState.SUBMITTED: "sent, no answer yet: call again with the same arguments; nothing is sent twice",
    LocalState.INTENDED: "recorded, not sent yet: call again with the same arguments",
}


def derive_key(key: KeySpec, arguments: Mapping[str, Any]) -> str:
    """The operation key of one call: ``key`` formatted with the call's arguments by name
    (``"refund:{order_id}"``), or ``key(**arguments)``. Never random, never the conversation."""
    if callable(key):
        return key(**arguments)
    return key.format(**arguments)


def tool_result(op: Operation) -> dict[str, Any]:
    """What a tool answers: the operation as it rests, the provider's answer when there is one,
    and an instruction in plain words."""
    record = op.server_record if isinstance(op.server_record, dict) else {}
    status = op.server_status.value if op.server_status else op.state.value
    if op.state in (LocalState.COMPLETED, LocalState.CONTINUED) and op.server_status is None:
        status = "failed"
    instruction = _INSTRUCTIONS.get(op.state)
    if instruction is None or op.state is LocalState.CONTINUED:
        instruction = (
            _INSTRUCTIONS[LocalState.CONTINUED] if status == "succeeded"
            else f"{status}: this operation will not run again under this key"
        )
    return {
        "status": status,
        "state": op.state.value,
        "operationKey": op.operation_key,
        "operationId": op.id,
        "invocationId": op.invocation_id,
        "effectId": op.effect_id,
        "approvalId": op.approval_id,
        "grade": record.get("grade"),
        "body": record.get("body"),
        "error": record.get("error") or op.last_error,
        "instruction": instruction,
    }


def call_operation(ops: Operations, operation_key: str, action: str, input: Any) -> dict[str, Any]:
    """One tool call as one business operation: begin (idempotent per key and input), run what
    is not at rest, and for a settled one make the final save and mark it continued (the
    continuation is handing the answer back). Returns :func:`tool_result`."""
    op = ops.begin(operation_key, action, input)
    if op.state in (LocalState.INTENDED, LocalState.SUBMITTED, LocalState.RUNNING,
                    LocalState.PENDING_APPROVAL, LocalState.UNKNOWN):
        op = ops.run(op)
    if op.state.is_settled():
        op = ops.complete(op, tool_result(op))
    if op.state is LocalState.COMPLETED:
        op = ops.mark_continued(op)
    return tool_result(op)


def operation_tool(ops: Operations, action: str, key: KeySpec) -> Callable[[Callable[..., Any]], Callable[..., dict[str, Any]]]:
    """A decorator: the decorated function turns the tool call's arguments into the action's
    input; the call runs as the business operation ``key`` names (see :func:`derive_key`),
    through :func:`call_operation`."""

    def wrap(build_input: Callable[..., Any]) -> Callable[..., dict[str, Any]]:
        signature = inspect.signature(build_input)

        @functools.wraps(build_input)
        def call(*args: Any, **kwargs: Any) -> dict[str, Any]:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            operation_key = derive_key(key, bound.arguments)
            return call_operation(ops, operation_key, action, build_input(*args, **kwargs))

        return call

    return wrap
