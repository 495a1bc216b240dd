"""MCP calls across failures, with the official `mcp` client against a server whose background
reconciler is on and whose provider deadline is short: an unknown outcome settled by the
reconciler, an approval that expires, a client that disconnects mid-call, and MCP host processes
SIGKILLed around the call and restarted with their persisted operation key. Provider writes are
counted at the fixture.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    REPO,
    STRIPE_SECRET_NAME,
    STRIPE_SECRET_VALUE,
    _DIRECT,
    Steward,
    child_env,
    create_key,
    running_steward,
    steward_bin,
)
from test_mcp import call, refund
from test_mcp_tasks import call_tool, task_request

# The provider deadline, and fixture holds on either side of it (milliseconds).
DISPATCH_TIMEOUT_MS = 2000
HOLD_PAST_DEADLINE_MS = 4000
HOLD_WITHIN_DEADLINE_MS = 1000
# Bounds on waiting for something the server does in the background; nothing is timed.
SETTLE_WAIT_S = 45.0
POLL_S = 0.25
WORKER_TIMEOUT_S = 60.0
CRASH_ITERATIONS = 2


class Recovery:
    def __init__(self, steward: Steward) -> None:
        self.steward = steward
        d = steward.data_dir
        self.operator_key = create_key(d, "mcp-rec", "rec-op", role="operator")
        self.agent_key = create_key(d, "mcp-rec", "rec-agent")
        self.operator = steward.client(self.operator_key)
        self.operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                                  allowed_hosts=[steward.fixture_host])
        adapter = {
            "type": "stripe.refund",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": steward.fixture_url},
            "credentialSecret": STRIPE_SECRET_NAME,
        }
        self.operator.actions.create(name="rec-refund", adapter=dict(adapter))
        # Raw HTTP: the SDK has no parameter for the approval expiry.
        created = self.api("POST", "/actions", {
            "name": "rec-expiring-refund", "adapter": dict(adapter), "requiresApproval": True,
            "approvalExpiresInSeconds": 1})
        assert created["data"]["approvalExpiresInSeconds"] == 1, created

    def api(self, method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            self.steward.url + "/api/v2" + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.operator_key}",
                     "Content-Type": "application/json"})
        with _DIRECT.open(request, timeout=30) as response:
            return json.loads(response.read())


@pytest.fixture(scope="module")
def recovery() -> Iterator[Recovery]:
    with running_steward(["--dispatch-timeout-ms", str(DISPATCH_TIMEOUT_MS),
                          "--reconcile-interval-ms", "200"]) as steward:
        yield Recovery(steward)


def wait_for(probe: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + SETTLE_WAIT_S
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(POLL_S)
    raise AssertionError(f"not within {SETTLE_WAIT_S} s: {what}")


def args(key: str | None = None) -> dict[str, Any]:
    return {**refund(), "operationKey": key or f"rec-{uuid.uuid4()}"}


def test_mcp_unknown_is_never_resent_and_the_background_reconciler_settles_it(
        recovery: Recovery) -> None:
    steward, a = recovery.steward, args()
    before = steward.fixture_writes()
    steward.set_fault("hold_after_commit", ms=HOLD_PAST_DEADLINE_MS)
    try:
        is_error, unknown = call(steward, recovery.agent_key, "http", "rec-refund", a)
    finally:
        steward.clear_faults()
    assert is_error and unknown["status"] == "unknown", unknown
    assert unknown["instruction"].startswith("do not retry"), unknown
    # The reconciler runs every 200 ms, so by now it may already have settled the effect: it
    # is either still in the unknown queue, or settled by a reconcile (not by an answer).
    # The list is read first: an effect missing from it was settled before, as the detail read
    # after it then shows.
    unresolved = [e["id"] for e in
                  recovery.api("GET", "/actions/effects?unresolved=true")["data"]]
    effect = recovery.api("GET", f"/actions/effects/{unknown['effectId']}")["data"]
    reconciled = [e for e in effect["evidence"] if e["kind"] == "reconcile"]
    assert effect["attemptCount"] == 1, effect
    assert unknown["effectId"] in unresolved or (
        effect["outcome"] == "succeeded" and reconciled), (effect, unresolved)
    # Re-calls while it is unresolved observe it; none re-sends.
    for transport in ("stdio", "http"):
        _, again = call(steward, recovery.agent_key, transport, "rec-refund", a)
        assert again["effectId"] == unknown["effectId"]
        assert again["status"] in ("unknown", "succeeded"), again
    settled = wait_for(
        lambda: (r := call(steward, recovery.agent_key, "http", "rec-refund", a)[1])["status"]
        == "succeeded" and r,
        "the reconciler settles the unknown effect")
    assert settled["effectId"] == unknown["effectId"]
    assert steward.fixture_writes() == before + 1, "held once, committed once, never resent"


def test_mcp_an_unknown_task_is_completed_with_is_error_and_reads_settled_once_reconciled(
        recovery: Recovery) -> None:
    """The tasks extension (test_mcp_tasks.py) on a call whose outcome is unknown: the task is
    `completed` at once (status message `unknown`), its result is the call's (`isError`,
    `status: unknown`) until the reconciler settles it, and the same task then reads the settled
    result; nothing is resent."""
    steward, a = recovery.steward, args()
    before = steward.fixture_writes()
    steward.set_fault("hold_after_commit", ms=HOLD_PAST_DEADLINE_MS)
    try:
        created = call_tool(steward, recovery.agent_key, "rec-refund", a)["result"]
    finally:
        steward.clear_faults()
    assert created["resultType"] == "task", created
    assert (created["status"], created["statusMessage"]) == ("completed", "unknown"), created
    landed = steward.fixture_writes() > before
    polled = task_request(steward, recovery.agent_key, "tasks/get", created["taskId"])["result"]
    envelope = polled["result"]["structuredContent"]
    assert polled["status"] == "completed", polled
    # The reconciler runs every 200 ms: once the held write landed it may already have settled
    # it (see the test above); before, nothing can have.
    assert envelope["status"] in (("unknown", "succeeded") if landed else ("unknown",)), polled
    if envelope["status"] == "unknown":
        assert polled["statusMessage"] == "unknown" and polled["result"]["isError"] is True
        assert envelope["instruction"].startswith("do not retry"), envelope
    settled = wait_for(
        lambda: (r := task_request(steward, recovery.agent_key, "tasks/get", created["taskId"])[
            "result"])["result"]["structuredContent"]["status"] == "succeeded" and r,
        "the reconciler settles the task's invocation")
    assert settled["status"] == "completed" and settled["result"]["isError"] is False, settled
    assert steward.fixture_writes() == before + 1, "held once, committed once, never resent"


def test_mcp_an_approval_that_expires_is_expired_and_never_runs(recovery: Recovery) -> None:
    steward, a = recovery.steward, args()
    before = steward.fixture_writes()
    is_error, parked = call(steward, recovery.agent_key, "http", "rec-expiring-refund", a)
    assert not is_error and parked["status"] == "pending_approval", parked
    expired = wait_for(
        lambda: (r := call(steward, recovery.agent_key, "stdio", "rec-expiring-refund", a)[1])[
            "status"] == "expired" and r,
        "the approval expires")
    assert expired["approvalId"] == parked["approvalId"]
    assert expired["invocationId"] == parked["invocationId"]
    assert "use a new operationKey" in expired["instruction"]
    is_error, again = call(steward, recovery.agent_key, "http", "rec-expiring-refund", a)
    assert is_error and again["status"] == "expired"
    assert steward.fixture_writes() == before


def test_mcp_a_client_that_disconnects_mid_call_leaves_one_write_and_the_recall_returns_it(
        recovery: Recovery) -> None:
    steward, a = recovery.steward, args()
    before = steward.fixture_writes()
    steward.set_fault("hold_after_commit", ms=HOLD_WITHIN_DEADLINE_MS)
    try:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "rec-refund", "arguments": a}}).encode()
        request = urllib.request.Request(steward.url + "/mcp", data=body, method="POST", headers={
            "Authorization": f"Bearer {recovery.agent_key}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        # The client gives up while the provider holds the committed write, and hangs up.
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            _DIRECT.open(request, timeout=0.3).read()
        wait_for(lambda: steward.fixture_writes() == before + 1, "the held write commits")
    finally:
        steward.clear_faults()
    done = wait_for(
        lambda: (r := call(steward, recovery.agent_key, "http", "rec-refund", a)[1])["status"]
        == "succeeded" and r,
        "the call that lost its client still settles")
    assert done["operationKey"] == a["operationKey"]
    assert steward.fixture_writes() == before + 1


def run_worker(recovery: Recovery, state: Path, kill_after: str | None, pause_s: float = 0.0,
               kill_delay_s: float = 0.0) -> str | None:
    """Runs the MCP host stand-in; SIGKILLs its whole process group (host and `steward mcp`)
    `kill_delay_s` after it prints `kill_after`. Returns the status it saved, if it got there."""
    env = {**child_env(), "STEWARD_BIN": str(steward_bin()),
           "STEWARD_API_KEY": recovery.agent_key, "MCP_WORKER_PAUSE_S": str(pause_s)}
    worker = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "python" / "mcp_worker.py"), str(state),
         recovery.steward.url, "rec-refund"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        assert worker.stdout is not None
        for line in worker.stdout:
            if kill_after and line.startswith(kill_after):
                time.sleep(kill_delay_s)
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=WORKER_TIMEOUT_S)
                return None
            assert time.monotonic() < deadline, "worker took too long"
        assert worker.wait(timeout=WORKER_TIMEOUT_S) == 0, "worker failed"
        return json.loads(state.read_text())["result"]["status"]
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=WORKER_TIMEOUT_S)


# (line after which to kill, pause after the answer, delay before the kill, fixture hold ms)
CRASH_POINTS = {
    "before_call": ("persisted", 0.0, 0.0, 0),
    "during_call": ("calling", 0.0, 0.5, HOLD_WITHIN_DEADLINE_MS),
    "after_answer": ("answered", 2.0, 0.0, 0),
}


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_mcp_host_killed_around_the_call_and_restarted_writes_exactly_once(
        recovery: Recovery, point: str) -> None:
    kill_after, pause_s, kill_delay_s, hold_ms = CRASH_POINTS[point]
    steward = recovery.steward
    for _ in range(CRASH_ITERATIONS):
        before = steward.fixture_writes()
        with tempfile.TemporaryDirectory(prefix="mcp-worker-") as tmp:
            state = Path(tmp) / "operation.json"
            if hold_ms:
                steward.set_fault("hold_after_commit", ms=hold_ms)
            try:
                assert run_worker(recovery, state, kill_after, pause_s, kill_delay_s) is None
            finally:
                steward.clear_faults()
            persisted = json.loads(state.read_text())
            assert "result" not in persisted, "killed before the local save"
            # The restarted host resumes the same operation with its persisted key.
            status = wait_for(lambda: (s := run_worker(recovery, state, None)) in (
                "succeeded", "failed", "denied") and s, "the restarted worker settles")
            assert status == "succeeded"
            assert json.loads(state.read_text())["operationKey"] == persisted["operationKey"]
        wait_for(lambda: steward.fixture_writes() >= before + 1, "the write is committed")
        assert steward.fixture_writes() == before + 1, f"{point}: exactly one provider write"
