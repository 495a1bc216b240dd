"""MCP authorization: `/mcp` as an OAuth 2.1 resource server (`steward serve --mcp-oauth`),
driven by the official Python `mcp` client's OAuth support (`mcp.client.auth.OAuthClientProvider`,
unchanged) against the fixture's local issuer (`steward fixture`, `/issuer`).

The client discovers the resource's metadata from the 401 challenge, the issuer's metadata from
it, registers itself, authorizes (the fixture consents at once as `alice`), exchanges the code
with PKCE for a JWT whose audience is the `resource` it asked for, and calls a governed tool.
Provider writes are counted at the fixture; tokens the checks should refuse are minted by the
fixture's issuer (`/issuer/_mint`) or issued for another audience (`/issuer/_control`).
"""

from __future__ import annotations

import asyncio
import json
import secrets as pysecrets
import socket
import tempfile
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anlyon
import httpx
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from conftest import (
    LOOPBACK,
    STRIPE_SECRET_NAME,
    STRIPE_SECRET_VALUE,
    Proc,
    create_key,
    steward_bin,
)

# One MCP exchange (discovery, registration, authorization, a call), in seconds: generous.
EXCHANGE_TIMEOUT_S = 60.0
ENV = "mcp-oauth"
REDIRECT_URI = "http://127.0.0.1:1/callback"  # never opened: the test reads the redirect itself


