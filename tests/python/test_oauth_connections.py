"""Accounts that act for a person, through the official SDK: `connections.create_session`, the
person's consent at the fixture's OAuth provider (driven here), Steward's callback, `complete`,
and actions that write through the account with that person's token.

The fixture counts what the provider saw: writes per user, token requests per grant, refused
refreshes, 401s and revocations. A count, never an HTTP 200, is what each test asserts on.
"""

from __future__ import annotations

import json
import secrets as pysecrets
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import anlyon
import pytest
from anlyon.errors import AnlyonError
from conftest import OAUTH_CLIENT_SECRET_NAME, OAUTH_INTEGRATION, Steward

# The fixture's default client secret (`steward_fixture::oauth::DEFAULT_CLIENT_SECRET`).
CLIENT_SECRET = "fixture-client-secret-7c1f0e94a2"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())

# Every answer this module read outside the SDK (the callback's, the provider's), for the leak scan.
SEEN: list[tuple[str, str]] = []


def http(method: str, url: str, body: Any = None) -> tuple[int, dict[str, str], str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    try:
        with _OPENER.open(request, timeout=30) as response:
            status, headers, text = response.status, {k.lower(): v for k, v in response.headers.items()}, response.read().decode()
    except urllib.error.HTTPError as e:
        status, headers, text = e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()
    SEEN.append((url, text + json.dumps(headers)))
    return status, headers, text


def provider(steward: Steward, method: str = "GET", path: str = "", body: Any = None) -> Any:
    status, _, text = http(method, steward.fixture_url.rstrip("/") + "/_fixture/oauth" + path, body)
    assert status == 200, text
    return json.loads(text)


def consent(connect_url: str, user: str, *, approve: bool = True) -> str:
    """The person signs in at the provider and consents; returns where the provider sends the
    browser back (Steward's callback URL with the code and the state)."""
    status, _, text = http("GET", connect_url)
    assert status == 200, text
    status, headers, text = http("POST", json.loads(text)["consentUrl"],
                                 {"user": user, "approve": approve})
    assert status == 303, text
    return headers["location"]


def callback(location: str) -> tuple[int, dict[str, Any]]:
    status, _, text = http("GET", location)
    return status, json.loads(text)


def expect(call: Any, *, status: int, code: str) -> AnlyonError:
    with pytest.raises(AnlyonError) as caught:
        call()
    assert (caught.value.status, caught.value.code) == (status, code), caught.value
    return caught.value


def new_name() -> str:
    return "PERSON_" + pysecrets.token_hex(4).upper()


@pytest.fixture(scope="module")
def client_secret(steward: Steward, operator: anlyon.Client) -> str:
    operator.secrets.put(OAUTH_CLIENT_SECRET_NAME, value=CLIENT_SECRET,
                         description="the fixture provider's client secret",
                         allowed_hosts=[steward.fixture_host])
    steward.secret_values.append(CLIENT_SECRET)
    return OAUTH_CLIENT_SECRET_NAME


@pytest.fixture
def oauth_faults(steward: Steward) -> Any:
    provider(steward, "POST", "/faults", {"refuseRefresh": False, "tokenDelayMs": 0,
                                          "accessTokenTtlS": 3600})
    yield steward
    provider(steward, "POST", "/faults", {"refuseRefresh": False, "tokenDelayMs": 0,
                                          "accessTokenTtlS": 3600})


def connect(steward: Steward, operator: anlyon.Client, user: str) -> str:
    """Connects an account for `user` through a consent session; returns its secret's name."""
    name = new_name()
    session = operator.connections.create_session(integration_id=OAUTH_INTEGRATION,
                                                  secret_name=name).data
    assert session["status"] == "pending" and session["connectUrl"], session
    status, done = callback(consent(session["connectUrl"], user))
    assert status == 200 and done["data"]["status"] == "completed", done
    assert operator.connections.complete(session["id"]).data["status"] == "completed"
    return name


def write_action(steward: Steward, operator: anlyon.Client, account: str) -> str:
    """A template action that writes to the provider's protected API through `account`."""
    name = "oauth-write-" + pysecrets.token_hex(4)
    operator.actions.create(
        name=name, method="POST",
        url_template=steward.fixture_url.rstrip("/") + "/oauth/api/writes",
        headers={"Authorization": "Bearer {{secret:" + account + "}}",
                 "X-Idempotency-Key": "{{input.key}}"},
        body_template={"note": "{{input.note}}"},
    )
    return name


def invoke(agent: anlyon.Client, action: str) -> dict[str, Any]:
    key = "op-" + pysecrets.token_hex(8)
    return agent.actions.invoke(action, {"key": key, "note": "hello"}, operation_key=key).data


def writes_by(steward: Steward, user: str) -> int:
    return int(provider(steward)["writesByUser"].get(user, 0))


def test_a_consented_account_writes_once_with_that_persons_token(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client, client_secret: str,
        oauth_faults: Any) -> None:
    name = new_name()
    session = operator.connections.create_session(integration_id=OAUTH_INTEGRATION,
                                                  secret_name=name).data
    assert session["status"] == "pending" and session["secretName"] == name
    assert session["connectUrl"].startswith(steward.fixture_url.rstrip("/") + "/oauth/authorize?")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(session["connectUrl"]).query)
    assert query["code_challenge_method"] == ["S256"] and query["state"][0]
    # Before consent: pending, as often as asked.
    assert operator.connections.complete(session["id"]).data["status"] == "pending"
    assert operator.connections.complete(session["id"]).data["status"] == "pending"

    status, done = callback(consent(session["connectUrl"], "alice"))
    assert status == 200 and done["data"]["status"] == "completed", done
    completed = operator.connections.complete(session["id"]).data
    assert completed["status"] == "completed"
    assert completed["connection"]["authKind"] == "oauth"
    assert completed["connection"]["health"]["status"] == "healthy"
    assert operator.connections.complete(session["id"]).data == completed, "idempotent"
    listed = {c["name"]: c for c in operator.connections.list().data}
    assert listed[name]["integrationId"] == OAUTH_INTEGRATION

    bob = connect(steward, operator, "bob")
    alice_before, bob_before = writes_by(steward, "alice"), writes_by(steward, "bob")
    inv = invoke(agent, write_action(steward, operator, name))
    assert inv["status"] == "succeeded", inv
    assert (writes_by(steward, "alice"), writes_by(steward, "bob")) == (alice_before + 1, bob_before)
    inv = invoke(agent, write_action(steward, operator, bob))
    assert inv["status"] == "succeeded", inv
    assert (writes_by(steward, "alice"), writes_by(steward, "bob")) == (alice_before + 1, bob_before + 1)


