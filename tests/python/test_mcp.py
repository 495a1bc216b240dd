"""MCP: the official Python `mcp` client (PyPI, pinned in requirements.txt), unchanged, against a
real Steward over both transports: stdio (`steward mcp --server URL`, the agent key in
STEWARD_API_KEY) and Streamable HTTP (`/mcp`, the agent key as a bearer token).

Every call opens a new connection, so a repeated call carries a new JSON-RPC id and only the
operation key ties it to the first. Provider writes are counted at the fixture.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import secrets as pysecrets
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp.types as mcp_types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from conftest import (
    LOOPBACK,
    STRIPE_SECRET_NAME,
    STRIPE_SECRET_VALUE,
    _DIRECT,
    Proc,
    Steward,
    child_env,
    create_key,
    steward_bin,
)

TRANSPORTS = ["stdio", "http"]
# The revision the client offers: the newest it knows, and the one before it (older hosts).
CURRENT_PROTOCOL = mcp_types.LATEST_PROTOCOL_VERSION
PREVIOUS_PROTOCOL = "2025-06-18"
PROTOCOLS = [CURRENT_PROTOCOL, PREVIOUS_PROTOCOL]
# One MCP exchange (connect, initialize, one request), in seconds: generous; nothing is timed.
EXCHANGE_TIMEOUT_S = 60.0

# Every tools/list and tools/call answer either transport returned; the canary check reads them.
ANSWERS: list[str] = []


class World:
    """Two environments made for these tests, so the tool lists are known exactly."""

    def __init__(self, steward: Steward) -> None:
        self.steward = steward
        d = steward.data_dir
        self.operator_key = create_key(d, "mcp-main", "mcp-op", role="operator")
        self.operator = steward.client(self.operator_key)
        self.agent_key = create_key(d, "mcp-main", "mcp-agent")
        self.reader_key = create_key(d, "mcp-main", "mcp-reader", scopes=["actions:read"])
        self.other_operator = steward.client(create_key(d, "mcp-other", "mcp-other-op", role="operator"))
        self.other_agent_key = create_key(d, "mcp-other", "mcp-other-agent")
        for op in (self.operator, self.other_operator):
            op.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                           allowed_hosts=[steward.fixture_host])
        adapter = {
            "type": "stripe.refund",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": steward.fixture_url},
            "credentialSecret": STRIPE_SECRET_NAME,
        }
        # A dotted name: offered as `mcp_refund`.
        self.operator.actions.create(name="mcp.refund", description="Refund a payment",
                                     adapter=dict(adapter))
        self.operator.actions.create(name="mcp-gated-refund", adapter=dict(adapter),
                                     requires_approval=True)
        self.other_operator.actions.create(name="mcp-other-refund", adapter=dict(adapter))
        # Raw HTTP: the SDK has no parameter for what an MCP call without a key does.
        created = post_api(steward, self.operator_key, "/actions", {
            "name": "mcp-derived-refund", "adapter": dict(adapter),
            "mcpMissingOperationKey": "derive"})
        assert created["data"]["mcpMissingOperationKey"] == "derive", created


def post_api(steward: Steward, key: str, path: str, body: Any) -> Any:
    request = urllib.request.Request(
        steward.url + "/api/v2" + path, method="POST", data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with _DIRECT.open(request, timeout=EXCHANGE_TIMEOUT_S) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def world(steward: Steward) -> World:
    return World(steward)


@asynccontextmanager
async def connect(steward: Steward, key: str, transport: str,
                  protocol: str = CURRENT_PROTOCOL) -> AsyncIterator[ClientSession]:
    """A new initialized session offering `protocol`; the server must agree to it."""
    async def initialized(session: ClientSession) -> ClientSession:
        # The client offers the module's newest revision; an older host offers an older one.
        offered, mcp_types.LATEST_PROTOCOL_VERSION = mcp_types.LATEST_PROTOCOL_VERSION, protocol
        try:
            result = await session.initialize()
        finally:
            mcp_types.LATEST_PROTOCOL_VERSION = offered
        assert result.protocolVersion == protocol, result
        return session

    if transport == "http":
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(headers=headers, timeout=EXCHANGE_TIMEOUT_S) as http:
            async with streamable_http_client(steward.url + "/mcp", http_client=http) as (
                    read, write, _):
                async with ClientSession(read, write) as session:
                    yield await initialized(session)
    else:
        params = StdioServerParameters(
            command=str(steward_bin()),
            args=["mcp", "--server", steward.url],
            env={**child_env(), "STEWARD_API_KEY": key},
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                yield await initialized(session)


def list_tools(steward: Steward, key: str, transport: str,
               protocol: str = CURRENT_PROTOCOL) -> list[Any]:
    async def go() -> list[Any]:
        async with connect(steward, key, transport, protocol) as session:
            listed = await session.list_tools()
            ANSWERS.append(listed.model_dump_json())
            return listed.tools

    return asyncio.run(asyncio.wait_for(go(), EXCHANGE_TIMEOUT_S))


def call(steward: Steward, key: str, transport: str, tool: str, arguments: dict[str, Any],
         meta: dict[str, Any] | None = None,
         protocol: str = CURRENT_PROTOCOL,
         progress: list[str] | None = None) -> tuple[bool, dict[str, Any]]:
    """One tools/call on a new connection: (isError, the envelope). With `progress`, the call
    carries a progress token and each notification's message is appended to it."""
    async def on_progress(_done: float, _total: float | None, message: str | None) -> None:
        assert progress is not None
        progress.append(message or "")

    async def go() -> tuple[bool, dict[str, Any]]:
        async with connect(steward, key, transport, protocol) as session:
            result = await session.call_tool(
                tool, arguments, meta=meta,
                progress_callback=on_progress if progress is not None else None)
            ANSWERS.append(result.model_dump_json())
            envelope = result.structuredContent
            assert envelope is not None, result
            # The same envelope is the text content, for hosts that show only text.
            assert json.loads(result.content[0].text) == envelope
            return bool(result.isError), envelope

    return asyncio.run(asyncio.wait_for(go(), EXCHANGE_TIMEOUT_S))


