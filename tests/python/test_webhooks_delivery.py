"""Webhook delivery per subscription (issue #30 item 4), against a real server and real receivers
on 127.0.0.1: a slow receiver holds back only itself, each subscription gets its events in order,
a dead letter is redelivered once through the API and the CLI, and a SIGKILLed server's successor
delivers at once instead of waiting out the killed process's lease.

Deliveries are counted at the receivers by event id, never inferred from HTTP answers.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from conftest import steward_bin
from events_support import Server, server
from recovery_support import fresh_database

# A short retry schedule, so a dead letter is made in well under a second.
SHORT_RETRY = ["--webhook-retry-attempts", "2", "--webhook-retry-first-delay-ms", "100",
               "--webhook-retry-max-delay-ms", "200"]
BURST = 20  # events in a burst: ten halts and ten resumes
SLOW_S = 9.0  # how long the slow receiver takes to answer each POST
WAIT_S = 15.0
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Hook:
    """A receiver that records each POST with its arrival time. It answers after `delay_s`,
    with 500 while `failing`, and holds each request until `release` is set when `hold`."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.failing = False
        self.hold = False
        self.release = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                with hook.lock:
                    held = hook.hold
                    # A held request is never answered (its server is killed meanwhile): 0.
                    status = 0 if held else 500 if hook.failing else 200
                    entry = {"id": json.loads(body)["id"], "at": time.monotonic(),
                             "status": status, "answered": False}
                    hook.requests.append(entry)
                if held:
                    hook.release.wait(60)
                    return
                time.sleep(hook.delay_s)
                try:
                    self.send_response(entry["status"])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    entry["answered"] = True
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivered(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["status"] == 200]

    def wait(self, count: int, timeout: float = WAIT_S) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.delivered()
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise AssertionError(f"{len(self.requests)} requests, {len(self.delivered())} delivered")

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def seq(event_id: str) -> int:
    return int(event_id.removeprefix("evt_"))


def burst(op: Any, pairs: int) -> None:
    for n in range(pairs):
        op.environment.halt(reason=f"burst {n}")
        op.environment.resume()