def test_an_expired_access_token_is_refreshed_once_and_the_write_succeeds(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client, client_secret: str,
        oauth_faults: Any) -> None:
    user = "carol-" + pysecrets.token_hex(3)
    action = write_action(steward, operator, connect(steward, operator, user))
    before = provider(steward)
    # The provider expires every access token now; Steward still believes its token good, sends,
    # is refused with 401, refreshes once and sends once more.
    provider(steward, "POST", "/faults", {"expireAccessTokensNow": True})
    inv = invoke(agent, action)
    assert inv["status"] == "succeeded", inv
    after = provider(steward)
    assert writes_by(steward, user) == 1
    assert after["unauthorized"] == before["unauthorized"] + 1
    assert after["tokenRequests"].get("refresh_token", 0) == \
        before["tokenRequests"].get("refresh_token", 0) + 1
    # The rotated refresh token was kept: the next write needs no refresh at all.
    inv = invoke(agent, action)
    assert inv["status"] == "succeeded" and writes_by(steward, user) == 2
    assert provider(steward)["tokenRequests"]["refresh_token"] == after["tokenRequests"]["refresh_token"]

    # A token that expires within Steward's margin is refreshed before use: no 401 at all.
    provider(steward, "POST", "/faults", {"accessTokenTtlS": 30})
    user = "dave-" + pysecrets.token_hex(3)
    action = write_action(steward, operator, connect(steward, operator, user))
    before = provider(steward)
    inv = invoke(agent, action)
    assert inv["status"] == "succeeded", inv
    after = provider(steward)
    assert writes_by(steward, user) == 1
    assert after["unauthorized"] == before["unauthorized"]
    assert after["tokenRequests"]["refresh_token"] == before["tokenRequests"]["refresh_token"] + 1