def refund(amount: int = 1000) -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": amount}


def op_key(transport: str) -> str:
    return f"mcp-{transport}-{uuid.uuid4()}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mcp_lists_exactly_the_actions_the_key_may_invoke(
        world: World, steward: Steward, transport: str, protocol: str) -> None:
    tools = {t.name: t for t in list_tools(steward, world.agent_key, transport, protocol)}
    assert sorted(tools) == ["mcp-derived-refund", "mcp-gated-refund", "mcp_refund"]
    refund_tool = tools["mcp_refund"]
    props = refund_tool.inputSchema["properties"]
    assert props["operationKey"]["type"] == "string"
    assert "Reuse the same key" in props["operationKey"]["description"]
    assert refund_tool.description.startswith("Refund a payment")
    assert refund_tool.description.startswith(
        "Refund a payment. Impact: changes money (usd), resource_mutations through the "
        "stripe.refund adapter."), refund_tool.description
    annotations = refund_tool.annotations
    assert annotations.readOnlyHint is False and annotations.idempotentHint is True
    assert annotations.destructiveHint is True and annotations.openWorldHint is True
    other = [t.name for t in list_tools(steward, world.other_agent_key, transport, protocol)]
    assert other == ["mcp-other-refund"]
    # A key that may not invoke is offered nothing.
    assert list_tools(steward, world.reader_key, transport, protocol) == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mcp_call_writes_once_and_a_replay_on_a_new_connection_returns_the_recorded_result(
        world: World, steward: Steward, transport: str, protocol: str) -> None:
    key, payload = op_key(transport), refund()
    before = steward.fixture_writes()
    is_error, first = call(steward, world.agent_key, transport, "mcp_refund",
                           {**payload, "operationKey": key}, protocol=protocol)
    assert not is_error, first
    assert first["status"] == "succeeded" and first["operationKey"] == key
    assert first["invocationId"].startswith("inv_") and first["effectId"]
    assert first["result"]["id"].startswith("re_"), first
    assert steward.fixture_writes() == before + 1

    is_error, again = call(steward, world.agent_key, transport, "mcp_refund",
                           {**payload, "operationKey": key}, protocol=protocol)
    assert not is_error and again["status"] == "succeeded"
    assert again["invocationId"] == first["invocationId"]
    assert again["result"] == first["result"]
    assert steward.fixture_writes() == before + 1, "a replay never writes again"

    is_error, conflict = call(steward, world.agent_key, transport, "mcp_refund",
                              {**payload, "amount": 1001, "operationKey": key},
                              protocol=protocol)
    assert is_error and conflict["status"] == "conflict", conflict
    assert conflict["error"]["code"] == "operation_key_conflict"
    assert steward.fixture_writes() == before + 1, "a conflict writes nothing"


