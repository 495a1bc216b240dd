"""MCP input shapes and malformed messages (issue #30, item 5), against a real Steward.

- An action whose input schema is not an object is offered wrapped (`{"input": <schema>}`) and
  its call writes once at the fixture; an action whose own input has an `operationKey` property
  receives that argument, the operation key travelling in `_meta`, and the key still dedupes.
- Every malformed message gets the JSON-RPC error the specification names, over Streamable
  HTTP (raw POSTs: the official client cannot send them) and over stdio (`steward mcp`, raw
  lines): every line that is a request is answered, a notification is not.
- `/mcp` serves no long-lived request: a GET (the optional server stream) is refused.

Provider writes are counted at the fixture.
"""

from __future__ import annotations

import json
import queue
import secrets as pysecrets
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
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
from test_mcp import EXCHANGE_TIMEOUT_S, call, list_tools, post_api

ENV = "mcp-shapes"
# How long the stdio test waits for all its answers, in seconds (generous; nothing is timed).
STDIO_ANSWERS_TIMEOUT_S = 30.0
# How long the stdio test listens after the last answer for one that must not come, in seconds.
STDIO_QUIET_S = 1.0


class Shapes:
    """An environment of its own with the two actions these tests call."""

    def __init__(self, steward: Steward) -> None:
        d = steward.data_dir
        self.operator_key = create_key(d, ENV, "shapes-op", role="operator")
        self.agent_key = create_key(d, ENV, "shapes-agent")
        operator = steward.client(self.operator_key)
        operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                             allowed_hosts=[steward.fixture_host])
        auth = {"Authorization": "Bearer {{secret:" + STRIPE_SECRET_NAME + "}}"}
        refunds = steward.fixture_url + "/v1/refunds"
        # Input `["pi_...", amount]`: offered as `{"input": [...]}`.
        post_api(steward, self.operator_key, "/actions", {
            "name": "shapes.pair", "governed": True, "method": "POST", "urlTemplate": refunds,
            "headers": auth,
            "bodyTemplate": {"payment_intent": "{{input.0}}", "amount": "{{input.1}}"},
            "inputSchema": {"type": "array", "minItems": 2, "maxItems": 2,
                            "prefixItems": [{"type": "string"}, {"type": "integer"}]}})
        # The action's own input has an `operationKey` (sent on to the provider as metadata).
        post_api(steward, self.operator_key, "/actions", {
            "name": "shapes.own-key", "governed": True, "method": "POST", "urlTemplate": refunds,
            "headers": auth,
            "bodyTemplate": {"payment_intent": "{{input.pi}}", "amount": 7,
                             "metadata": {"operation_key": "{{input.operationKey}}"}},
            "inputSchema": {"type": "object", "required": ["pi", "operationKey"],
                            "properties": {"pi": {"type": "string"},
                                           "operationKey": {"type": "string"}}}})


@pytest.fixture(scope="module")
def shapes(steward: Steward) -> Shapes:
    return Shapes(steward)