def test_a_refused_refresh_marks_the_account_and_sends_nothing(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client, client_secret: str,
        oauth_faults: Any) -> None:
    provider(steward, "POST", "/faults", {"accessTokenTtlS": 30})
    user = "erin-" + pysecrets.token_hex(3)
    name = connect(steward, operator, user)
    action = write_action(steward, operator, name)
    provider(steward, "POST", "/faults", {"refuseRefresh": True})
    before = provider(steward)
    inv = invoke(agent, action)
    assert inv["status"] == "failed", inv
    after = provider(steward)
    assert writes_by(steward, user) == 0
    assert after["refusedRefreshes"] == before["refusedRefreshes"] + 1
    assert after["unauthorized"] == before["unauthorized"], "the write was never sent"
    assert inv["error"]["code"] == "connection_needs_reauth", inv
    assert "nothing was sent" in inv["error"]["message"] and inv["responseStatus"] is None
    account = {c["name"]: c for c in operator.connections.list().data}[name]
    assert account["health"]["status"] == "needs_reauth", account


def test_a_token_endpoint_that_does_not_answer_in_time_sends_nothing(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client, client_secret: str,
        oauth_faults: Any) -> None:
    # Past Steward's 10 s token deadline (`OAUTH_TOKEN_TIMEOUT_MS`): the refresh is abandoned,
    # the write is not sent, and the account is not marked (the grant may still be good).
    provider(steward, "POST", "/faults", {"accessTokenTtlS": 30})
    user = "ivan-" + pysecrets.token_hex(3)
    name = connect(steward, operator, user)
    action = write_action(steward, operator, name)
    provider(steward, "POST", "/faults", {"tokenDelayMs": 11_000})
    inv = invoke(agent, action)
    assert inv["status"] == "failed", inv
    assert inv["error"]["code"] == "connection_refresh_failed", inv
    assert writes_by(steward, user) == 0
    account = {c["name"]: c for c in operator.connections.list().data}[name]
    assert account["health"]["status"] == "healthy", account


def test_reconnect_of_a_signed_in_account_answers_a_consent_session_as_the_sdk_describes(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client, client_secret: str,
        oauth_faults: Any) -> None:
    """`connections.reconnect(name)` with nothing else: `pending` with a session to open and
    `complete`, under the same name (the SDK's docstring); the account works again after it."""
    provider(steward, "POST", "/faults", {"accessTokenTtlS": 30})
    user = "judy-" + pysecrets.token_hex(3)
    name = connect(steward, operator, user)
    action = write_action(steward, operator, name)
    provider(steward, "POST", "/faults", {"refuseRefresh": True})
    assert operator.connections.check(name).data["health"]["status"] == "needs_reauth"
    assert invoke(agent, action)["status"] == "failed"
    assert writes_by(steward, user) == 0
    provider(steward, "POST", "/faults", {"refuseRefresh": False, "accessTokenTtlS": 3600})

    # A key is not how a signed-in account reconnects: refused, naming the field.
    refused = expect(lambda: operator.connections.reconnect(name, api_key="not-a-key-" + user),
                     status=400, code="VALIDATION_ERROR")
    assert refused.details["field"] == "apiKey", refused.details
    version = {s["name"]: s for s in operator.secrets.list().data}[name]["version"]

    answer = operator.connections.reconnect(name).data
    assert answer["status"] == "pending", answer
    session = answer["session"]
    assert session["status"] == "pending" and session["secretName"] == name, session
    assert session["integrationId"] == OAUTH_INTEGRATION
    assert session["connectUrl"].startswith(steward.fixture_url.rstrip("/") + "/oauth/authorize?")
    # Nothing changed yet: the same secret version, still needs_reauth.
    assert operator.connections.complete(session["id"]).data["status"] == "pending"
    account = {c["name"]: c for c in operator.connections.list().data}[name]
    assert account["health"]["status"] == "needs_reauth" and account["version"] == version

    status, done = callback(consent(session["connectUrl"], user))
    assert status == 200 and done["data"]["status"] == "completed", done
    completed = operator.connections.complete(session["id"]).data
    assert completed["status"] == "completed", completed
    assert completed["connection"]["name"] == name
    assert completed["connection"]["health"]["status"] == "healthy"
    assert completed["connection"]["version"] == version + 1, "the same secret, rotated"
    inv = invoke(agent, action)
    assert inv["status"] == "succeeded", inv
    assert writes_by(steward, user) == 1

    # An unknown account is 404, as for an api_key one.
    expect(lambda: operator.connections.reconnect("NO_SUCH_ACCOUNT"), status=404, code="NOT_FOUND")


def test_deleting_the_account_revokes_it_at_the_provider(
        steward: Steward, operator: anlyon.Client, client_secret: str, oauth_faults: Any) -> None:
    user = "frank-" + pysecrets.token_hex(3)
    name = connect(steward, operator, user)
    before = [r for r in provider(steward)["revocations"] if r["user"] == user]
    assert before == []
    operator.secrets.delete(name)
    kinds = sorted(r["kind"] for r in provider(steward)["revocations"] if r["user"] == user)
    assert kinds == ["access_token", "refresh_token"], kinds
    assert name not in {c["name"] for c in operator.connections.list().data}