def test_mcp_operation_key_in_meta_is_the_same_operation_as_the_argument(
        world: World, steward: Steward) -> None:
    key, payload = op_key("meta"), refund()
    before = steward.fixture_writes()
    _, first = call(steward, world.agent_key, "http", "mcp_refund", payload,
                    meta={"steward/operationKey": key})
    assert first["status"] == "succeeded" and first["operationKey"] == key, first
    _, again = call(steward, world.agent_key, "stdio", "mcp_refund",
                    {**payload, "operationKey": key})
    assert again["invocationId"] == first["invocationId"]
    assert steward.fixture_writes() == before + 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mcp_call_without_an_operation_key_is_refused_with_no_write(
        world: World, steward: Steward, transport: str) -> None:
    before = steward.fixture_writes()
    is_error, refused = call(steward, world.agent_key, transport, "mcp_refund", refund())
    assert is_error and refused["status"] == "rejected", refused
    assert refused["error"]["code"] == "operation_key_required"
    assert "call again with an operationKey" in refused["instruction"]
    assert refused["invocationId"] is None
    assert steward.fixture_writes() == before


def test_mcp_an_action_that_derives_keys_takes_an_identical_call_for_a_retry(
        world: World, steward: Steward) -> None:
    payload = refund()
    before = steward.fixture_writes()
    is_error, first = call(steward, world.agent_key, "http", "mcp-derived-refund", payload)
    assert not is_error and first["status"] == "succeeded", first
    assert first["operationKeyDerived"] is True
    assert first["operationKey"].startswith("mcp-derived:")
    assert "Steward derived one" in first["instruction"]
    assert steward.fixture_writes() == before + 1
    # The host retries on a new connection (a new JSON-RPC id), over the other transport.
    _, again = call(steward, world.agent_key, "stdio", "mcp-derived-refund", payload)
    assert again["invocationId"] == first["invocationId"], again
    assert again["operationKey"] == first["operationKey"]
    assert steward.fixture_writes() == before + 1, "a retry without a key never writes again"
    # Other arguments are another operation.
    _, other = call(steward, world.agent_key, "http", "mcp-derived-refund", refund())
    assert other["status"] == "succeeded" and other["invocationId"] != first["invocationId"]
    assert steward.fixture_writes() == before + 2
    # The refusing action is not affected by its neighbour's choice.
    _, refused = call(steward, world.agent_key, "http", "mcp_refund", payload)
    assert refused["error"]["code"] == "operation_key_required"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mcp_a_progress_token_hears_each_stage_before_the_result(
        world: World, steward: Steward, transport: str) -> None:
    heard: list[str] = []
    _, done = call(steward, world.agent_key, transport, "mcp_refund",
                   {**refund(), "operationKey": op_key(transport)}, progress=heard)
    assert done["status"] == "succeeded", done
    assert heard == ["policy evaluated: the call may run",
                     "the attempt is recorded; dispatching to the provider",
                     "settled: succeeded"], heard
    heard = []
    _, parked = call(steward, world.agent_key, transport, "mcp-gated-refund",
                     {**refund(), "operationKey": op_key(transport)}, progress=heard)
    assert parked["status"] == "pending_approval", parked
    assert heard == ["policy evaluated: a person must approve the call",
                     "awaiting approval"], heard


