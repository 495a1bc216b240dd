"""Generated hostile input for what the OpenAPI-driven fuzzer cannot reach (issue #30 item 6).

`scripts/fuzz-api` runs schemathesis over every operation of the served OpenAPI document. Two
surfaces are outside it: the operator console's HTML forms (`/console/...`, not API operations)
and `GET /api/v2/stream`, which stays open until the client leaves. Here Hypothesis (the engine
under schemathesis) generates their input: form fields of any name, length and text, ids of any
shape, with and without a valid session, CSRF token and origin; query strings for every page; and
stream requests with any `Last-Event-ID` and query. Each answer must be a status below 500, in
bounded time, and a console answer must be HTML; the stream must either refuse with the JSON
envelope or open with its `ready` frame. Afterwards the server answers and logged no panic.

Bounded by count (`EXAMPLES` per surface), derandomized, so a failure replays.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import anlyon
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import STRIPE_SECRET_NAME, STRIPE_SECRET_VALUE, Steward, create_key, running_steward

ENV = "fuzz-console"
# Generated cases per surface; each is one request on loopback.
EXAMPLES = 150
# The longest one answer (or the stream's first frame) may take, in seconds.
ANSWER_TIMEOUT_S = 10
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))

POST_ROUTES = [
    "/console/approvals/{id}/approve",
    "/console/approvals/{id}/deny",
    "/console/effects/{id}/reconcile",
    "/console/effects/{id}/resolve",
    "/console/environment/halt",
    "/console/environment/resume",
    "/console/holds",
    "/console/holds/{id}/release",
    "/console/logout",
    "/console/login",
]
GET_ROUTES = [
    "/console/", "/console/unknown", "/console/invocations", "/console/invocations/{id}",
    "/console/actions", "/console/actions/{id}", "/console/policies", "/console/policies/{id}",
    "/console/limits", "/console/keys", "/console/environment", "/console/audit",
    "/console/effects", "/console/runs", "/console/runs/{id}", "/console/holds", "/console/{id}",
]

# Text a hostile client would send: any unicode (control characters included), markup, long runs.
hostile_text = st.one_of(
    st.text(max_size=64),
    st.sampled_from(["", " ", "<script>alert(1)</script>", "' OR 1=1 --", "../../etc/passwd",
                     "%00", "\u202e", "{{secret:STRIPE}}", "null", "-1", "1e309", "A" * 70_000]),
)
# Statuses seen per surface: the run must have reached past the guards, not only been refused.
SEEN: dict[str, set[int]] = {"forms": set(), "pages": set(), "stream": set()}

ids = st.one_of(st.text(min_size=1, max_size=40).filter(lambda s: "/" not in s and s not in (".", "..")),
                st.sampled_from(["apr_0", "eff_0", "inv_0", "0" * 26, "%2F", "%00"]))


class Console:
    """One signed-in operator session over raw HTTP (no browser: every byte is the test's)."""

    def __init__(self, steward: Steward, key: str) -> None:
        parsed = urllib.parse.urlsplit(steward.url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.origin = f"{parsed.scheme}://{parsed.netloc}"
        status, headers, _ = self.request("POST", "/console/login", form={"key": key}, origin=True)
        assert status == 303, status
        self.cookie = headers["set-cookie"].split(";", 1)[0]
        _, _, page = self.request("GET", "/console/", cookie=self.cookie)
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        self.csrf = found.group(1) if found else ""

    def request(self, method: str, path: str, *, form: dict[str, str] | None = None,
                raw_body: bytes | None = None, cookie: str | None = None, origin: bool = False,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=ANSWER_TIMEOUT_S)
        all_headers = dict(headers or {})
        body = raw_body
        if form is not None:
            body = urllib.parse.urlencode(form).encode()
            all_headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        if cookie:
            all_headers["Cookie"] = cookie
        if origin:
            all_headers["Origin"] = self.origin
        try:
            connection.request(method, path, body=body, headers=all_headers)
            response = connection.getresponse()
            text = response.read().decode("utf-8", "replace")
            return response.status, {k.lower(): v for k, v in response.getheaders()}, text
        finally:
            connection.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Steward]:
    with running_steward(["--reconcile-interval-ms", "0"]) as state:
        yield state


@pytest.fixture(scope="module")
def console(server: Steward) -> Console:
    key = create_key(server.data_dir, ENV, "fuzz-console-operator", role="operator")
    agent_key = create_key(server.data_dir, ENV, "fuzz-console-agent")
    operator = server.client(key)
    agent = server.client(agent_key)
    # Something for the pages to show: a parked invocation (a pending approval) and a write.
    operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE, allowed_hosts=[server.fixture_host])
    for name, gated in (("fuzz-refund", False), ("fuzz-gated", True)):
        operator.actions.create(name=name, adapter={"type": "stripe.refund", "config": {
            "account": "acct_fuzz", "mode": "test", "currency": "usd", "baseUrl": server.fixture_url},
            "credentialSecret": STRIPE_SECRET_NAME}, requires_approval=gated)
        agent.actions.invoke(name, input={"paymentIntent": "pi_fuzzconsole", "amount": 100})
    return Console(server, key)