def test_a_replayed_state_a_refusal_and_a_wrong_verifier_connect_nothing(
        steward: Steward, operator: anlyon.Client, client_secret: str, oauth_faults: Any) -> None:
    # A replayed callback: the state was spent by the first one.
    name = new_name()
    session = operator.connections.create_session(integration_id=OAUTH_INTEGRATION,
                                                  secret_name=name).data
    location = consent(session["connectUrl"], "grace")
    assert callback(location)[0] == 200
    status, replay = callback(location)
    assert status == 400 and replay["error"]["code"] == "CONNECTION_SESSION_INVALID", replay
    assert operator.connections.complete(session["id"]).data["status"] == "completed"

    # The person refuses.
    name = new_name()
    session = operator.connections.create_session(integration_id=OAUTH_INTEGRATION,
                                                  secret_name=name).data
    status, refused = callback(consent(session["connectUrl"], "grace", approve=False))
    assert status == 422 and refused["error"]["code"] == "CONNECTION_SESSION_FAILED", refused
    expect(lambda: operator.connections.complete(session["id"]), status=422,
           code="CONNECTION_SESSION_FAILED")
    assert name not in {s["name"] for s in operator.secrets.list().data}

    # Someone swaps the PKCE challenge in the link: the code is bound to their challenge, so
    # Steward's verifier does not match it and the provider refuses the exchange.
    name = new_name()
    session = operator.connections.create_session(integration_id=OAUTH_INTEGRATION,
                                                  secret_name=name).data
    parts = urllib.parse.urlsplit(session["connectUrl"])
    query = dict(urllib.parse.parse_qsl(parts.query))
    query["code_challenge"] = "E9Melhoa2OwvFUO53VmM1JzgcObyNDlJkXRS4cIhWcM"
    swapped = parts._replace(query=urllib.parse.urlencode(query)).geturl()
    status, failed = callback(consent(swapped, "grace"))
    assert status == 422 and failed["error"]["code"] == "CONNECTION_SESSION_FAILED", failed
    assert "invalid_grant" in failed["error"]["message"], failed
    assert name not in {s["name"] for s in operator.secrets.list().data}

    # A state nobody issued.
    status, unknown = callback(steward.url.rstrip("/") + "/api/v2/connections/callback?code=x&state=nope")
    assert status == 400 and unknown["error"]["code"] == "CONNECTION_SESSION_INVALID"


def test_another_environment_cannot_act_through_the_account(
        steward: Steward, operator: anlyon.Client, other_operator: anlyon.Client,
        client_secret: str, oauth_faults: Any) -> None:
    user = "heidi-" + pysecrets.token_hex(3)
    name = connect(steward, operator, user)
    action = write_action(steward, other_operator, name)
    inv = invoke(other_operator, action)
    assert inv["status"] == "failed", inv
    assert writes_by(steward, user) == 0
    expect(lambda: other_operator.connections.complete("cs_nope"), status=404, code="NOT_FOUND")


def test_no_token_appears_in_any_answer_log_or_file(steward: Steward, operator: anlyon.Client,
                                                    client_secret: str) -> None:
    issued = provider(steward, "GET", "/tokens")
    tokens = issued["access"] + issued["refresh"]
    assert len(tokens) >= 10, "the tests above connected accounts and refreshed them"
    # The suite's last test (test_zz_secret_leak) looks for them everywhere too.
    steward.secret_values.extend(tokens)
    operator.connections.list()
    for seen in steward.recorded:
        for token in tokens:
            assert token not in seen.body, f"a token in the body of {seen.method} {seen.url}"
            assert all(token not in h for h in seen.headers.values())
    answers = [text for url, text in SEEN if url.startswith(steward.url)]
    assert answers, "the callback's answers were seen"
    for text in answers:
        for token in tokens:
            assert token not in text, "a token in an answer of Steward's callback"
    log = steward.server_log.read_text("utf-8", "replace")
    assert "connections/callback" in log, "the server log was captured"
    for token in tokens + [CLIENT_SECRET]:
        assert token not in log, "a token in the server log"
    for path in steward.data_dir.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            for token in tokens + [CLIENT_SECRET]:
                assert token.encode() not in content, f"a token in plaintext in {path.name}"
