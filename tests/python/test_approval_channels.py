"""Approval channels (issue #29 item 2): a Slack-shaped receiver and an SMTP receiver (aiosmtpd)
started by the test each get exactly one message per pending approval and one per outcome, with a link that resolves to the approval
in the console; a receiver that fails is retried and then gets exactly one; a receiver that hangs
does not hold back the invoke's answer; no message carries a secret.

Messages are counted at the receiver (answered 2xx), never inferred from Steward's answers.
"""

from __future__ import annotations

import email
import email.policy
import http.server
import json
import os
import re
import socket
import subprocess
import secrets as pysecrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from conftest import (
    STRIPE_SECRET_NAME,
    STRIPE_SECRET_VALUE,
    Steward,
    create_key,
    running_steward,
    steward_bin,
)

# The SMTP receiver signs the channel in without TLS (loopback, a test): aiosmtpd warns of it.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")

PUBLIC_URL = "https://steward.example.test"
# A short retry schedule: a failing receiver is retried within a second or two.
SHORT_RETRY = ["--webhook-retry-attempts", "6", "--webhook-retry-first-delay-ms", "100",
               "--webhook-retry-max-delay-ms", "300"]
WAIT_S = 15.0
ENV = "sdk-main"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_RAW = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


class SlackReceiver:
    """A Slack-shaped incoming webhook: records each JSON POST. Answers 500 to the first
    `fail_first` posts; while `hold` is set, holds each request until `release` is set."""

    def __init__(self, fail_first: int = 0, hold: bool = False) -> None:
        self.fail_first = fail_first
        self.hold = hold
        self.release = threading.Event()
        self.holding = threading.Event()
        self.posts: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.token = "T0/B0/" + pysecrets.token_hex(12)
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                with receiver.lock:
                    failing = len(receiver.posts) < receiver.fail_first
                    entry = {"path": self.path, "raw": raw, "body": json.loads(raw),
                             "status": 500 if failing else 200}
                    receiver.posts.append(entry)
                    held = receiver.hold
                if held:
                    receiver.holding.set()
                    receiver.release.wait(WAIT_S * 2)
                self.send_response(entry["status"])
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/{self.token}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def accepted(self, needle: str = "") -> list[dict[str, Any]]:
        """The posts answered 2xx whose text contains `needle`."""
        with self.lock:
            return [p for p in self.posts if p["status"] == 200 and needle in p["raw"]]

    def all_raw(self) -> str:
        with self.lock:
            return "\n".join(p["raw"] for p in self.posts)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class SmtpReceiver:
    """An SMTP server on loopback: answers `451` to the first `fail_first` messages, then
    records each message it accepts; signs in only `user` with `password`."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.user = "steward"
        self.password = "smtp-" + pysecrets.token_hex(12)
        self.attempts = 0
        self.logins: list[str] = []
        self.messages: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
                with receiver.lock:
                    receiver.attempts += 1
                    if receiver.attempts <= receiver.fail_first:
                        return "451 4.3.0 Try again later"
                    raw = envelope.content.decode("utf-8", "replace")
                    parsed = email.message_from_string(raw, policy=email.policy.default)
                    body = parsed.get_body(preferencelist=("plain",))
                    # The text a person reads: the subject and the decoded plain-text body.
                    text = f"{parsed['Subject']}\n{body.get_content() if body else ''}"
                    receiver.messages.append({"from": envelope.mail_from,
                                              "to": list(envelope.rcpt_tos),
                                              "raw": raw, "text": text})
                return "250 OK"

        def authenticate(server: Any, session: Any, envelope: Any, mechanism: str,
                         auth_data: Any) -> AuthResult:
            ok = (isinstance(auth_data, LoginPassword) and auth_data.login.decode() == receiver.user
                  and auth_data.password.decode() == receiver.password)
            if ok:
                receiver.logins.append(mechanism)
            return AuthResult(success=ok)

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port,
                                     authenticator=authenticate, auth_require_tls=False,
                                     auth_required=True)
        self.controller.start()

    def received(self, needle: str = "") -> list[dict[str, Any]]:
        with self.lock:
            return [m for m in self.messages if needle in m["text"]]

    def close(self) -> None:
        self.controller.stop()


def wait_for(check: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def api(steward: Steward, key: str, method: str, path: str,
        body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(steward.url + "/api/v2" + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {key}",
                                              "Content-Type": "application/json"})
    try:
        with _DIRECT.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


class World:
    """An environment with a gated refund action, an operator, an approver and an agent."""

    def __init__(self, steward: Steward) -> None:
        self.steward = steward
        self.operator_key = steward.keys["operator"]
        self.approver_key = create_key(steward.data_dir, ENV, "channels-approver", role="operator")
        self.agent_key = steward.keys["agent"]
        self.operator = steward.client(self.operator_key)
        self.approver = steward.client(self.approver_key)
        self.agent = steward.client(self.agent_key)
        self.operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                                  allowed_hosts=[steward.fixture_host])
        self.action = "channels-gated-" + pysecrets.token_hex(4)
        adapter = {"type": "stripe.refund",
                   "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                              "baseUrl": steward.fixture_url},
                   "credentialSecret": STRIPE_SECRET_NAME}
        self.operator.actions.create(name=self.action, adapter=adapter, requires_approval=True)
        self.channels: list[str] = []

    def add_slack(self, url: str) -> dict[str, Any]:
        status, body = api(self.steward, self.operator_key, "POST", "/approval-channels",
                           {"kind": "slack", "url": url})
        assert status == 201, body
        self.channels.append(body["data"]["id"])
        return body["data"]

    def remove_channels(self) -> None:
        for cid in self.channels:
            api(self.steward, self.operator_key, "DELETE", f"/approval-channels/{cid}")
        self.channels.clear()

    def invoke(self) -> dict[str, Any]:
        amount = 1000 + pysecrets.randbelow(1000)
        return self.agent.actions.invoke(
            self.action, {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": amount}).data


@pytest.fixture(scope="module")
def steward() -> Iterator[Steward]:
    with running_steward(["--reconcile-interval-ms", "0", "--public-url", PUBLIC_URL + "/",
                          *SHORT_RETRY]) as steward:
        yield steward


@pytest.fixture(scope="module")
def world(steward: Steward) -> World:
    return World(steward)


@pytest.fixture
def clean(world: World) -> Iterator[World]:
    yield world
    world.remove_channels()


def console_cookie(steward: Steward, key: str) -> str:
    """Signs in to the console with `key` (a plain form POST) and answers the session cookie."""
    request = urllib.request.Request(steward.url + "/console/login",
                                     data=urllib.parse.urlencode({"key": key}).encode(),
                                     method="POST")
    try:
        response = _RAW.open(request, timeout=10)
        headers = response.headers
    except urllib.error.HTTPError as error:
        headers = error.headers
    cookie = headers.get("Set-Cookie")
    assert cookie, "signing in set no cookie"
    return cookie.split(";", 1)[0]


def assert_no_secret(receiver: SlackReceiver, world: World) -> None:
    everything = receiver.all_raw()
    for secret in [STRIPE_SECRET_VALUE, receiver.token, world.operator_key, world.agent_key,
                   world.approver_key]:
        assert secret not in everything, "a message carried a secret"


def test_a_failing_slack_receiver_is_retried_then_gets_one_message_per_approval_and_outcome(
        clean: World) -> None:
    world = clean
    receiver = SlackReceiver(fail_first=2)
    try:
        channel = world.add_slack(receiver.url)
        # The URL is a credential: the answer shows only where it sends.
        assert channel["kind"] == "slack"
        assert channel["destination"] == receiver.url.split("/services/")[0]
        status, listed = api(world.steward, world.operator_key, "GET", "/approval-channels")
        assert status == 200 and [c["id"] for c in listed["data"]] == [channel["id"]]
        assert receiver.token not in json.dumps(listed)
        # A channel is not a signed webhook: the webhook listing does not show it.
        status, hooks = api(world.steward, world.operator_key, "GET",
                            "/events/topics/approvals/subscriptions")
        assert status == 200 and channel["id"] not in json.dumps(hooks)

        parked = world.invoke()
        approval_id = parked["approvalId"]
        assert parked["status"] in ("awaiting_approval", "pending_approval"), parked

        assert wait_for(lambda: len(receiver.accepted(approval_id)) >= 1), receiver.posts
        requested = receiver.accepted(approval_id)
        assert len(requested) == 1, requested
        # Two failures, then the one accepted post: retried, not lost and not doubled.
        assert [p["status"] for p in receiver.posts] == [500, 500, 200]
        message = requested[0]["body"]
        assert requested[0]["path"] == f"/services/{receiver.token}"
        assert world.action in message["text"] and "amount: " in message["text"]
        assert "Requested by: " in message["text"]
        links = re.findall(re.escape(PUBLIC_URL) + r"(/console/#[A-Za-z0-9_]+)", message["text"])
        assert links == [f"/console/#{approval_id}"], message["text"]

        # The link works: the console page it names, signed in, shows this approval.
        cookie = console_cookie(world.steward, world.approver_key)
        path = links[0].split("#", 1)[0]
        request = urllib.request.Request(world.steward.url + path, headers={"Cookie": cookie})
        with _RAW.open(request, timeout=10) as response:
            assert response.status == 200
            page = response.read().decode()
        assert f'id="{approval_id}"' in page

        world.approver.approvals.approve(approval_id)
        assert wait_for(lambda: len(receiver.accepted("Approval approved")) >= 1), receiver.posts
        outcome = receiver.accepted("Approval approved")
        assert len(outcome) == 1 and approval_id in outcome[0]["raw"]
        # Nothing else arrives: one message for the request, one for its outcome.
        time.sleep(1.0)
        assert len(receiver.accepted()) == 2, receiver.posts
        assert_no_secret(receiver, world)
    finally:
        receiver.close()


def test_a_hanging_receiver_does_not_hold_back_the_invoke(clean: World) -> None:
    world = clean
    receiver = SlackReceiver(hold=True)
    try:
        world.add_slack(receiver.url)
        first = world.invoke()["approvalId"]
        assert receiver.holding.wait(WAIT_S), "the first message never arrived"
        # The receiver is holding the first message's request open: the next invoke answers
        # all the same, while the request is still held.
        second = world.invoke()
        assert second["approvalId"] != first
        assert not receiver.release.is_set()
        with receiver.lock:
            assert all(p["status"] == 200 for p in receiver.posts)
            held = len(receiver.posts)
        assert held == 1, "the channel sends one message at a time"

        receiver.hold = False
        receiver.release.set()
        assert wait_for(lambda: len(receiver.accepted(second["approvalId"])) == 1), receiver.posts
        assert len(receiver.accepted(first)) == 1
        assert_no_secret(receiver, world)
    finally:
        receiver.close()


def test_an_smtp_receiver_that_answers_451_is_retried_then_gets_one_email_each(
        clean: World) -> None:
    world = clean
    smtp = SmtpReceiver(fail_first=2)
    try:
        status, body = api(world.steward, world.operator_key, "POST", "/approval-channels", {
            "kind": "email", "host": "127.0.0.1", "port": smtp.port, "tls": "none",
            "from": "steward@example.test", "to": ["ops@example.test", "lead@example.test"],
            "username": smtp.user, "password": smtp.password})
        assert status == 201, body
        world.channels.append(body["data"]["id"])
        assert smtp.password not in json.dumps(body)
        assert body["data"]["destination"] == (
            f"smtp://127.0.0.1:{smtp.port} to ops@example.test, lead@example.test")

        approval_id = world.invoke()["approvalId"]
        assert wait_for(lambda: len(smtp.received(approval_id)) >= 1), smtp.attempts
        requested = smtp.received("Approval requested")
        assert len(requested) == 1, requested
        # Two 451s, then the accepted one: retried, not lost and not doubled.
        assert smtp.attempts == 3
        mail = requested[0]
        assert mail["from"] == "steward@example.test"
        assert sorted(mail["to"]) == ["lead@example.test", "ops@example.test"]
        assert world.action in mail["text"] and "amount: " in mail["text"]
        assert f"{PUBLIC_URL}/console/#{approval_id}" in mail["text"]
        assert smtp.logins, "the channel signed in with its user"

        world.approver.approvals.deny(approval_id)
        assert wait_for(lambda: len(smtp.received("Approval denied")) >= 1)
        time.sleep(1.0)
        assert len(smtp.received(approval_id)) == 2, [m["text"][:200] for m in smtp.messages]
        everything = "\n".join(m["raw"] + m["text"] for m in smtp.messages)
        for secret in [smtp.password, STRIPE_SECRET_VALUE, world.operator_key, world.agent_key]:
            assert secret not in everything, "an email carried a secret"
    finally:
        smtp.close()


def test_bad_channel_bodies_are_refused_naming_the_field(world: World) -> None:
    cases = [({"url": "http://127.0.0.1:9/x"}, "kind"),
             ({"kind": "pager", "url": "http://127.0.0.1:9/x"}, "kind"),
             ({"kind": "slack"}, "url"),
             ({"kind": "slack", "url": "not a url"}, "url"),
             ({"kind": "email", "from": "a@b.test", "to": ["c@d.test"]}, "host"),
             ({"kind": "email", "host": "127.0.0.1", "tls": "maybe", "from": "a@b.test",
               "to": ["c@d.test"]}, "tls"),
             ({"kind": "email", "host": "127.0.0.1", "tls": "none", "from": "not-an-address",
               "to": ["c@d.test"]}, "from"),
             ({"kind": "email", "host": "127.0.0.1", "tls": "none", "from": "a@b.test",
               "to": []}, "to")]
    for body, field in cases:
        status, answer = api(world.steward, world.operator_key, "POST", "/approval-channels", body)
        assert status == 400, (body, answer)
        assert answer["success"] is False and field in json.dumps(answer["error"]), answer
    status, answer = api(world.steward, world.agent_key, "POST", "/approval-channels",
                         {"kind": "slack", "url": "http://127.0.0.1:9/x"})
    assert status == 403, answer
    status, answer = api(world.steward, world.operator_key, "DELETE", "/approval-channels/apc_none")
    assert status == 404, answer


def test_the_cli_adds_lists_and_removes_channels_without_showing_credentials(
        world: World) -> None:
    receiver = SlackReceiver()
    try:
        env = {**os.environ, "STEWARD_SERVER": world.steward.url,
               "STEWARD_API_KEY": world.operator_key, "NO_PROXY": "127.0.0.1",
               "STEWARD_SLACK_URL": receiver.url, "STEWARD_SMTP_PASSWORD": "pw-" + receiver.token}

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(steward_bin()), "channels", *args], env=env,
                                  capture_output=True, text=True, timeout=30)

        added = cli("add", "slack", "--json")
        assert added.returncode == 0, added.stderr
        slack = json.loads(added.stdout)
        email_added = cli("add", "email", "--host", "127.0.0.1", "--port", "2525", "--tls", "none",
                          "--from", "steward@example.test", "--to", "ops@example.test",
                          "--username", "steward")
        assert email_added.returncode == 0, email_added.stderr
        listed = cli("list")
        assert listed.returncode == 0, listed.stderr
        assert slack["id"] in listed.stdout and "slack" in listed.stdout, listed.stdout
        assert "smtp://127.0.0.1:2525 to ops@example.test" in listed.stdout, listed.stdout
        for out in [added.stdout, email_added.stdout, listed.stdout, added.stderr]:
            assert receiver.token not in out, "a credential was shown back"
        for channel in json.loads(cli("list", "--json").stdout):
            removed = cli("remove", channel["id"])
            assert removed.returncode == 0 and channel["id"] in removed.stdout, removed.stderr
        assert json.loads(cli("list", "--json").stdout) == []
        gone = cli("remove", slack["id"])
        assert gone.returncode == 1 and "NOT_FOUND" in gone.stderr, gone.stderr
    finally:
        receiver.close()