# Hyper's own answers to a request line or head past its bounds, before any router runs: bare and
# bodiless (docs/DECISIONS.md, "HTTP edge").
PROTOCOL_REFUSALS = (400, 414, 431)


def assert_console_answer(status: int, headers: dict[str, str], what: Any) -> None:
    assert status < 500, (status, what)
    if status in PROTOCOL_REFUSALS and headers.get("content-length") == "0" and "content-type" not in headers:
        return
    if status not in (204, 303, 304):
        assert headers.get("content-type", "").startswith("text/html"), (status, headers, what)


@SETTINGS
@given(route=st.sampled_from(POST_ROUTES), id_=ids,
       fields=st.dictionaries(st.sampled_from(["note", "outcome", "reason", "confirm", "key", "csrf", "x", "evidence", "\u00e9"]),
                              hostile_text, max_size=4),
       with_session=st.booleans(), with_csrf=st.booleans(), with_origin=st.booleans(),
       raw=st.none() | st.binary(max_size=256))
# One case that must pass every guard, so the run shows it reached the handlers.
@example(route="/console/environment/halt", id_="x", fields={"reason": "fuzz", "confirm": "yes"}, with_session=True,
         with_csrf=True, with_origin=True, raw=None)
def test_console_forms_take_any_input_without_a_server_error(
        console: Console, route: str, id_: str, fields: dict[str, str], with_session: bool,
        with_csrf: bool, with_origin: bool, raw: bytes | None) -> None:
    path = route.replace("{id}", urllib.parse.quote(id_, safe=""))
    form = dict(fields)
    if with_csrf:
        form["csrf"] = console.csrf
    status, headers, _ = console.request(
        "POST", path, form=None if raw is not None else form, raw_body=raw,
        cookie=console.cookie if with_session and route != "/console/logout" else None,
        origin=with_origin,
        headers={"Content-Type": "application/x-www-form-urlencoded"} if raw is not None else None)
    SEEN["forms"].add(status)
    assert_console_answer(status, headers, (path, form, raw))


@SETTINGS
@given(route=st.sampled_from(GET_ROUTES), id_=ids,
       query=st.dictionaries(st.sampled_from(["status", "action", "q", "operationKey", "cursor", "page",
                                              "limit", "from", "to", "done", "filter", "\u00e9"]),
                             hostile_text, max_size=4))
def test_console_pages_take_any_query_without_a_server_error(
        console: Console, route: str, id_: str, query: dict[str, str]) -> None:
    path = route.replace("{id}", urllib.parse.quote(id_, safe=""))
    if query:
        path += "?" + urllib.parse.urlencode(query)
    status, headers, _ = console.request("GET", path, cookie=console.cookie)
    SEEN["pages"].add(status)
    assert_console_answer(status, headers, path)


@SETTINGS
@given(last_event_id=st.none() | hostile_text.filter(lambda s: "\r" not in s and "\n" not in s and "\x00" not in s),
       query=st.dictionaries(st.text(max_size=12), st.text(max_size=40), max_size=3),
       authorized=st.booleans())
def test_the_stream_refuses_or_opens_for_any_request(
        server: Steward, console: Console, last_event_id: str | None, query: dict[str, str],
        authorized: bool) -> None:
    parsed = urllib.parse.urlsplit(server.url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=ANSWER_TIMEOUT_S)
    headers = {"Accept": "text/event-stream"}
    if authorized:
        headers["Authorization"] = f"Bearer {server.keys['agent']}"
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id.encode("utf-8", "replace").decode("latin-1", "replace")
    path = "/api/v2/stream" + ("?" + urllib.parse.urlencode(query) if query else "")
    try:
        try:
            connection.request("GET", path, headers=headers)
        except (UnicodeEncodeError, ValueError):
            return  # http.client itself refuses to send such a header: nothing reached the server
        response = connection.getresponse()
        SEEN["stream"].add(response.status)
        assert response.status < 500, (response.status, path, last_event_id)
        if response.status == 200:
            assert response.getheader("content-type", "").startswith("text/event-stream")
            first = response.readline().decode()  # the ready frame's first line
            while first.startswith(":"):
                first = response.readline().decode()
            assert first.startswith(("event: ready", "id:", "retry:")), first
        else:
            body = response.read()
            if response.status in PROTOCOL_REFUSALS and not body:
                return
            envelope = json.loads(body)
            assert envelope["error"]["code"], envelope
    finally:
        connection.close()


def test_zz_the_server_lives_and_logged_no_panic(server: Steward, console: Console) -> None:
    status, _, body = console.request("GET", "/healthz")
    assert status == 200, body
    # Each surface was reached past its guards at least once (a run refused at the door proves
    # nothing): a page rendered, a form was accepted (303), a stream opened.
    assert 200 in SEEN["pages"], SEEN
    assert 303 in SEEN["forms"], SEEN
    assert 200 in SEEN["stream"], SEEN
    log = server.server_log.read_text(errors="replace")
    assert "panicked" not in log, log[-4000:]