def new_pi() -> str:
    return "pi_" + pysecrets.token_hex(8)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_mcp_an_array_input_is_offered_wrapped_and_its_call_writes_once(
        shapes: Shapes, steward: Steward, transport: str) -> None:
    tool = next(t for t in list_tools(steward, shapes.agent_key, transport)
                if t.name == "shapes_pair")
    schema = tool.inputSchema
    assert schema["type"] == "object" and schema["required"] == ["input"], schema
    assert schema["properties"]["input"]["type"] == "array", schema
    assert "operationKey" in schema["properties"]
    assert "`input` argument" in (tool.description or "")

    key, pi = f"shapes-{transport}-{uuid.uuid4()}", new_pi()
    before = steward.fixture_writes()
    is_error, first = call(steward, shapes.agent_key, transport, "shapes_pair",
                           {"input": [pi, 250], "operationKey": key})
    assert not is_error and first["status"] == "succeeded", first
    assert steward.fixture_writes() == before + 1
    written = [w for w in steward.fixture_write_list() if w["payment_intent"] == pi]
    assert len(written) == 1 and written[0]["amount"] == 250, written
    # The same operation again writes nothing more.
    _, again = call(steward, shapes.agent_key, transport, "shapes_pair",
                    {"input": [pi, 250], "operationKey": key})
    assert again["invocationId"] == first["invocationId"]
    assert steward.fixture_writes() == before + 1
    # The input not wrapped is refused naming the argument, and sends nothing.
    is_error, refused = call(steward, shapes.agent_key, transport, "shapes_pair",
                             {"operationKey": key + "-bare", "0": pi})
    assert is_error and refused["status"] == "rejected", refused
    assert refused["error"]["code"] == "VALIDATION_ERROR", refused
    assert refused["error"]["details"]["field"] == "0", refused
    assert "pass the action's input as `input`" in refused["error"]["message"], refused
    is_error, refused = call(steward, shapes.agent_key, transport, "shapes_pair",
                             {"operationKey": key + "-none"})
    assert is_error and refused["error"]["details"]["field"] == "input", refused
    assert steward.fixture_writes() == before + 1


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_mcp_an_input_named_operation_key_is_received_and_the_meta_key_still_dedupes(
        shapes: Shapes, steward: Steward, transport: str) -> None:
    tool = next(t for t in list_tools(steward, shapes.agent_key, transport)
                if t.name == "shapes_own-key")
    assert tool.inputSchema["properties"]["operationKey"] == {"type": "string"}
    assert "steward/operationKey" in (tool.description or "")

    own, key, pi = f"order-{uuid.uuid4()}", f"shapes-{transport}-{uuid.uuid4()}", new_pi()
    before = steward.fixture_writes()
    meta = {"steward/operationKey": key}
    is_error, first = call(steward, shapes.agent_key, transport, "shapes_own-key",
                           {"pi": pi, "operationKey": own}, meta=meta)
    assert not is_error and first["status"] == "succeeded", first
    assert first["operationKey"] == key, first
    written = [w for w in steward.fixture_write_list() if w["payment_intent"] == pi]
    assert len(written) == 1 and written[0]["metadata"] == {"operation_key": own}, written
    _, again = call(steward, shapes.agent_key, transport, "shapes_own-key",
                    {"pi": pi, "operationKey": own}, meta=meta)
    assert again["invocationId"] == first["invocationId"], again
    assert steward.fixture_writes() == before + 1, "two calls with one key, one write"


def test_invoke_takes_a_non_object_input_only_where_the_schema_declares_one(
        shapes: Shapes, steward: Steward) -> None:
    """The HTTP API agrees with the MCP door: the array action takes an array; an object
    action still refuses one, naming `input`, and sends nothing."""
    before = steward.fixture_writes()
    pi = new_pi()
    done = post_api(steward, shapes.agent_key, "/actions/shapes.pair/invoke",
                    {"input": [pi, 120], "operationKey": f"rest-{uuid.uuid4()}"})
    assert done["data"]["status"] == "succeeded", done
    assert steward.fixture_writes() == before + 1
    for action, bad in (("shapes.own-key", [pi]), ("shapes.pair", {"0": pi, "1": 5})):
        with pytest.raises(urllib.error.HTTPError) as refused:
            post_api(steward, shapes.agent_key, f"/actions/{action}/invoke",
                     {"input": bad, "operationKey": f"rest-{uuid.uuid4()}"})
        error = json.loads(refused.value.read())["error"]
        assert refused.value.code == 400 and error["details"]["field"] == "input", error
    assert steward.fixture_writes() == before + 1


# -- malformed messages ---------------------------------------------------------------------

REQUEST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
# (name, Content-Type, body, HTTP status, JSON-RPC code, id in the answer)
MALFORMED_HTTP = [
    ("wrong content type", "text/plain", json.dumps(REQUEST), 415, -32600, None),
    ("not JSON", "application/json", "{nope", 400, -32700, None),
    ("empty body", "application/json", "", 400, -32700, None),
    ("a batch", "application/json", json.dumps([REQUEST]), 400, -32600, None),
    ("not an object", "application/json", "42", 400, -32600, None),
    ("no jsonrpc", "application/json", json.dumps({"id": 2, "method": "tools/list"}),
     400, -32600, 2),
    ("no method", "application/json", json.dumps({"jsonrpc": "2.0", "id": 3}), 400, -32600, 3),
    ("a null id", "application/json",
     json.dumps({"jsonrpc": "2.0", "id": None, "method": "tools/list"}), 400, -32600, None),
    ("unknown method", "application/json",
     json.dumps({"jsonrpc": "2.0", "id": 4, "method": "no/such"}), 200, -32601, 4),
    ("params that do not fit", "application/json",
     json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"arguments": {}}}),
     200, -32602, 5),
    ("a notification whose params do not fit", "application/json",
     json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": 5}),
     400, -32602, None),
]


