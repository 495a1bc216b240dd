"""An MCP call that needs a signed-in account a person must connect first (issue #28, item 6):
the call is not made and nothing is recorded; the answer is a URL elicitation to a new consent
session's `connectUrl` (never a form, never a token); the person consents at the fixture's
provider; the call made again with the same operation key writes once.

2025-11-25 through the official Python client (`mcp` 1.30.0): the `-32042`
URLElicitationRequiredError, read with the client's own `UrlElicitationRequiredError`.
2026-07-28 by hand, as `test_mcp_tasks.py` does (the pinned client does not speak it): an
`InputRequiredResult` under `steward/connect`. Writes are counted per user at the fixture.
"""

from __future__ import annotations

import asyncio
import secrets as pysecrets
import urllib.parse
from typing import Any

import anlyon
import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError, UrlElicitationRequiredError

from conftest import OAUTH_INTEGRATION, Steward, create_key
from test_mcp_tasks import capabilities, rpc
from test_oauth_connections import (  # noqa: F401 (fixtures used by name)
    callback,
    client_secret,
    connect,
    consent,
    new_name,
    oauth_faults,
    provider,
    write_action,
    writes_by,
)

EXCHANGE_TIMEOUT_S = 60.0
LEGACY = "2025-11-25"


async def _noop_elicitation(context: Any, params: Any) -> Any:  # declares elicitation support
    raise AssertionError("Steward never sends an elicitation request on the stateless transport")


def call_official(steward: Steward, key: str, tool: str, arguments: dict[str, Any]
                  ) -> tuple[str, Any]:
    """One tools/call with the official client on 2025-11-25: ("error", McpError) or
    ("result", CallToolResult)."""
    async def go() -> tuple[str, Any]:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(headers=headers, timeout=EXCHANGE_TIMEOUT_S) as http:
            async with streamable_http_client(steward.url + "/mcp", http_client=http) as (
                    read, write, _):
                async with ClientSession(read, write,
                                         elicitation_callback=_noop_elicitation) as session:
                    initialized = await session.initialize()
                    assert initialized.protocolVersion == LEGACY, initialized
                    try:
                        return "result", await session.call_tool(tool, arguments)
                    except McpError as e:
                        return "error", e

    return asyncio.run(asyncio.wait_for(go(), EXCHANGE_TIMEOUT_S))


def needs_reauth(steward: Steward, operator: anlyon.Client, user: str) -> tuple[str, str]:
    """A connected account of `user` whose grant the provider now refuses (`needs_reauth`), and
    an action that writes through it."""
    provider(steward, "POST", "/faults", {"accessTokenTtlS": 30})
    name = connect(steward, operator, user)
    action = write_action(steward, operator, name)
    provider(steward, "POST", "/faults", {"refuseRefresh": True})
    assert operator.connections.check(name).data["health"]["status"] == "needs_reauth"
    provider(steward, "POST", "/faults", {"refuseRefresh": False, "accessTokenTtlS": 3600})
    return name, action


def sign_in(steward: Steward, url: str, user: str) -> None:
    """The person opens the elicited URL: the provider's consent page, then Steward's callback."""
    assert url.startswith(steward.fixture_url.rstrip("/") + "/oauth/authorize?"), url
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert query["redirect_uri"] == [steward.url.rstrip("/") + "/api/v2/connections/callback"]
    status, done = callback(consent(url, user))
    assert status == 200 and done["data"]["status"] == "completed", done


def arguments(key: str) -> dict[str, Any]:
    return {"key": key, "note": "hello", "operationKey": key}


def test_2025_11_25_a_reauth_account_is_a_url_elicitation_error_then_one_write_after_consent(
        steward: Steward, operator: anlyon.Client, client_secret: str, oauth_faults: Any) -> None:
    user = "kim-" + pysecrets.token_hex(3)
    name, action = needs_reauth(steward, operator, user)
    agent_key = steward.keys["agent"]
    key = "op-" + pysecrets.token_hex(8)
    before = provider(steward)

    kind, answer = call_official(steward, agent_key, action, arguments(key))
    assert kind == "error" and answer.error.code == -32042, answer
    required = UrlElicitationRequiredError.from_error(answer.error)
    [elicitation] = required.elicitations
    assert elicitation.mode == "url" and elicitation.elicitationId.startswith("cs_")
    assert name in elicitation.message and "Nothing is asked here" in elicitation.message
    assert writes_by(steward, user) == 0
    after = provider(steward)
    assert after["unauthorized"] == before["unauthorized"], "nothing was sent"

    # Asked again before anyone signed in: again a link (a new session), still nothing sent.
    kind, again = call_official(steward, agent_key, action, arguments(key))
    assert kind == "error" and again.error.code == -32042, again
    assert writes_by(steward, user) == 0

    sign_in(steward, elicitation.url, user)
    account = {c["name"]: c for c in operator.connections.list().data}[name]
    assert account["health"]["status"] == "healthy", account

    kind, result = call_official(steward, agent_key, action, arguments(key))
    assert kind == "result" and not result.isError, result
    assert result.structuredContent["status"] == "succeeded", result.structuredContent
    assert result.structuredContent["operationKey"] == key
    assert writes_by(steward, user) == 1
    # The same key once more: the recorded answer, no second write.
    kind, result = call_official(steward, agent_key, action, arguments(key))
    assert kind == "result" and result.structuredContent["status"] == "succeeded"
    assert writes_by(steward, user) == 1
    # The account refused again later: a key that already names an invocation still answers
    # what was recorded, never a link; a new key is asked to sign in.
    provider(steward, "POST", "/faults", {"refuseRefresh": True})
    assert operator.connections.check(name).data["health"]["status"] == "needs_reauth"
    kind, result = call_official(steward, agent_key, action, arguments(key))
    assert kind == "result" and result.structuredContent["status"] == "succeeded", result
    kind, answer = call_official(steward, agent_key, action, arguments("op-" + pysecrets.token_hex(8)))
    assert kind == "error" and answer.error.code == -32042, answer
    assert writes_by(steward, user) == 1


