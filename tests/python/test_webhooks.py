"""Signed webhooks through the SDK's `client.events` subscription methods, `client.dlq` and
`anlyon.Receiver`, against a real server and a real receiver on 127.0.0.1.

Deliveries are counted at the receiver by event id, never inferred from HTTP answers to the SDK.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any

import anlyon
import pytest
from anlyon import AnlyonError, Receiver

from events_support import Reader, Server, server
from recovery_support import fresh_database

ATTEMPTS_MAX = 6
# The schedule these tests were written for (the default is days long): 6 attempts, 0.5 s doubling.
RETRY = ["--webhook-retry-attempts", str(ATTEMPTS_MAX), "--webhook-retry-first-delay-ms", "500",
         "--webhook-retry-max-delay-ms", "60000"]
DELIVERY_WAIT_S = 15.0
DEAD_LETTER_WAIT_S = 40.0  # 0.5 + 1 + 2 + 4 + 8 s of backoff, plus polling


class Hook:
    """A webhook receiver that records every POST and fails the first `fail_first` (or all)."""

    def __init__(self, fail_first: int = 0, *, always_fail: bool = False) -> None:
        self.fail_first = fail_first
        self.always_fail = always_fail
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                with hook.lock:
                    failing = hook.always_fail or len(hook.requests) < hook.fail_first
                    hook.requests.append({"headers": {k.lower(): v for k, v in self.headers.items()},
                                          "body": body, "status": 500 if failing else 200})
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivered(self) -> list[dict[str, Any]]:
        """The requests answered 2xx."""
        with self.lock:
            return [r for r in self.requests if r["status"] == 200]

    def wait(self, count: int, timeout: float = DELIVERY_WAIT_S, *, ok: bool = True) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.delivered() if ok else list(self.requests)
            if len(got) >= count:
                return got
            time.sleep(0.05)
        raise AssertionError(f"{len(self.requests)} requests, {len(self.delivered())} delivered")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def event_ids(requests: list[dict[str, Any]]) -> list[str]:
    return [json.loads(r["body"])["id"] for r in requests]


@pytest.fixture
def hook() -> Any:
    h = Hook()
    yield h
    h.close()


def test_a_delivery_is_verified_by_the_receiver_and_a_tampered_one_is_refused(
    tmp_path: Path, hook: Hook
) -> None:
    with server(tmp_path) as s:
        op = s.client(s.key("hooks-a", "op", role="operator"))
        env_id = op.environment.get().data["id"]
        topics = op.events.list_topics().data
        assert [t["name"] for t in topics] == ["runs", "approvals", "effects", "environment"]
        assert op.events.get_topic("top_environment").data["eventTypes"] == [
            "environment.halted", "environment.resumed"]
        created = op.events.create_subscription("environment", url=hook.url, generate_secret=True,
                                                event_types=["environment.halted"]).data
        secret = created["secret"]
        assert secret.startswith("whsec_")
        listed = op.events.list_subscriptions("environment").data
        assert [x["id"] for x in listed] == [created["id"]] and "secret" not in listed[0]

        op.environment.halt(reason="drill")
        op.environment.resume()
        (delivery,) = hook.wait(1)
        event = json.loads(delivery["body"])
        assert event["type"] == "environment.halted" and event["data"]["reason"] == "drill"
        assert delivery["headers"]["anlyon-event-id"] == event["id"]
        signature = delivery["headers"]["anlyon-signature"]
        assert Receiver(signing_secret=secret).verify(signature=signature, body=delivery["body"])
        bound = Receiver(signing_secret=secret, expected_environment_id=env_id)
        assert bound.verify(signature=signature, body=delivery["body"])
        # Tampered body, wrong secret, wrong environment: refused.
        tampered = delivery["body"].replace("drill", "dril1")
        assert not Receiver(signing_secret=secret).verify(signature=signature, body=tampered)
        assert not bound.verify(signature=signature, body=tampered)
        assert not Receiver(signing_secret="whsec_wrong").verify(signature=signature, body=delivery["body"])
        assert not Receiver(signing_secret=secret, expected_environment_id="env_other").verify(
            signature=signature, body=delivery["body"])
        # Only the types asked for: the resume was not delivered.
        time.sleep(1.0)
        assert len(hook.requests) == 1

        # Rotation: the new secret is shown once; both secrets sign during the grace.
        rotated = op.events.rotate_subscription_secret(created["id"]).data
        new_secret = rotated["secret"]
        assert new_secret.startswith("whsec_") and new_secret != secret
        assert rotated["previousSecretValidUntil"] is not None
        op.environment.halt(reason="after rotation")
        op.environment.resume()
        second = hook.wait(2)[1]
        for key in (secret, new_secret):
            assert Receiver(signing_secret=key).verify(
                signature=second["headers"]["anlyon-signature"], body=second["body"])
        # No secret in the server's log.
        assert secret not in s.log() and new_secret not in s.log()

        updated = op.events.update_subscription(created["id"], enabled=False).data
        assert updated["enabled"] is False
        assert op.events.delete_subscription(created["id"]).data["deleted"] is True
        assert op.events.list_subscriptions("environment").data == []


def test_a_receiver_failing_three_times_gets_the_event_once(tmp_path: Path) -> None:
    hook = Hook(fail_first=3)
    try:
        with server(tmp_path, RETRY) as s:
            op = s.client(s.key("hooks-r", "op", role="operator"))
            sub = op.events.create_subscription("environment", url=hook.url,
                                                event_types=["environment.halted"]).data
            op.environment.halt(reason="retry me")
            delivered = hook.wait(1)
            time.sleep(1.5)
            assert len(hook.requests) == 4, hook.requests
            ids = event_ids(hook.requests)
            assert len(set(ids)) == 1, ids
            assert event_ids(hook.delivered()) == ids[:1]
            assert len(delivered) == 1
            state = op.events.list_subscriptions("environment").data[0]
            assert state["id"] == sub["id"] and state["attempts"] == 0
            assert state["lastEventId"] == ids[0]
            assert op.dlq.list().data == []
    finally:
        hook.close()


def test_a_receiver_down_past_the_budget_leaves_a_dead_letter(tmp_path: Path) -> None:
    hook = Hook(always_fail=True)
    try:
        with server(tmp_path, RETRY) as s:
            op = s.client(s.key("hooks-d", "op", role="operator"))
            other = s.client(s.key("hooks-d-other", "op", role="operator"))
            sub = op.events.create_subscription("environment", url=hook.url).data
            op.environment.halt(reason="nobody home")
            deadline = time.monotonic() + DEAD_LETTER_WAIT_S
            letters: list[Any] = []
            while time.monotonic() < deadline and not letters:
                letters = op.dlq.list().data
                time.sleep(0.25)
            assert len(letters) == 1, hook.requests
            letter = letters[0]
            assert letter["subscriptionId"] == sub["id"]
            assert letter["attempts"] == ATTEMPTS_MAX == len(hook.requests)
            assert letter["event"]["type"] == "environment.halted"
            assert letter["lastError"] == "HTTP 500"
            assert set(event_ids(hook.requests)) == {letter["eventId"]}
            assert op.dlq.get(letter["id"]).data["id"] == letter["id"]
            # The other environment sees none of it.
            assert other.dlq.list().data == []
            with pytest.raises(AnlyonError) as caught:
                other.dlq.get(letter["id"])
            assert caught.value.status == 404
            # The cursor moved past it: the next event is tried afresh.
            hook.always_fail = False
            op.environment.resume()
            (ok,) = hook.wait(1)
            assert json.loads(ok["body"])["type"] == "environment.resumed"
    finally:
        hook.close()


def test_a_sigkill_after_commit_still_delivers_after_restart(tmp_path: Path, hook: Hook) -> None:
    with server(tmp_path) as s:
        key = s.key("hooks-k", "op", role="operator")
        op = s.client(key)
        op.events.create_subscription("environment", url=hook.url, event_types=["environment.halted"])
        op.environment.halt(reason="then die")
        s.sigkill()
        assert hook.requests == [], "delivered before the kill; the test proves nothing"
        s.start()
        (delivery,) = hook.wait(1)
        assert json.loads(delivery["body"])["data"]["reason"] == "then die"
        time.sleep(1.0)
        assert len(hook.requests) == 1


def test_subscriptions_refuse_as_documented(tmp_path: Path, hook: Hook) -> None:
    with server(tmp_path) as s:
        op = s.client(s.key("hooks-e", "op", role="operator"))
        agent = s.client(s.key("hooks-e", "agent", role="agent"))
        other = s.client(s.key("hooks-e-other", "op", role="operator"))
        bad = anlyon.Client(api_key="sk_not_a_key", base_url=s.url)

        def error(call: Any) -> AnlyonError:
            with pytest.raises(AnlyonError) as caught:
                call()
            return caught.value

        assert error(lambda: bad.events.list_topics()).status == 401
        assert error(lambda: agent.events.create_subscription("effects", url=hook.url)).status == 403
        assert error(lambda: op.events.get_topic("orders")).status == 404
        assert error(lambda: op.events.create_subscription("orders", url=hook.url)).status == 404
        for body, field in [({"url": "not a url"}, "url"), ({"url": "ftp://x"}, "url"),
                            ({"url": hook.url, "event_types": ["approval.requested"]}, "eventTypes"),
                            ({"url": hook.url, "headers": {"Anlyon-Signature": "x"}}, "headers")]:
            e = error(lambda: op.events.create_subscription("effects", **body))
            assert (e.status, e.code, (e.details or {}).get("field")) == (400, "VALIDATION_ERROR", field), body

        sub = op.events.create_subscription("effects", url=hook.url, idempotency_key="sub-1").data
        replay = op.events.create_subscription("effects", url=hook.url, idempotency_key="sub-1").data
        assert replay["id"] == sub["id"] and "secret" in sub and "secret" not in replay
        assert error(lambda: op.events.create_subscription(
            "effects", url=hook.url + "?x", idempotency_key="sub-1")).status == 422

        # Environments are walls: another environment's key finds nothing.
        assert other.events.list_subscriptions("effects").data == []
        assert error(lambda: other.events.update_subscription(sub["id"], enabled=False)).status == 404
        assert error(lambda: other.events.rotate_subscription_secret(sub["id"])).status == 404
        assert error(lambda: other.events.delete_subscription(sub["id"])).status == 404
        assert op.events.delete_subscription(sub["id"]).data["deleted"] is True
        assert error(lambda: op.events.delete_subscription(sub["id"])).status == 404


def test_two_postgresql_replicas_deliver_each_event_once_and_stream_each_others_events(
    tmp_path: Path, hook: Hook
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with fresh_database() as database:
        a = Server(data, tmp_path, database=database, name="replica-a")
        b = Server(data, tmp_path, database=database, name="replica-b")
        a.start()
        b.start()
        try:
            key = a.key("hooks-pg", "op", role="operator")
            on_a, on_b = a.client(key), b.client(key)
            reader = Reader(b.client(key))
            reader.quiet(0.5)
            on_b.events.create_subscription("environment", url=hook.url)
            for n in range(5):
                on_a.environment.halt(reason=f"round {n}")
                on_a.environment.resume()
            streamed = reader.take(10)
            assert [e["type"] for e in streamed] == ["environment.halted", "environment.resumed"] * 5
            delivered = hook.wait(10)
            time.sleep(1.5)
            ids = event_ids(hook.requests)
            # At least once is the promise; with the lease, nothing is delivered twice here.
            assert sorted(ids, key=lambda i: int(i[4:])) == [e["id"] for e in streamed], ids
            assert len(delivered) == 10 == len(hook.requests)
            reader.close()
        finally:
            a.stop()
            b.stop()
