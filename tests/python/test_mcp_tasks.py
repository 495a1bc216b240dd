"""MCP 2026-07-28 and its tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) against a
real Steward over Streamable HTTP: stateless requests carrying their version and capabilities
in `_meta`, `server/discover`, governed calls as tasks whose id is derived from the operation
key, and the URL elicitation of a parked call. Provider writes are counted at the fixture.

The pinned official Python client (`mcp` 1.30.0) speaks up to 2025-11-25 and has no client of
this extension, so these requests are made by hand, in the shapes the specification gives; the
MCP inspector (tests/inspector) speaks 2026-07-28 itself (`test_mcp_inspector.py`, era
`modern`), and `test_mcp.py` runs the official client on 2025-06-18 and 2025-11-25.
"""

from __future__ import annotations

import json
import secrets as pysecrets
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from conftest import (
    STRIPE_SECRET_NAME,
    STRIPE_SECRET_VALUE,
    _DIRECT,
    Steward,
    child_env,
    create_key,
    steward_bin,
)

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
# The server's provider deadline is 10 s by default: the fixture holds a write for less.
HOLD_WITHIN_DEADLINE_MS = 1000
# What the test gives up after when it drops an answer, and how long one exchange may take.
DROP_AFTER_S = 0.3
EXCHANGE_TIMEOUT_S = 60.0
# Bounds on waiting for what the server does; nothing is timed.
SETTLE_WAIT_S = 45.0
POLL_S = 0.2


class World:
    def __init__(self, steward: Steward) -> None:
        self.steward = steward
        d = steward.data_dir
        self.operator = steward.client(create_key(d, "mcp-tasks", "tasks-op", role="operator"))
        self.agent_key = create_key(d, "mcp-tasks", "tasks-agent")
        self.other_agent_key = create_key(d, "mcp-tasks-other", "tasks-other-agent")
        self.operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                                  allowed_hosts=[steward.fixture_host])
        adapter = {
            "type": "stripe.refund",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": steward.fixture_url},
            "credentialSecret": STRIPE_SECRET_NAME,
        }
        self.operator.actions.create(name="tasks-refund", adapter=dict(adapter))
        self.operator.actions.create(name="tasks-gated-refund", adapter=dict(adapter),
                                     requires_approval=True)


@pytest.fixture(scope="module")
def world(steward: Steward) -> World:
    return World(steward)


def capabilities(*, tasks: bool = True, url_elicitation: bool = False) -> dict[str, Any]:
    caps: dict[str, Any] = {}
    if tasks:
        caps["extensions"] = {TASKS: {}}
    if url_elicitation:
        caps["elicitation"] = {"url": {}}
    return caps


