"""LangChain glue (``langchain-core``): a tool that stands for a Steward action becomes one whose
every call is a business operation under a key derived from its arguments.

    from anlyon_langchain import action_tools           # or any BaseTool named after an action
    from steward_recovery.langchain import recoverable_tool

    refund = recoverable_tool(tool, ops, key="refund:{orderId}")

The wrapped tool keeps the original's name, description and argument schema; its own function is
not called (it would invoke without the journal's keys): the call goes through
:func:`steward_recovery.tools.call_operation` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from .operations import Operations
from .tools import KeySpec, call_operation, derive_key

_DESCRIPTION_NOTE = (
    " Calling again with the same arguments returns the first call's result; it never acts twice."
)


def recoverable_tool(tool: BaseTool, ops: Operations, key: KeySpec, *,
                     action: str | None = None,
                     input: Callable[..., Any] | None = None) -> StructuredTool:
    """``tool`` as a crash-safe business operation on ``action`` (default: the tool's name).
    ``key`` derives the operation key from the call's arguments; ``input`` builds the action's
    input from them (default: the arguments as they are)."""
    name = action or tool.name

    def run(**tool_input: Any) -> dict[str, Any]:
        action_input = input(**tool_input) if input is not None else tool_input
        return call_operation(ops, derive_key(key, tool_input), name, action_input)

    return StructuredTool.from_function(
        func=run,
        name=tool.name,
        description=(tool.description or name) + _DESCRIPTION_NOTE,
        args_schema=tool.args_schema,
        infer_schema=False,
    )


def action_tools(ops: Operations, keys: Mapping[str, KeySpec], *,
                 names: Sequence[str] | None = None) -> list[StructuredTool]:
    """One crash-safe tool per enabled action that has a key in ``keys`` (action name to key
    template), built from the server's action list as ``anlyon_langchain.action_tools`` builds
    it (the SDK's own description and schema helpers)."""
    from anlyon.integrations.action_tools import action_tool_description, action_tool_input_schema

    wanted = set(names) if names is not None else None
    tools = []
    for action in ops.calls.client.actions.list().data:
        action_name = action["name"]
        if not action.get("enabled", True) or action_name not in keys:
            continue
        if wanted is not None and action_name not in wanted:
            continue
        base = StructuredTool.from_function(
            func=lambda **_: None, name=action_name,
            description=action_tool_description(action),
            args_schema=action_tool_input_schema(action), infer_schema=False,
        )
        tools.append(recoverable_tool(base, ops, keys[action_name]))
    return tools