def post(s: Server, key: str, path: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(s.url + "/api/v2" + path, data=b"{}", method="POST", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with _DIRECT.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def dead_letter(op: Any, after: set[str], timeout: float = WAIT_S) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        letters = [d for d in op.dlq.list().data if d["id"] not in after]
        if letters:
            return letters[0]
        time.sleep(0.05)
    raise AssertionError("no dead letter")


def test_a_slow_receiver_does_not_hold_back_a_healthy_one(tmp_path: Path) -> None:
    slow, healthy = Hook(delay_s=SLOW_S), Hook()
    try:
        with server(tmp_path) as s:
            op = s.client(s.key("hooks-slow", "op", role="operator"))
            op.events.create_subscription("environment", url=slow.url)
            op.events.create_subscription("environment", url=healthy.url)
            time.sleep(0.5)
            started = time.monotonic()
            burst(op, BURST // 2)
            invoked = time.monotonic()
            deadline = invoked + 3.0
            while time.monotonic() < deadline and len(healthy.delivered()) < BURST:
                time.sleep(0.02)
            got = healthy.delivered()
            within = [r for r in got if r["at"] <= invoked + 3.0]
            last = max([r["at"] for r in within], default=invoked + 3.0)
            print(f"healthy receiver: {len(within)} of {BURST} events within 3 s of a burst of "
                  f"{BURST} taking {invoked - started:.2f} s; {len(within)} in "
                  f"{last - started:.2f} s from the burst's start = "
                  f"{len(within) / max(last - started, 1e-3):.1f} deliveries per s")
            assert len(within) >= BURST, (len(within), len(slow.requests))
            assert len(slow.requests) <= 2, "the slow receiver gets one event at a time"
    finally:
        slow.close()
        healthy.close()


def test_each_subscription_gets_its_events_in_order_through_retries(tmp_path: Path) -> None:
    steady, flaky = Hook(delay_s=0.01), Hook()
    flaky.failing = True
    try:
        with server(tmp_path, ["--webhook-retry-first-delay-ms", "100",
                               "--webhook-retry-max-delay-ms", "200"]) as s:
            op = s.client(s.key("hooks-order", "op", role="operator"))
            op.events.create_subscription("environment", url=steady.url)
            op.events.create_subscription("environment", url=flaky.url)
            time.sleep(0.5)
            burst(op, BURST // 2)
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline and len(flaky.requests) < 3:
                time.sleep(0.02)
            assert {r["id"] for r in flaky.requests} == {flaky.requests[0]["id"]}, \
                "a failing event holds its subscription's later ones back"
            flaky.failing = False
            for hook in (steady, flaky):
                ids = [r["id"] for r in hook.wait(BURST)]
                assert ids == sorted(ids, key=seq), ids
                assert len(set(ids)) == BURST, ids
            arrivals = [r["id"] for r in flaky.requests]
            assert arrivals == sorted(arrivals, key=seq), "retries come before later events"
    finally:
        steady.close()
        flaky.close()


def test_a_dead_letter_is_redelivered_once_through_the_api_and_the_cli(tmp_path: Path) -> None:
    hook = Hook()
    hook.failing = True
    try:
        with server(tmp_path, SHORT_RETRY) as s:
            key = s.key("hooks-redeliver", "op", role="operator")
            other_key = s.key("hooks-redeliver-other", "op", role="operator")
            op = s.client(key)
            sub = op.events.create_subscription("environment", url=hook.url,
                                                event_types=["environment.halted"]).data
            op.environment.halt(reason="nobody home")
            first = dead_letter(op, set())
            assert (first["redelivery"], first["attempts"]) == ("dead", 2)
            assert len(hook.requests) == 2 and not hook.delivered()

            # The API: another environment's key finds nothing; the owner's request is durable.
            assert post(s, other_key, f"/dlq/{first['id']}/redeliver")[0] == 404
            assert post(s, key, "/dlq/dlq_none/redeliver")[0] == 404
            hook.failing = False
            status, answer = post(s, key, f"/dlq/{first['id']}/redeliver")
            assert status == 202 and answer["data"]["redelivery"] == "requested", answer
            (delivery,) = hook.wait(1)
            assert delivery["id"] == first["eventId"]
            time.sleep(1.0)
            assert [r["id"] for r in hook.delivered()] == [first["eventId"]], "exactly once"
            letter = op.dlq.get(first["id"]).data
            assert letter["redelivery"] == "redelivered" and letter["redeliveredAt"]

            # The CLI, for every letter of the subscription.
            hook.failing = True
            op.environment.resume()
            op.environment.halt(reason="down again")
            second = dead_letter(op, {first["id"]})
            hook.failing = False
            env = {**os.environ, "STEWARD_SERVER": s.url, "STEWARD_API_KEY": key,
                   "NO_PROXY": "127.0.0.1"}
            listed = subprocess.run([str(steward_bin()), "webhooks", "dlq", "list"], env=env,
                                    capture_output=True, text=True, timeout=30, check=True)
            assert second["id"] in listed.stdout and "dead" in listed.stdout, listed.stdout
            ran = subprocess.run(
                [str(steward_bin()), "webhooks", "dlq", "redeliver", "--subscription", sub["id"]],
                env=env, capture_output=True, text=True, timeout=30, check=True)
            # The first letter was redelivered, not dead: requested again with the second.
            assert second["id"] in ran.stdout, ran.stdout
            hook.wait(3)
            time.sleep(1.0)
            ids = [r["id"] for r in hook.delivered()]
            assert sorted(ids) == sorted([first["eventId"], first["eventId"], second["eventId"]])
            again = subprocess.run([str(steward_bin()), "webhooks", "dlq", "redeliver",
                                    "dlq_none"], env=env, capture_output=True, text=True, timeout=30)
            assert again.returncode == 1 and "NOT_FOUND" in again.stderr, again.stderr
            # A deleted subscription's letters cannot be redelivered, and say why.
            op.events.delete_subscription(sub["id"])
            status, answer = post(s, key, f"/dlq/{second['id']}/redeliver")
            assert (status, answer["error"]["code"]) == (409, "dead_letter_subscription_gone")
    finally:
        hook.close()


def test_a_sigkilled_servers_successor_delivers_without_waiting_out_its_lease(
    tmp_path: Path,
) -> None:
    hook = Hook()
    hook.hold = True
    data = tmp_path / "data"
    data.mkdir()
    s = Server(data, tmp_path)
    s.start()
    try:
        op = s.client(s.key("hooks-restart", "op", role="operator"))
        op.events.create_subscription("environment", url=hook.url,
                                      event_types=["environment.halted"])
        op.environment.halt(reason="in flight when killed")
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not hook.requests:
            time.sleep(0.02)
        assert len(hook.requests) == 1, "the POST is in flight, its lease held"
        s.sigkill()
        hook.hold = False
        restarted = time.monotonic()
        s.start()
        (delivery,) = hook.wait(1, timeout=20.0)
        took = delivery["at"] - restarted
        print(f"delivered {took:.2f} s after the restart began")
        assert took < 5.0, f"waited {took:.1f} s: the killed process's lease was waited out"
        assert delivery["id"] == hook.requests[0]["id"]
        assert len(hook.requests) == 2, "the held POST and its one redelivery"
    finally:
        hook.close()
        s.stop()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_RAW = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def console(s: Server, path: str, *, cookie: str = "", form: dict[str, str] | None = None,
            ) -> tuple[int, dict[str, str], str]:
    """One console request as a same-origin browser form would send it, redirects not followed."""
    headers = {"Cookie": cookie, "Origin": s.url, "Sec-Fetch-Site": "same-origin"}
    data = None if form is None else urllib.parse.urlencode(form).encode()
    request = urllib.request.Request(s.url + path, data=data, headers=headers,
                                     method="GET" if data is None else "POST")
    try:
        with _RAW.open(request, timeout=10) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, \
                response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read().decode()


def test_the_console_redelivers_a_dead_letter_once_behind_its_csrf_check(tmp_path: Path) -> None:
    hook = Hook()
    hook.failing = True
    try:
        with server(tmp_path, SHORT_RETRY) as s:
            key = s.key("hooks-console", "op", role="operator")
            op = s.client(key)
            sub = op.events.create_subscription("environment", url=hook.url,
                                                event_types=["environment.halted"]).data
            op.environment.halt(reason="console drill")
            letter = dead_letter(op, set())
            hook.failing = False

            status, headers, _ = console(s, "/console/login", form={"key": key})
            assert status == 303, status
            cookie = headers["set-cookie"].split(";")[0]
            status, _, page = console(s, "/console/webhooks", cookie=cookie)
            assert status == 200 and letter["id"] in page and sub["id"] in page
            csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
            action = f"/console/dlq/{letter['id']}/redeliver"
            # Without the form's token the guard refuses and the handler never runs.
            assert console(s, action, cookie=cookie, form={"csrf": "forged"})[0] == 403
            time.sleep(0.5)
            assert hook.delivered() == [] and op.dlq.get(letter["id"]).data["redelivery"] == "dead"
            status, headers, _ = console(s, action, cookie=cookie, form={"csrf": csrf})
            assert (status, headers["location"]) == (303, "/console/webhooks?done=letter")
            (delivery,) = hook.wait(1)
            assert delivery["id"] == letter["eventId"]
            time.sleep(1.0)
            assert len(hook.delivered()) == 1, "exactly once"
            _, _, page = console(s, "/console/webhooks?done=letter", cookie=cookie)
            assert "Redelivery requested" in page and "redelivered" in page
    finally:
        hook.close()


def metric(s: Server, token: str, name: str) -> int:
    request = urllib.request.Request(s.url + "/metrics", headers={"Authorization": f"Bearer {token}"})
    with _DIRECT.open(request, timeout=10) as response:
        text = response.read().decode()
    (line,) = [l for l in text.splitlines() if l.startswith(name + " ")]
    return int(line.split()[1])


def test_the_backlog_counts_what_a_failing_receiver_has_not_taken_and_drains(
    tmp_path: Path,
) -> None:
    hook = Hook()
    hook.failing = True
    token = "metrics-token-0123456789"
    with server(tmp_path, ["--metrics-token", token, "--webhook-retry-first-delay-ms", "500",
                           "--webhook-retry-max-delay-ms", "500"]) as s:
        try:
            op = s.client(s.key("hooks-backlog", "op", role="operator"))
            sub = op.events.create_subscription("environment", url=hook.url).data
            time.sleep(0.5)
            burst(op, 5)
            time.sleep(1.0)  # sealed, and the first attempt failed
            (listed,) = op.events.list_subscriptions("environment").data
            assert listed["id"] == sub["id"] and listed["backlog"] >= 10, listed
            assert metric(s, token, "steward_webhook_backlog_events") >= 10
            assert metric(s, token, "steward_webhook_subscriptions_behind") == 1
            hook.failing = False
            hook.wait(10)
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline and metric(s, token, "steward_webhook_backlog_events"):
                time.sleep(0.1)
            assert metric(s, token, "steward_webhook_backlog_events") == 0
            assert metric(s, token, "steward_webhook_subscriptions_behind") == 0
            assert op.events.list_subscriptions("environment").data[0]["backlog"] == 0
        finally:
            hook.close()


def test_a_sigkilled_postgresql_replicas_subscriptions_move_to_a_live_one_at_once(
    tmp_path: Path,
) -> None:
    hook = Hook()
    hook.hold = True
    data = tmp_path / "data"
    data.mkdir()
    with fresh_database() as database:
        a = Server(data, tmp_path, database=database, name="replica-a")
        a.start()
        b: Server | None = None
        try:
            key = a.key("hooks-pg-kill", "op", role="operator")
            on_a = a.client(key)
            on_a.events.create_subscription("environment", url=hook.url,
                                            event_types=["environment.halted"])
            on_a.environment.halt(reason="held by replica a")
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline and not hook.requests:
                time.sleep(0.02)
            assert len(hook.requests) == 1, "replica a holds the lease, its POST in flight"
            b = Server(data, tmp_path, database=database, name="replica-b")
            b.start()
            hook.hold = False
            a.sigkill()
            killed = time.monotonic()
            (delivery,) = hook.wait(1, timeout=20.0)
            took = delivery["at"] - killed
            print(f"replica b delivered {took:.2f} s after replica a was killed")
            assert took < 5.0, f"waited {took:.1f} s for the dead replica's lease"
            assert delivery["id"] == hook.requests[0]["id"]
        finally:
            hook.close()
            a.stop()
            if b is not None:
                b.stop()


def test_a_busy_subscriptions_redelivery_does_not_wait_for_a_quiet_moment(
    tmp_path: Path,
) -> None:
    hook = Hook()
    hook.failing = True
    try:
        with server(tmp_path, SHORT_RETRY) as s:
            key = s.key("hooks-busy", "op", role="operator")
            op = s.client(key)
            op.events.create_subscription("environment", url=hook.url)
            op.environment.halt(reason="down")
            letter = dead_letter(op, set())
            hook.failing = False
            op.environment.resume()
            hook.wait(1)
            stop = threading.Event()

            def keep_busy() -> None:
                busy = s.client(key)
                while not stop.is_set():
                    busy.environment.halt(reason="busy")
                    busy.environment.resume()

            thread = threading.Thread(target=keep_busy, daemon=True)
            thread.start()
            try:
                time.sleep(0.5)
                asked = time.monotonic()
                assert post(s, key, f"/dlq/{letter['id']}/redeliver")[0] == 202
                deadline = asked + 3.0
                while time.monotonic() < deadline and not any(
                        r["id"] == letter["eventId"] for r in hook.delivered()):
                    time.sleep(0.02)
                redelivered = [r for r in hook.delivered() if r["id"] == letter["eventId"]]
                assert len(redelivered) == 1, "redelivered once while events keep coming"
                assert redelivered[0]["at"] - asked < 3.0
            finally:
                stop.set()
                thread.join(timeout=10)
    finally:
        hook.close()