def rpc(steward: Steward, key: str, method: str, params: dict[str, Any] | None = None, *,
        caps: dict[str, Any] | None = None, name: str | None = None,
        timeout: float = EXCHANGE_TIMEOUT_S) -> dict[str, Any]:
    """One stateless 2026-07-28 request: version, capabilities and client in `_meta`, the
    standard headers; the JSON-RPC response."""
    params = dict(params or {})
    params["_meta"] = {
        **params.get("_meta", {}),
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities() if caps is None else caps,
        "io.modelcontextprotocol/clientInfo": {"name": "steward-tests", "version": "1"},
    }
    headers = {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    request = urllib.request.Request(steward.url + "/mcp", data=json.dumps(body).encode(),
                                     method="POST", headers=headers)
    try:
        with _DIRECT.open(request, timeout=timeout) as response:
            assert response.headers.get("Mcp-Session-Id") is None, "2026-07-28 has no session"
            raw = response.read().decode()
    except urllib.error.HTTPError as refused:
        # A JSON-RPC error the transport answers with a 4xx (e.g. a missing capability).
        raw = refused.read().decode()
        assert refused.code < 500, (refused.code, raw)
    if raw.startswith("event:") or raw.startswith("data:"):
        raw = [line[5:] for line in raw.splitlines() if line.startswith("data:")][-1]
    answer = json.loads(raw)
    assert answer["jsonrpc"] == "2.0", answer
    assert answer.get("id") in (body["id"], None), answer
    return answer


def call_tool(steward: Steward, key: str, tool: str, arguments: dict[str, Any], **kw: Any
              ) -> dict[str, Any]:
    return rpc(steward, key, "tools/call", {"name": tool, "arguments": arguments}, name=tool, **kw)


def task_request(steward: Steward, key: str, method: str, task_id: str,
                 caps: dict[str, Any] | None = None) -> dict[str, Any]:
    return rpc(steward, key, method, {"taskId": task_id}, name=task_id, caps=caps)


def refund(key: str) -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": 900, "operationKey": key}


def op_key() -> str:
    return f"task-{uuid.uuid4()}"


def wait_for(probe: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + SETTLE_WAIT_S
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(POLL_S)
    pytest.fail(f"gave up waiting: {what}")


def assert_task(result: dict[str, Any]) -> None:
    """The extension's Task fields, each of its type."""
    assert result["taskId"].startswith("tsk_"), result
    assert result["status"] in {"working", "input_required", "completed", "failed",
                                "cancelled"}, result
    for field in ("createdAt", "lastUpdatedAt"):
        assert isinstance(result[field], str) and result[field].endswith("Z"), result
    assert "ttlMs" in result and result["ttlMs"] is None, result


def settled(steward: Steward, key: str, task_id: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        got = task_request(steward, key, "tasks/get", task_id)["result"]
        return got if got["status"] != "working" else None
    return wait_for(probe, f"task {task_id} settles")


def test_server_discover_names_the_revisions_and_the_tasks_extension(
        world: World, steward: Steward) -> None:
    discovered = rpc(steward, world.agent_key, "server/discover")["result"]
    assert {"2025-06-18", "2025-11-25", MODERN} <= set(discovered["supportedVersions"]), discovered
    assert TASKS in discovered["capabilities"]["extensions"], discovered
    assert "tools" in discovered["capabilities"]
    listed = rpc(steward, world.agent_key, "tools/list")["result"]
    assert sorted(t["name"] for t in listed["tools"]) == ["tasks-gated-refund", "tasks-refund"]
    description = {t["name"]: t for t in listed["tools"]}["tasks-refund"]["description"]
    assert '_meta "steward/operationKey"' in description, description


def test_without_the_extension_a_call_is_its_result_and_task_requests_are_refused(
        world: World, steward: Steward) -> None:
    key = op_key()
    arguments = refund(key)
    before = steward.fixture_writes()
    answer = call_tool(steward, world.agent_key, "tasks-refund", arguments,
                       caps=capabilities(tasks=False))["result"]
    assert answer.get("resultType", "complete") == "complete", answer
    assert "taskId" not in answer
    assert answer["structuredContent"]["status"] == "succeeded", answer
    assert steward.fixture_writes() == before + 1
    # The same operation asked by a client of the extension: the same invocation, as a task.
    task = call_tool(steward, world.agent_key, "tasks-refund", arguments)["result"]
    assert (task["resultType"], task["status"]) == ("task", "completed"), task
    done = task_request(steward, world.agent_key, "tasks/get", task["taskId"])["result"]
    assert done["result"]["structuredContent"]["invocationId"] == \
        answer["structuredContent"]["invocationId"], done
    assert steward.fixture_writes() == before + 1
    refused = task_request(steward, world.agent_key, "tasks/get", task["taskId"],
                           caps=capabilities(tasks=False))
    assert refused["error"]["code"] == -32021, refused
    assert TASKS in json.dumps(refused["error"]["data"]), refused


def test_a_task_retried_after_a_dropped_answer_is_the_same_task_and_one_write(
        world: World, steward: Steward) -> None:
    key = op_key()
    arguments = refund(key)
    before = steward.fixture_writes()
    steward.set_fault("hold_after_commit", ms=HOLD_WITHIN_DEADLINE_MS)
    try:
        # The client gives up while the provider holds the committed write, and hangs up.
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            call_tool(steward, world.agent_key, "tasks-refund", arguments, timeout=DROP_AFTER_S)
        wait_for(lambda: steward.fixture_writes() == before + 1, "the held write commits")
    finally:
        steward.clear_faults()
    first = call_tool(steward, world.agent_key, "tasks-refund", arguments)["result"]
    assert first["resultType"] == "task", first
    assert_task(first)
    again = call_tool(steward, world.agent_key, "tasks-refund", arguments)["result"]
    assert again["taskId"] == first["taskId"], (first, again)
    done = settled(steward, world.agent_key, first["taskId"])
    assert done["resultType"] == "complete" and done["status"] == "completed", done
    assert done["result"]["isError"] is False, done
    assert done["result"]["structuredContent"]["status"] == "succeeded", done
    assert done["result"]["structuredContent"]["operationKey"] == key
    assert steward.fixture_writes() == before + 1, "a retry is never a second write"
    assert STRIPE_SECRET_VALUE not in json.dumps([first, again, done])


def test_a_parked_task_is_working_awaiting_approval_then_completed_once_approved(
        world: World, steward: Steward) -> None:
    key = op_key()
    arguments = refund(key)
    before = steward.fixture_writes()
    created = call_tool(steward, world.agent_key, "tasks-gated-refund", arguments)["result"]
    assert created["resultType"] == "task", created
    assert_task(created)
    assert (created["status"], created["statusMessage"]) == ("working", "awaiting approval")
    assert created["pollIntervalMs"] > 0
    polled = task_request(steward, world.agent_key, "tasks/get", created["taskId"])["result"]
    assert (polled["status"], polled["statusMessage"]) == ("working", "awaiting approval")
    assert "result" not in polled
    # The same key without the extension: the same invocation, with its approval.
    plain = call_tool(steward, world.agent_key, "tasks-gated-refund", arguments,
                      caps=capabilities(tasks=False))["result"]["structuredContent"]
    assert plain["status"] == "pending_approval", plain
    world.operator.approvals.approve(plain["approvalId"], note="ok")
    done = settled(steward, world.agent_key, created["taskId"])
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"]["status"] == "succeeded", done
    assert done["result"]["structuredContent"]["invocationId"] == plain["invocationId"]
    assert steward.fixture_writes() == before + 1
    retried = call_tool(steward, world.agent_key, "tasks-gated-refund", arguments)["result"]
    assert (retried["taskId"], retried["status"]) == (created["taskId"], "completed"), retried
    assert steward.fixture_writes() == before + 1


def test_cancelling_a_task_before_approval_withdraws_it_and_nothing_is_written(
        world: World, steward: Steward) -> None:
    key = op_key()
    arguments = refund(key)
    before = steward.fixture_writes()
    created = call_tool(steward, world.agent_key, "tasks-gated-refund", arguments)["result"]
    assert created["status"] == "working", created
    # Another environment's key finds no such task, and cannot cancel it.
    for method in ("tasks/get", "tasks/cancel"):
        foreign = task_request(steward, world.other_agent_key, method, created["taskId"])
        assert foreign["error"]["code"] == -32602, foreign
    acked = task_request(steward, world.agent_key, "tasks/cancel", created["taskId"])["result"]
    assert acked == {"resultType": "complete"}, acked
    cancelled = task_request(steward, world.agent_key, "tasks/get", created["taskId"])["result"]
    assert (cancelled["status"], cancelled["statusMessage"]) == (
        "cancelled", "withdrawn before approval"), cancelled
    plain = call_tool(steward, world.agent_key, "tasks-gated-refund", arguments,
                      caps=capabilities(tasks=False))["result"]["structuredContent"]
    assert plain["status"] == "denied", plain
    approval = world.operator.approvals.get(plain["approvalId"]).data
    assert (approval["status"], approval["decisionOrigin"]) == ("denied", "withdrawn"), approval
    # Approving it now changes nothing: it never runs.
    try:
        world.operator.approvals.approve(plain["approvalId"], note="too late")
    except Exception:  # noqa: BLE001 - the SDK raises on the 409; either way nothing runs
        pass
    after = task_request(steward, world.agent_key, "tasks/get", created["taskId"])["result"]
    assert after["status"] == "cancelled", after
    assert steward.fixture_writes() == before


def test_cancelling_after_dispatch_only_stops_waiting(world: World, steward: Steward) -> None:
    key = op_key()
    before = steward.fixture_writes()
    created = call_tool(steward, world.agent_key, "tasks-refund", refund(key))["result"]
    acked = task_request(steward, world.agent_key, "tasks/cancel", created["taskId"])["result"]
    assert acked == {"resultType": "complete"}, acked
    done = task_request(steward, world.agent_key, "tasks/get", created["taskId"])["result"]
    assert done["status"] == "completed", done
    assert done["result"]["structuredContent"]["status"] == "succeeded", done
    assert steward.fixture_writes() == before + 1


def test_an_unknown_task_id_is_invalid_params(world: World, steward: Steward) -> None:
    for task_id in ("tsk_", "tsk_bm9wZQ", "inv_01", "tsk_" + "A" * 40):
        answer = task_request(steward, world.agent_key, "tasks/get", task_id)
        assert answer["error"]["code"] == -32602, answer
    updated = task_request(steward, world.agent_key, "tasks/update", "tsk_nope")
    assert updated["error"]["code"] == -32602, updated
    # The extension removed the 2025-11-25 `tasks/result` and `tasks/list`.
    for removed in ("tasks/result", "tasks/list"):
        answer = rpc(steward, world.agent_key, removed, {"taskId": "tsk_nope"})
        assert answer["error"]["code"] == -32601, answer


def test_a_parked_call_elicits_the_console_url_only_when_the_client_declared_it(
        world: World, steward: Steward) -> None:
    key = op_key()
    arguments = refund(key)
    before = steward.fixture_writes()
    plain = call_tool(steward, world.agent_key, "tasks-gated-refund", arguments,
                      caps=capabilities(tasks=False))["result"]
    assert plain.get("resultType", "complete") == "complete", plain
    assert "inputRequests" not in plain
    approval_id = plain["structuredContent"]["approvalId"]
    asked = call_tool(steward, world.agent_key, "tasks-gated-refund", arguments,
                      caps=capabilities(tasks=False, url_elicitation=True))["result"]
    assert asked["resultType"] == "input_required", asked
    elicitation = asked["inputRequests"]["steward/approval"]
    assert elicitation["method"] == "elicitation/create", elicitation
    assert elicitation["params"]["mode"] == "url", elicitation
    assert elicitation["params"]["url"] == f"{steward.url}/console/#{approval_id}", elicitation
    assert "requestedSchema" not in elicitation["params"], "never a form"
    # The page it names is the console's (sign-in first, then the inbox with this approval).
    with _DIRECT.open(elicitation["params"]["url"], timeout=EXCHANGE_TIMEOUT_S) as page:
        assert page.status == 200
    # The client's retry with the answer: the call as it stands, never a loop of elicitations.
    retried = rpc(steward, world.agent_key, "tools/call", {
        "name": "tasks-gated-refund", "arguments": arguments,
        "inputResponses": {"steward/approval": {"action": "accept"}}},
        name="tasks-gated-refund", caps=capabilities(tasks=False, url_elicitation=True))["result"]
    assert retried["structuredContent"]["status"] == "pending_approval", retried
    assert retried["structuredContent"]["approvalId"] == approval_id
    assert steward.fixture_writes() == before


def test_stdio_forwards_2026_07_28_requests_and_tasks_unchanged(
        world: World, steward: Steward) -> None:
    """`steward mcp` keeps no revision for a client that never sends `initialize`: each line
    carries its own, and a task made over stdio is the one HTTP reads (one write)."""
    key = op_key()
    arguments = refund(key)
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities(),
        "io.modelcontextprotocol/clientInfo": {"name": "steward-tests", "version": "1"},
    }
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "tasks-refund", "arguments": arguments, "_meta": meta}},
    ]
    before = steward.fixture_writes()
    done = subprocess.run(
        [str(steward_bin()), "mcp", "--server", steward.url],
        input="".join(json.dumps(line) + "\n" for line in lines), capture_output=True,
        text=True, timeout=EXCHANGE_TIMEOUT_S,
        env={**child_env(), "STEWARD_API_KEY": world.agent_key})
    answers = {a["id"]: a for a in map(json.loads, done.stdout.splitlines()) if "id" in a}
    assert "result" in answers[1], answers
    assert MODERN in answers[1]["result"]["supportedVersions"], done.stdout
    created = answers[2]["result"]
    assert created["resultType"] == "task", created
    over_http = task_request(steward, world.agent_key, "tasks/get", created["taskId"])["result"]
    assert over_http["status"] == "completed", over_http
    assert over_http["result"]["structuredContent"]["operationKey"] == key
    assert steward.fixture_writes() == before + 1