def free_port() -> int:
    """A port the server can listen on: the resource URL names it before the server starts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class World:
    def __init__(self, fixture_url: str, url: str, data_dir: Path, server_log: Path) -> None:
        self.fixture_url = fixture_url
        self.url = url
        self.resource = url + "/mcp"
        self.issuer = fixture_url + "/issuer"
        self.metadata_url = url + "/.well-known/oauth-protected-resource/mcp"
        self.server_log = server_log
        self.http = httpx.Client(timeout=EXCHANGE_TIMEOUT_S, trust_env=False)
        operator_key = create_key(data_dir, ENV, "oauth-operator", role="operator")
        self.agent_key = create_key(data_dir, ENV, "oauth-agent")
        self.operator = anlyon.Client(api_key=operator_key, base_url=url)
        self.operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                                  allowed_hosts=[urllib.parse.urlsplit(fixture_url).netloc])
        self.operator.actions.create(name="oauth-refund", description="Refund a payment", adapter={
            "type": "stripe.refund",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": fixture_url},
            "credentialSecret": STRIPE_SECRET_NAME,
        })
        self.tokens: list[str] = []

    def writes(self) -> int:
        return int(self.http.get(self.fixture_url + "/_fixture/writes").json()["total"])

    def issued(self) -> int:
        return int(self.http.get(self.issuer + "/_control").json()["issued"])

    def set_control(self, **control: Any) -> None:
        self.http.post(self.issuer + "/_control", json=control).raise_for_status()

    def mint(self, **claims: Any) -> str:
        claims.setdefault("audience", self.resource)
        claims.setdefault("scope", "steward:mcp")
        answer = self.http.post(self.issuer + "/_mint", json=claims)
        answer.raise_for_status()
        token = answer.json()["accessToken"]
        self.tokens.append(token)
        return token

    def post_mcp(self, token: str | None) -> httpx.Response:
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        return self.http.post(self.resource, headers=headers, json=body)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    binary = str(steward_bin())
    with tempfile.TemporaryDirectory(prefix="steward-oauth-") as tmp:
        tmp_path = Path(tmp)
        data_dir = tmp_path / "data"
        data_dir.mkdir()
        procs: list[Proc] = []
        try:
            fixture = Proc("steward fixture", [binary, "fixture", "--listen", f"{LOOPBACK}:0"],
                           tmp_path / "fixture.stderr.log")
            procs.append(fixture)
            fixture_url = fixture.wait_ready()
            port = free_port()
            config = tmp_path / "mcp-oauth.json"
            # No jwksUri: Steward finds the keys through the issuer's RFC 8414 metadata.
            config.write_text(json.dumps({
                "resource": f"http://{LOOPBACK}:{port}/mcp",
                "issuers": [{"issuer": fixture_url + "/issuer",
                             "subjects": {"alice": {"environment": ENV, "role": "agent"}}}],
            }))
            server = Proc("steward serve",
                          [binary, "serve", "--data", str(data_dir), "--listen", f"{LOOPBACK}:{port}",
                           "--allow-insecure-destinations", "--reconcile-interval-ms", "0",
                           "--mcp-oauth", str(config)],
                          tmp_path / "server.stderr.log")
            procs.append(server)
            url = server.wait_ready()
            world = World(fixture_url, url, data_dir, server.log_path)
            yield world
            world.operator.close()
            world.http.close()
        finally:
            for proc in reversed(procs):
                proc.stop()


class MemoryStorage(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def provider(world: World, storage: MemoryStorage) -> OAuthClientProvider:
    """The official client's OAuth provider; the "browser" follows the authorize URL once and
    hands the redirect's code and state back, as a host's callback page would."""
    redirected: dict[str, str] = {}

    async def redirect_handler(authorization_url: str) -> None:
        async with httpx.AsyncClient(trust_env=False, timeout=EXCHANGE_TIMEOUT_S) as browser:
            answer = await browser.get(authorization_url, follow_redirects=False)
        assert answer.status_code == 302, answer.text
        location = urllib.parse.urlsplit(answer.headers["location"])
        assert f"{location.scheme}://{location.netloc}{location.path}" == REDIRECT_URI
        query = dict(urllib.parse.parse_qsl(location.query))
        assert query["iss"] == world.issuer
        redirected.update(query)

    async def callback_handler() -> tuple[str, str | None]:
        return redirected["code"], redirected.get("state")

    metadata = OAuthClientMetadata(client_name="steward-tests", redirect_uris=[REDIRECT_URI],
                                   grant_types=["authorization_code"], response_types=["code"],
                                   token_endpoint_auth_method="none")
    return OAuthClientProvider(server_url=world.resource, client_metadata=metadata,
                               storage=storage, redirect_handler=redirect_handler,
                               callback_handler=callback_handler)


def call_with_oauth(world: World, storage: MemoryStorage, arguments: dict[str, Any]) -> tuple[
        list[str], bool, dict[str, Any]]:
    """A new connection authorized by the OAuth provider: (tool names, isError, envelope)."""
    async def go() -> tuple[list[str], bool, dict[str, Any]]:
        auth = provider(world, storage)
        async with httpx.AsyncClient(auth=auth, timeout=EXCHANGE_TIMEOUT_S, trust_env=False) as http:
            async with streamable_http_client(world.resource, http_client=http) as (read, write, _):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = [t.name for t in (await session.list_tools()).tools]
                    result = await session.call_tool("oauth-refund", arguments)
                    assert result.structuredContent is not None, result
                    return tools, bool(result.isError), result.structuredContent

    return asyncio.run(asyncio.wait_for(go(), EXCHANGE_TIMEOUT_S))


def refund_arguments() -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": 700,
            "operationKey": f"oauth-{uuid.uuid4()}"}


def challenge(response: httpx.Response) -> dict[str, str]:
    """The parameters of a `WWW-Authenticate: Bearer k="v", ...` challenge."""
    value = response.headers["www-authenticate"]
    assert value.startswith("Bearer "), value
    params = {}
    for part in value[len("Bearer "):].split(", "):
        name, _, quoted = part.partition("=")
        params[name] = quoted.strip('"')
    return params


def test_an_unauthenticated_request_gets_401_naming_the_metadata_url(world: World) -> None:
    answer = world.post_mcp(None)
    assert answer.status_code == 401, answer.text
    params = challenge(answer)
    assert params["resource_metadata"] == world.metadata_url
    assert params["scope"] == "steward:mcp"
    assert "error" not in params, "no token was sent, so none is invalid"
    assert answer.json()["error"]["code"] == "AUTHENTICATION_FAILED"
    for url in (world.metadata_url, world.url + "/.well-known/oauth-protected-resource"):
        metadata = world.http.get(url).json()
        assert metadata["resource"] == world.resource
        assert metadata["authorization_servers"] == [world.issuer]
        assert metadata["scopes_supported"] == ["steward:mcp"]


def test_the_official_client_authorizes_and_a_call_writes_once_per_operation_key(world: World) -> None:
    storage = MemoryStorage()
    arguments = refund_arguments()
    writes, issued = world.writes(), world.issued()
    tools, is_error, first = call_with_oauth(world, storage, arguments)
    assert tools == ["oauth-refund"]
    assert not is_error and first["status"] == "succeeded", first
    assert world.writes() == writes + 1
    assert world.issued() == issued + 1, "one authorization, one token"
    assert storage.client is not None and storage.tokens is not None
    world.tokens.append(storage.tokens.access_token)

    # The same operation key on a new connection, with the stored token: the recorded result,
    # no second write, no second authorization.
    _, is_error, again = call_with_oauth(world, storage, arguments)
    assert not is_error and again["invocationId"] == first["invocationId"], again
    assert world.writes() == writes + 1, "a retried operation key never writes again"
    assert world.issued() == issued + 1

    # A new operation key is a new operation: one more write.
    _, is_error, other = call_with_oauth(world, storage, refund_arguments())
    assert not is_error and other["invocationId"] != first["invocationId"]
    assert world.writes() == writes + 2


def test_a_token_for_another_audience_is_refused(world: World) -> None:
    writes, issued = world.writes(), world.issued()
    world.set_control(audience="http://127.0.0.1:1/mcp")
    try:
        storage = MemoryStorage()
        with pytest.raises(BaseException):
            call_with_oauth(world, storage, refund_arguments())
    finally:
        world.set_control()
    assert world.issued() == issued + 1, "the client was issued a token, for the wrong audience"
    assert storage.tokens is not None
    world.tokens.append(storage.tokens.access_token)
    refused = world.post_mcp(storage.tokens.access_token)
    assert refused.status_code == 401
    params = challenge(refused)
    assert params["error"] == "invalid_token"
    assert params["error_description"] == "the access token was issued for another resource"
    assert params["resource_metadata"] == world.metadata_url
    assert world.writes() == writes, "a refused token wrote nothing"


def test_expired_wrong_issuer_unmapped_and_underscoped_tokens_are_refused(world: World) -> None:
    writes = world.writes()
    expired = world.post_mcp(world.mint(lifetimeS=-3600))
    assert expired.status_code == 401
    assert challenge(expired)["error_description"] == "the access token has expired"

    wrong_issuer = world.post_mcp(world.mint(issuer="http://127.0.0.1:1/issuer"))
    assert wrong_issuer.status_code == 401
    assert challenge(wrong_issuer)["error"] == "invalid_token"

    tampered = world.mint().split(".")
    forged = world.mint(subject="mallory").split(".")
    spliced = ".".join([tampered[0], forged[1], tampered[2]])
    assert world.post_mcp(spliced).status_code == 401

    unmapped = world.post_mcp(world.mint(subject="mallory"))
    assert unmapped.status_code == 403
    assert unmapped.json()["error"]["code"] == "subject_not_mapped"

    underscoped = world.post_mcp(world.mint(scope="openid"))
    assert underscoped.status_code == 403
    assert underscoped.json()["error"]["code"] == "insufficient_scope"
    params = challenge(underscoped)
    assert params["error"] == "insufficient_scope" and params["scope"] == "steward:mcp"

    good = world.post_mcp(world.mint())
    assert good.status_code == 200, good.text
    assert world.writes() == writes


def test_agent_keys_still_work_beside_oauth(world: World) -> None:
    answer = world.post_mcp(world.agent_key)
    assert answer.status_code == 200, answer.text
    assert "oauth-refund" in answer.text
    unknown = world.post_mcp("stw_" + pysecrets.token_hex(16))
    assert unknown.status_code == 401
    assert challenge(unknown)["error"] == "invalid_token"


def test_zz_no_access_token_reaches_the_server_log(world: World) -> None:
    log = world.server_log.read_text("utf-8", "replace")
    assert world.tokens, "the tests above recorded the tokens they used"
    for token in world.tokens:
        assert token not in log
        assert token.split(".")[2] not in log, "not even the signature"
