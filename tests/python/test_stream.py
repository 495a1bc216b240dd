"""The live event stream (`GET /api/v2/stream`) through the SDK's `client.stream()`.

Events come from the sealed audit log, so their ids are the log's durable sequence: a reconnect
with `Last-Event-ID` (the SDK's `cursor=`) misses nothing and repeats nothing, also across a
SIGKILL of the server. Provider writes are counted at the fixture.
"""

from __future__ import annotations

import contextlib
import json
import secrets as pysecrets
import urllib.parse
from pathlib import Path
from typing import Any

import anlyon
import httpx
import pytest
from anlyon import AnlyonError

from conftest import LOOPBACK, Proc, steward_bin
from events_support import Reader, Server, server

STREAMS_PER_KEY_MAX = 5


def seq(event: dict[str, Any]) -> int:
    assert event["id"].startswith("evt_"), event
    return int(event["id"][4:])


def fixture_writes(url: str) -> int:
    return int(httpx.get(url + "/_fixture/writes", timeout=10).json()["total"])


@pytest.fixture(scope="module")
def fixture_url(tmp_path_factory: pytest.TempPathFactory) -> Any:
    proc = Proc("steward fixture", [str(steward_bin()), "fixture", "--listen", f"{LOOPBACK}:0"],
                tmp_path_factory.mktemp("fixture") / "fixture.log")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_events_of_each_family_arrive_in_order_for_the_keys_environment_only(
    tmp_path: Path, fixture_url: str
) -> None:
    with server(tmp_path) as s:
        op = s.client(s.key("stream-a", "op", role="operator"))
        approver = s.client(s.key("stream-a", "approver", role="operator"))
        other = s.client(s.key("stream-b", "other", role="operator"))
        mine, theirs = Reader(s.client(s.key("stream-a", "reader", role="agent"))), Reader(other)
        # The streams start at the log's head: give them time to connect before anything happens.
        assert mine.quiet(0.5) == [] and theirs.quiet(0) == []

        host = urllib.parse.urlsplit(fixture_url).netloc
        op.secrets.put("STRIPE_KEY", value="sk_test_" + pysecrets.token_hex(8), allowed_hosts=[host])
        op.actions.create(name="refund", adapter={
            "type": "stripe.refund", "credentialSecret": "STRIPE_KEY",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd", "baseUrl": fixture_url}})
        invocation = op.actions.invoke("refund", {"paymentIntent": "pi_stream", "amount": 500},
                                       operation_key="op-stream-1").data
        assert fixture_writes(fixture_url) == 1
        approval = op.approvals.request(title="ship it").data
        approver.approvals.approve(approval["id"])
        op.environment.halt(reason="drill")
        op.environment.resume()

        events = mine.take(6)
        types = [e["type"] for e in events]
        assert types == ["effect.dispatched", "effect.settled", "approval.requested",
                         "approval.decided", "environment.halted", "environment.resumed"], events
        assert [seq(e) for e in events] == sorted({seq(e) for e in events})
        assert events[0]["data"]["effectId"] == invocation["effectId"]
        assert events[3]["data"]["approvalId"] == approval["id"]
        assert events[3]["data"]["status"] == "approved"
        assert events[4]["data"]["reason"] == "drill"
        assert all(e["environmentId"] == events[0]["environmentId"] for e in events)
        assert mine.quiet(0.6) == []
        # Environments are walls: the other environment's stream saw none of it.
        assert theirs.quiet(0) == []
        mine.close()
        theirs.close()


def test_a_resume_after_a_sigkill_misses_nothing_and_repeats_nothing(tmp_path: Path) -> None:
    with server(tmp_path) as s:
        op_key = s.key("stream-r", "op", role="operator")
        reader = Reader(s.client(op_key))
        reader.quiet(0.5)
        op = s.client(op_key)
        op.environment.halt(reason="one")
        op.environment.resume()
        first = reader.take(2)
        reader.close()
        cursor = first[-1]["id"]
        # Committed while nobody listens, then the server dies at once: some of these may not
        # be sealed yet; the restarted server seals them and the resume must deliver them.
        op.environment.halt(reason="two")
        op.environment.resume()
        op.environment.halt(reason="three")
        s.sigkill()
        s.start()
        op = s.client(op_key)
        op.environment.resume()
        resumed = Reader(s.client(op_key), cursor=cursor)
        after = resumed.take(4)
        assert [e["type"] for e in after] == ["environment.halted", "environment.resumed",
                                              "environment.halted", "environment.resumed"], after
        assert [e["data"].get("reason") for e in after[::2]] == ["two", "three"]
        ids = [seq(e) for e in first + after]
        assert ids == sorted(set(ids)), f"repeated or out of order: {ids}"
        assert resumed.quiet(0.6) == []
        resumed.close()


def test_the_stream_refuses_as_documented(tmp_path: Path) -> None:
    with server(tmp_path) as s:
        no_scope = s.client(s.key("stream-e", "approver-only", scopes=["approvals:read"]))
        with pytest.raises(AnlyonError) as caught:
            next(iter(no_scope.stream()))
        assert caught.value.status == 403
        bad = anlyon.Client(api_key="sk_not_a_key", base_url=s.url)
        with pytest.raises(AnlyonError) as caught:
            next(iter(bad.stream()))
        assert caught.value.status == 401

        # The SDK retries 400 and 429 answers quietly, so these are read over plain HTTP.
        key = s.key("stream-e", "op", role="operator")
        auth = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        for junk in ["abc", "evt_", "evt_-1", "evt_99999999"]:
            answer = httpx.get(s.url + "/api/v2/stream", headers={**auth, "Last-Event-ID": junk},
                               timeout=10)
            assert answer.status_code == 400, junk
            error = answer.json()["error"]
            assert error["code"] == "VALIDATION_ERROR" and error["details"]["field"] == "Last-Event-ID"

        with httpx.Client(timeout=10) as http, contextlib.ExitStack() as open_streams:
            opened = [open_streams.enter_context(http.stream("GET", s.url + "/api/v2/stream", headers=auth))
                      for _ in range(STREAMS_PER_KEY_MAX)]
            assert [o.status_code for o in opened] == [200] * STREAMS_PER_KEY_MAX
            extra = http.get(s.url + "/api/v2/stream", headers=auth)
            assert extra.status_code == 429
            assert extra.json()["error"]["code"] == "RATE_LIMIT_EXCEEDED"
            block = next(opened[0].iter_text())
            assert block.startswith("id: evt_") and "\nevent: ready\n" in block, block
            assert json.loads(block.split("data: ", 1)[1])["cursor"].startswith("evt_")