def test_mcp_without_a_progress_token_the_answer_is_plain_json_with_no_notification(
        world: World, steward: Steward) -> None:
    def post(params: dict[str, Any]) -> tuple[str, str]:
        body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                           "params": params}).encode()
        request = urllib.request.Request(steward.url + "/mcp", data=body, method="POST", headers={
            "Authorization": f"Bearer {world.agent_key}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        with _DIRECT.open(request, timeout=EXCHANGE_TIMEOUT_S) as response:
            return response.headers.get("Content-Type", ""), response.read().decode()

    arguments = {**refund(), "operationKey": op_key("plain")}
    content_type, text = post({"name": "mcp_refund", "arguments": arguments})
    assert content_type.startswith("application/json"), content_type
    assert "notifications/progress" not in text
    content_type, text = post({"name": "mcp_refund", "arguments": arguments,
                               "_meta": {"progressToken": "p-1"}})
    assert content_type.startswith("text/event-stream"), content_type
    assert text.count("notifications/progress") == 2, text  # a replay: policy, then settled
    assert text.index("notifications/progress") < text.index('"result"')


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mcp_invalid_input_is_an_error_naming_the_field(
        world: World, steward: Steward, transport: str) -> None:
    before = steward.fixture_writes()
    is_error, refused = call(steward, world.agent_key, transport, "mcp_refund",
                             {"paymentIntent": "pi_x", "amount": -5,
                              "operationKey": op_key(transport)})
    assert is_error and refused["status"] == "rejected", refused
    assert refused["error"]["code"] == "VALIDATION_ERROR"
    assert "input.amount" in refused["error"]["message"]
    assert steward.fixture_writes() == before


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mcp_gated_call_is_pending_then_observed_then_dispatched_once_after_approval(
        world: World, steward: Steward, transport: str) -> None:
    key, payload = op_key(transport), refund()
    args = {**payload, "operationKey": key}
    before = steward.fixture_writes()
    is_error, parked = call(steward, world.agent_key, transport, "mcp-gated-refund", args)
    assert not is_error and parked["status"] == "pending_approval", parked
    assert parked["approvalId"].startswith("apr_")
    assert "a person must approve this" in parked["instruction"]

    _, observed = call(steward, world.agent_key, transport, "mcp-gated-refund", args)
    assert observed["status"] == "pending_approval"
    assert observed["approvalId"] == parked["approvalId"]
    assert observed["invocationId"] == parked["invocationId"]
    pending = world.operator.approvals.list(status="pending").data
    assert [a["id"] for a in pending].count(parked["approvalId"]) == 1
    assert steward.fixture_writes() == before, "nothing runs while parked"

    decided = world.operator.approvals.approve(parked["approvalId"], note="ok").data
    assert decided["approval"]["status"] == "approved"
    assert decided["invocation"]["status"] == "succeeded", "dispatched before the answer"
    _, done = call(steward, world.agent_key, transport, "mcp-gated-refund", args)
    assert done["status"] == "succeeded", done
    assert done["invocationId"] == parked["invocationId"]
    assert steward.fixture_writes() == before + 1
    _, again = call(steward, world.agent_key, transport, "mcp-gated-refund", args)
    assert again["status"] == "succeeded"
    assert steward.fixture_writes() == before + 1


def test_mcp_denied_call_is_an_error_with_the_decision_note_and_no_write(
        world: World, steward: Steward) -> None:
    args = {**refund(), "operationKey": op_key("deny")}
    before = steward.fixture_writes()
    _, parked = call(steward, world.agent_key, "http", "mcp-gated-refund", args)
    assert parked["status"] == "pending_approval", parked
    world.operator.approvals.deny(parked["approvalId"], note="not this customer")
    is_error, denied = call(steward, world.agent_key, "stdio", "mcp-gated-refund", args)
    assert is_error and denied["status"] == "denied", denied
    assert denied["approvalId"] == parked["approvalId"]
    assert denied["decisionNote"] == "not this customer"
    assert "do not retry" in denied["instruction"]
    assert steward.fixture_writes() == before


def test_mcp_unknown_outcome_says_do_not_retry_and_a_recall_never_resends(
        world: World, faults: Steward) -> None:
    steward = faults
    args = {**refund(), "operationKey": op_key("unknown")}
    before = steward.fixture_writes()
    steward.set_fault("drop_after_commit")
    is_error, unknown = call(steward, world.agent_key, "http", "mcp_refund", args)
    assert is_error and unknown["status"] == "unknown", unknown
    assert unknown["instruction"].startswith("do not retry: the outcome is unknown")
    assert steward.fixture_writes() == before + 1
    steward.clear_faults()
    # The background reconciler is off in this suite: the outcome stays unknown, and the
    # re-call observes it instead of sending again.
    is_error, again = call(steward, world.agent_key, "stdio", "mcp_refund", args)
    assert is_error and again["status"] == "unknown"
    assert again["effectId"] == unknown["effectId"]
    assert steward.fixture_writes() == before + 1


def test_mcp_calls_are_refused_with_no_write_while_the_environment_is_halted(
        world: World, steward: Steward) -> None:
    before = steward.fixture_writes()
    world.other_operator.environment.halt(reason="mcp incident")
    try:
        for transport in TRANSPORTS:
            is_error, refused = call(steward, world.other_agent_key, transport, "mcp-other-refund",
                                     {**refund(), "operationKey": op_key(transport)})
            assert is_error and refused["status"] == "rejected", refused
            assert refused["error"]["code"] == "environment_halted"
    finally:
        world.other_operator.environment.resume()
    assert steward.fixture_writes() == before


def test_mcp_stdio_tells_the_host_when_the_tool_list_changes(steward: Steward) -> None:
    d = steward.data_dir
    operator_key = create_key(d, "mcp-changes", "changes-op", role="operator")
    agent_key = create_key(d, "mcp-changes", "changes-agent")

    async def go() -> tuple[bool | None, list[str], list[str]]:
        changed = asyncio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, mcp_types.ServerNotification) and isinstance(
                    message.root, mcp_types.ToolListChangedNotification):
                changed.set()

        params = StdioServerParameters(
            command=str(steward_bin()),
            args=["mcp", "--server", steward.url, "--tools-poll-ms", "200"],
            env={**child_env(), "STEWARD_API_KEY": agent_key})
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                init = await session.initialize()
                before = [t.name for t in (await session.list_tools()).tools]
                post_api(steward, operator_key, "/actions", {
                    "name": "changes.appeared", "urlTemplate": steward.fixture_url + "/x"})
                await asyncio.wait_for(changed.wait(), EXCHANGE_TIMEOUT_S)
                after = [t.name for t in (await session.list_tools()).tools]
                return init.capabilities.tools.listChanged, before, after

    list_changed, before, after = asyncio.run(go())
    assert list_changed is True
    assert before == [] and after == ["changes_appeared"], (before, after)


def post_mcp(steward: Any, headers: dict[str, str]) -> tuple[int, str]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}).encode()
    request = urllib.request.Request(steward.url + "/mcp", data=body, method="POST", headers={
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", **headers})
    try:
        with _DIRECT.open(request, timeout=EXCHANGE_TIMEOUT_S) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_mcp_http_needs_a_bearer_key_and_a_host_of_this_server(
        world: World, steward: Steward) -> None:
    bearer = {"Authorization": f"Bearer {world.agent_key}"}
    status, body = post_mcp(steward, bearer)
    # The previous revision is still negotiated (the SDK client itself asks for the newest).
    assert status == 200 and json.loads(body)["result"]["protocolVersion"] == "2025-06-18", body
    status, body = post_mcp(steward, {})
    assert status == 401 and json.loads(body)["error"]["code"] == "AUTHENTICATION_FAILED"
    assert post_mcp(steward, {"Authorization": "Bearer not-a-key"})[0] == 401
    status, body = post_mcp(steward, {**bearer, "Host": "evil.example"})
    assert status == 403 and json.loads(body)["error"]["code"] == "host_not_allowed"
    # A foreign Host is refused before the key is even looked at.
    assert post_mcp(steward, {"Host": "evil.example"})[0] == 403
    status, body = post_mcp(steward, {**bearer, "Origin": "http://evil.example"})
    assert status == 403 and json.loads(body)["error"]["code"] == "origin_not_allowed"
    same_origin = "http://" + steward.url.split("://", 1)[1]
    assert post_mcp(steward, {**bearer, "Origin": same_origin})[0] == 200


def test_mcp_stdio_with_an_unknown_key_fails_with_the_servers_401(steward: Steward) -> None:
    from mcp.shared.exceptions import McpError

    with pytest.raises(BaseException) as refused:
        list_tools(steward, "stw_" + "0" * 64, "stdio")
    # The client's task group wraps the error; the leaf is the JSON-RPC error the proxy wrote.
    leaves, errors = [], [refused.value]
    while errors:
        error = errors.pop()
        if isinstance(error, BaseExceptionGroup):
            errors += error.exceptions
        else:
            leaves.append(error)
    assert any(isinstance(e, McpError) and "HTTP 401" in str(e) for e in leaves), leaves


class Served:
    def __init__(self, url: str) -> None:
        self.url = url


def test_mcp_http_answers_a_host_name_the_operator_allowed_and_no_other() -> None:
    with tempfile.TemporaryDirectory(prefix="steward-mcp-host-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        server = Proc("steward serve (mcp host)",
                      [str(steward_bin()), "serve", "--data", str(data), "--listen", f"{LOOPBACK}:0",
                       "--mcp-allowed-host", "steward.example.test"],
                      Path(tmp) / "server.stderr.log")
        try:
            served = Served(server.wait_ready())
            bearer = {"Authorization": f"Bearer {create_key(data, 'mcp-host', 'agent')}"}
            assert post_mcp(served, {**bearer, "Host": "steward.example.test:443"})[0] == 200
            assert post_mcp(served, {**bearer, "Host": "other.example.test"})[0] == 403
            assert post_mcp(served, bearer)[0] == 200
        finally:
            server.stop()


def test_mcp_no_secret_value_appears_in_any_mcp_answer(steward: Steward) -> None:
    assert len(ANSWERS) >= 20, "the tests above ran and recorded their answers"
    for answer in ANSWERS:
        for secret in steward.secret_values:
            assert secret not in answer