def test_2026_07_28_a_reauth_account_is_an_input_required_result_only_when_declared(
        steward: Steward, operator: anlyon.Client, client_secret: str, oauth_faults: Any) -> None:
    user = "lee-" + pysecrets.token_hex(3)
    name, action = needs_reauth(steward, operator, user)
    agent_key = steward.keys["agent"]
    key = "op-" + pysecrets.token_hex(8)
    params = {"name": action, "arguments": arguments(key)}
    url_caps = capabilities(tasks=False, url_elicitation=True)

    # Not declared: the refusal alone, no link, nothing recorded.
    plain = rpc(steward, agent_key, "tools/call", params, name=action,
                caps=capabilities(tasks=False))["result"]
    assert plain.get("resultType", "complete") == "complete" and plain["isError"], plain
    assert plain["structuredContent"]["error"]["code"] == "connection_required", plain
    assert plain["structuredContent"]["invocationId"] is None
    assert "http" not in str(plain), "no link unless the client can show one"

    asked = rpc(steward, agent_key, "tools/call", params, name=action, caps=url_caps)["result"]
    assert asked["resultType"] == "input_required", asked
    elicitation = asked["inputRequests"]["steward/connect"]
    assert elicitation["method"] == "elicitation/create", elicitation
    assert elicitation["params"]["mode"] == "url"
    assert "requestedSchema" not in elicitation["params"], "never a form"
    # The same call answering the elicitation before consent: the refusal, not a second link.
    answered = {**params, "inputResponses": {"steward/connect": {"action": "accept"}}}
    early = rpc(steward, agent_key, "tools/call", answered, name=action, caps=url_caps)["result"]
    assert early.get("resultType", "complete") == "complete" and early["isError"], early
    assert early["structuredContent"]["error"]["code"] == "connection_required"
    assert writes_by(steward, user) == 0

    sign_in(steward, elicitation["params"]["url"], user)
    done = rpc(steward, agent_key, "tools/call", answered, name=action, caps=url_caps)["result"]
    assert done["structuredContent"]["status"] == "succeeded", done
    assert writes_by(steward, user) == 1
    done = rpc(steward, agent_key, "tools/call", params, name=action, caps=url_caps)["result"]
    assert done["structuredContent"]["status"] == "succeeded", done
    assert writes_by(steward, user) == 1


def test_a_missing_account_is_connected_through_the_elicited_session(
        steward: Steward, operator: anlyon.Client, client_secret: str, oauth_faults: Any) -> None:
    """An action naming an account that does not exist yet, on the one oauth integration whose
    hosts take its destination: the link connects it under the name the action uses."""
    user = "mia-" + pysecrets.token_hex(3)
    name = new_name()
    action = write_action(steward, operator, name)
    key = "op-" + pysecrets.token_hex(8)
    kind, answer = call_official(steward, steward.keys["agent"], action, arguments(key))
    assert kind == "error" and answer.error.code == -32042, answer
    [elicitation] = UrlElicitationRequiredError.from_error(answer.error).elicitations
    assert name in elicitation.message and OAUTH_INTEGRATION in elicitation.message
    assert name not in {s["name"] for s in operator.secrets.list().data}
    sign_in(steward, elicitation.url, user)
    account = {c["name"]: c for c in operator.connections.list().data}[name]
    assert account["integrationId"] == OAUTH_INTEGRATION, account

    kind, result = call_official(steward, steward.keys["agent"], action, arguments(key))
    assert kind == "result" and result.structuredContent["status"] == "succeeded", result
    assert writes_by(steward, user) == 1


def test_another_environments_key_gets_no_link_for_this_environments_account(
        steward: Steward, operator: anlyon.Client, other_operator: anlyon.Client,
        client_secret: str, oauth_faults: Any) -> None:
    """The gate reads the caller's environment only: there the secret does not exist, and no
    session can start (that environment's vault has no client secret), so the answer is the
    refusal alone: no link, nothing recorded, nothing written."""
    user = "ned-" + pysecrets.token_hex(3)
    name, _ = needs_reauth(steward, operator, user)
    action = write_action(steward, other_operator, name)
    other_key = create_key(steward.data_dir, "sdk-other", "mcp-accounts-other-agent")
    kind, result = call_official(steward, other_key, action, arguments("op-" + pysecrets.token_hex(8)))
    assert kind == "result" and result.isError, result
    assert result.structuredContent["error"]["code"] == "connection_required", result
    assert "http" not in str(result.structuredContent)
    assert writes_by(steward, user) == 0