def post_raw(steward: Steward, key: str, content_type: str, body: str,
             method: str = "POST") -> tuple[int, str]:
    request = urllib.request.Request(
        steward.url + "/mcp", data=body.encode() if method == "POST" else None, method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": content_type,
                 "Accept": "application/json, text/event-stream"})
    try:
        with _DIRECT.open(request, timeout=EXCHANGE_TIMEOUT_S) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.parametrize("case", MALFORMED_HTTP, ids=[c[0] for c in MALFORMED_HTTP])
def test_mcp_http_answers_each_malformed_message_with_its_json_rpc_error(
        shapes: Shapes, steward: Steward, case: tuple[Any, ...]) -> None:
    _, content_type, body, status, code, id_ = case
    got_status, text = post_raw(steward, shapes.agent_key, content_type, body)
    answer = json.loads(text)
    assert (got_status, answer.get("jsonrpc"), answer["error"]["code"], answer["id"]) == \
        (status, "2.0", code, id_), text


def test_mcp_http_serves_no_long_lived_request_a_get_is_refused(
        shapes: Shapes, steward: Steward) -> None:
    started = time.monotonic()
    status, _ = post_raw(steward, shapes.agent_key, "application/json", "", method="GET")
    assert status == 405
    assert time.monotonic() - started < EXCHANGE_TIMEOUT_S
    # A notification is accepted with no body, as before.
    status, text = post_raw(steward, shapes.agent_key, "application/json",
                            json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    assert (status, text) == (202, "")


# Each line and what answers it: (line, id of the answer, JSON-RPC code); None: no answer.
STDIO_LINES: list[tuple[str, Any, int | None]] = [
    ("{nope", None, -32700),
    (json.dumps([REQUEST]), None, -32600),
    ("42", None, -32600),
    (json.dumps({"id": 12, "method": "tools/list"}), 12, -32600),
    (json.dumps({"jsonrpc": "2.0", "id": 13}), 13, -32600),
    (json.dumps({"jsonrpc": "2.0", "id": 14, "method": "no/such"}), 14, -32601),
    (json.dumps({"jsonrpc": "2.0", "id": 15, "method": "tools/call", "params": {"arguments": {}}}),
     15, -32602),
    (json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), None, None),
    (json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": 5}), None, None),
    (json.dumps({"jsonrpc": "2.0", "id": 16, "method": "ping"}), 16, 0),
]


def test_mcp_stdio_answers_every_request_line_and_no_notification(
        shapes: Shapes, steward: Steward) -> None:
    proxy = subprocess.Popen(
        [str(steward_bin()), "mcp", "--server", steward.url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**child_env(), "STEWARD_API_KEY": shapes.agent_key})
    answers: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proxy.stdout is not None
        for raw in proxy.stdout:
            answers.put(raw.decode())
        answers.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert proxy.stdin is not None
        for line, _, _ in STDIO_LINES:
            proxy.stdin.write(line.encode() + b"\n")
        proxy.stdin.flush()
        expected = [(id_, code) for _, id_, code in STDIO_LINES if code is not None]
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + STDIO_ANSWERS_TIMEOUT_S
        while len(got) < len(expected) and time.monotonic() < deadline:
            try:
                line = answers.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            got.append(json.loads(line))
        # Nothing more comes (the notification is not answered).
        try:
            extra = answers.get(timeout=STDIO_QUIET_S)
        except queue.Empty:
            extra = None
        assert extra is None, extra
        assert all(a["jsonrpc"] == "2.0" for a in got), got
        seen = sorted(((a["id"], a["error"]["code"] if "error" in a else 0) for a in got),
                      key=repr)
        assert seen == sorted(expected, key=repr), got
    finally:
        if proxy.stdin is not None:
            proxy.stdin.close()
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait(timeout=10)
        reader.join(timeout=10)
