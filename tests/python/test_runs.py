"""Runs and spans through the official SDK (anlyon==0.6.0), unchanged, against Steward.

Every `client.runs` method: start, list, get, end, ingest_spans, add_feedback, list_feedback,
export_trace and import_trace, each with its happy path, its documented errors and the
cross-environment 404; the run's timeline (the invocations that name it); and approval policies
matching on the run's user and tags. Provider writes are counted at the fixture.
"""

from __future__ import annotations

import secrets as pysecrets
from collections.abc import Callable
from typing import Any

import anlyon
import pytest
from anlyon import AnlyonError

from conftest import STRIPE_SECRET_NAME, STRIPE_SECRET_VALUE, Steward, create_key


def error_of(call: Callable[[], Any]) -> AnlyonError:
    with pytest.raises(AnlyonError) as caught:
        call()
    return caught.value


def field_of(error: AnlyonError) -> str | None:
    return (error.details or {}).get("field")


def refund(amount: int = 1000) -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": amount}


class Env:
    def __init__(self, steward: Steward, name: str) -> None:
        self.steward = steward
        self.operator = steward.client(create_key(steward.data_dir, name, f"{name}-op", role="operator"))
        self.agent = steward.client(create_key(steward.data_dir, name, f"{name}-agent"))
        self.readonly = steward.client(
            create_key(steward.data_dir, name, f"{name}-ro", scopes=["actions:read"]))
        self.operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                                  allowed_hosts=[steward.fixture_host])

    def refund_action(self, name: str) -> dict[str, Any]:
        adapter = {
            "type": "stripe.refund",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": self.steward.fixture_url},
            "credentialSecret": STRIPE_SECRET_NAME,
        }
        return self.operator.actions.create(name=name, adapter=adapter).data


@pytest.fixture(scope="module")
def env(steward: Steward) -> Env:
    return Env(steward, "sdk-runs")


@pytest.fixture(scope="module")
def other(steward: Steward) -> Env:
    return Env(steward, "sdk-runs-other")


def test_start_get_list_and_end_a_run(env: Env, other: Env) -> None:
    agent = env.agent
    run = agent.runs.start(
        name="support triage", agent_id="triage-bot", agent_version="1.2.0", user_id="alice",
        application="helpdesk", input={"ticket": 42}, tags=["vip", "eu"],
        metadata={"region": "eu-west"},
    ).data
    assert run["id"].startswith("run_") and run["status"] == "running"
    assert run["userId"] == "alice" and run["tags"] == ["vip", "eu"]
    assert run["input"] == {"ticket": 42} and run["endedAt"] is None
    assert len(run["traceId"]) == 32 and int(run["traceId"], 16) >= 0

    got = agent.runs.get(run["id"]).data
    assert got["id"] == run["id"] and got["spans"] == [] and got["spanTree"] == []
    assert got["invocations"] == [] and got["approvals"] == []

    second = agent.runs.start(name="billing check", user_id="bob").data
    listed = [r["id"] for r in agent.runs.list().data]
    assert listed[:2] == [second["id"], run["id"]], "newest first"
    assert [r["id"] for r in agent.runs.list(user_id="alice").data] == [run["id"]]
    assert [r["id"] for r in agent.runs.list(search="TRIAGE").data] == [run["id"]]
    assert [r["id"] for r in agent.runs.list(agent_id="triage-bot").data] == [run["id"]]
    assert [r["id"] for r in agent.runs.list(limit=1).data] == [second["id"]]
    assert [r["id"] for r in agent.runs.list(limit=1, offset=1).data] == [run["id"]]
    assert agent.runs.list(started_before="2000-01-01T00:00:00Z").data == []
    assert len(agent.runs.list(started_after="2000-01-01T00:00:00Z").data) >= 2

    ended = agent.runs.end(run["id"], status="succeeded", output={"answer": "refund"},
                           tokens=321, cost=0.12).data
    assert ended["status"] == "succeeded" and ended["endedAt"] is not None
    assert ended["output"] == {"answer": "refund"} and ended["tokens"] == 321
    assert [r["id"] for r in agent.runs.list(status="succeeded").data] == [run["id"]]

    # A running run may be updated without ending it; an ended run is final.
    updated = agent.runs.end(second["id"], metadata={"step": 2}).data
    assert updated["status"] == "running" and updated["metadata"] == {"step": 2}
    err = error_of(lambda: agent.runs.end(run["id"], status="failed"))
    assert err.status == 409 and err.code == "run_already_ended"
    assert agent.runs.get(run["id"]).data["status"] == "succeeded"

    # Validation names the field; unknown ids and other environments' runs are 404.
    assert field_of(error_of(lambda: agent.runs.start(tags=["ok", ""]))) == "tags[1]"
    assert field_of(error_of(lambda: agent.runs.start(name="x" * 201))) == "name"
    assert field_of(error_of(lambda: agent.runs.end(second["id"], status="done"))) == "status"
    assert field_of(error_of(lambda: agent.runs.end(second["id"], tokens=-1))) == "tokens"
    assert field_of(error_of(lambda: agent.runs.list(status="done"))) == "status"
    assert field_of(error_of(lambda: agent.runs.list(started_after="yesterday"))) == "startedAfter"
    for call in (lambda: agent.runs.get("run_nope"), lambda: agent.runs.get("nope"),
                 lambda: other.agent.runs.get(run["id"]),
                 lambda: other.agent.runs.end(second["id"], status="failed")):
        err = error_of(call)
        assert err.status == 404 and err.code == "NOT_FOUND"
    assert run["id"] not in [r["id"] for r in other.agent.runs.list().data]

    # Scopes: a key without runs:read or runs:write is refused.
    assert error_of(lambda: env.readonly.runs.start(name="x")).status == 403
    assert error_of(lambda: env.readonly.runs.list()).status == 403


def test_start_is_idempotent_under_one_key(env: Env) -> None:
    key = "run-start-" + pysecrets.token_hex(4)
    first = env.agent.runs.start(name="once", idempotency_key=key).data
    again = env.agent.runs.start(name="once", idempotency_key=key).data
    assert again["id"] == first["id"]
    err = error_of(lambda: env.agent.runs.start(name="twice", idempotency_key=key))
    assert err.status == 422 and err.code == "idempotency_key_reused"


def test_spans_nest_and_a_retry_replaces_by_id(env: Env, other: Env) -> None:
    agent = env.agent
    run = agent.runs.start(name="spans").data
    done = agent.runs.ingest_spans(run["id"], [
        {"id": "root", "name": "agent", "type": "workflow_step",
         "startedAt": "2026-01-01T00:00:00Z"},
        {"id": "llm", "parentSpanId": "root", "name": "gpt", "type": "model_call",
         "input": {"prompt": "hi"}, "attributes": {"temperature": 0}},
        {"id": "tool", "parentId": "llm", "name": "refund", "type": "tool_call"},
    ]).data
    assert done == {"runId": run["id"], "created": 3, "replaced": 0}
    again = agent.runs.ingest_spans(run["id"], [
        {"id": "llm", "parentSpanId": "root", "name": "gpt", "type": "model_call",
         "status": "succeeded", "endedAt": "2026-01-01T00:00:02Z", "output": {"text": "ok"},
         "tokens": {"input": 3, "output": 5, "total": 8}, "model": "gpt-x"},
    ]).data
    assert again == {"runId": run["id"], "created": 0, "replaced": 1}

    got = agent.runs.get(run["id"]).data
    spans = {s["id"]: s for s in got["spans"]}
    assert list(spans) == ["root", "llm", "tool"], "ingest order"
    assert spans["llm"]["status"] == "succeeded" and spans["llm"]["output"] == {"text": "ok"}
    assert spans["llm"]["parentSpanId"] == "root" and spans["tool"]["parentSpanId"] == "llm"
    assert spans["root"]["status"] == "running"
    [root] = got["spanTree"]
    assert root["id"] == "root"
    [llm] = root["children"]
    assert llm["id"] == "llm" and [c["id"] for c in llm["children"]] == ["tool"]

    # A span without an id gets one.
    fresh = agent.runs.ingest_spans(run["id"], [{"name": "anonymous"}]).data
    assert fresh["created"] == 1

    bad = [
        ([{"name": "x", "colour": "red"}], "spans[0].colour"),
        ([{"id": "a"}], "spans[0].name"),
        ([{"name": "x", "type": "banana"}], "spans[0].type"),
        ([{"name": "x", "startedAt": "soon"}], "spans[0].startedAt"),
        ([{"name": "x", "attributes": {"big": "y" * 20000}}], "spans[0].attributes"),
        ([{"id": "a", "name": "x"}, {"id": "a", "name": "y"}], "spans[1].id"),
        ([{"id": "bad id!", "name": "x"}], "spans[0].id"),
        ([], "spans"),
        ([{"name": str(i)} for i in range(101)], "spans"),
    ]
    for spans_body, field in bad:
        err = error_of(lambda: agent.runs.ingest_spans(run["id"], spans_body))
        assert err.status == 400 and err.code == "VALIDATION_ERROR", field
        assert field_of(err) == field
    assert len(agent.runs.get(run["id"]).data["spans"]) == 4, "refused batches store nothing"

    for call in (lambda: agent.runs.ingest_spans("run_nope", [{"name": "x"}]),
                 lambda: other.agent.runs.ingest_spans(run["id"], [{"name": "x"}])):
        err = error_of(call)
        assert err.status == 404 and err.code == "NOT_FOUND"


def test_feedback_on_a_run_and_on_a_span(env: Env, other: Env) -> None:
    agent = env.agent
    run = agent.runs.start(name="feedback").data
    agent.runs.ingest_spans(run["id"], [{"id": "answer", "name": "answer"}])
    on_run = agent.runs.add_feedback(run["id"], source="user", rating=1, comment="helpful").data
    assert on_run["id"].startswith("fb_") and on_run["runId"] == run["id"]
    assert on_run["spanId"] is None and on_run["rating"] == 1
    on_span = agent.runs.add_feedback(run["id"], span_id="answer", label="wrong_tool").data
    assert on_span["spanId"] == "answer" and on_span["label"] == "wrong_tool"
    listed = agent.runs.list_feedback(run["id"]).data
    assert [f["id"] for f in listed] == [on_run["id"], on_span["id"]]

    assert field_of(error_of(lambda: agent.runs.add_feedback(run["id"], span_id="nope",
                                                             rating=1))) == "spanId"
    assert field_of(error_of(lambda: agent.runs.add_feedback(run["id"], source="user"))) == "rating"
    for call in (lambda: agent.runs.add_feedback("run_nope", rating=1),
                 lambda: other.agent.runs.add_feedback(run["id"], rating=1),
                 lambda: other.agent.runs.list_feedback(run["id"])):
        err = error_of(call)
        assert err.status == 404 and err.code == "NOT_FOUND"
    assert len(agent.runs.list_feedback(run["id"]).data) == 2


def test_export_is_an_otlp_trace_that_imports_elsewhere(env: Env, other: Env) -> None:
    agent = env.agent
    run = agent.runs.start(name="exported", user_id="carol", tags=["t1"], input={"q": "x"}).data
    agent.runs.ingest_spans(run["id"], [
        {"id": "root", "name": "chain", "type": "workflow_step",
         "startedAt": "2026-01-01T00:00:00Z", "endedAt": "2026-01-01T00:00:03Z"},
        {"id": "llm", "parentSpanId": "root", "name": "llm", "type": "model_call",
         "input": {"prompt": "p"}, "attributes": {"api_key": "sk_live_should_not_leave"}},
    ])
    agent.runs.end(run["id"], status="succeeded", output={"a": 1})
    trace = agent.runs.export_trace(run["id"]).data
    [resource] = trace["resourceSpans"]
    [scope] = resource["scopeSpans"]
    spans = scope["spans"]
    assert {s["traceId"] for s in spans} == {run["traceId"]}
    root = [s for s in spans if "parentSpanId" not in s]
    assert len(root) == 1 and root[0]["name"] == "exported"
    assert "sk_live_should_not_leave" not in str(trace), "credential-named attributes are redacted"

    imported = other.agent.runs.import_trace(trace).data
    assert imported["id"] != run["id"] and imported["traceId"] == run["traceId"]
    assert imported["name"] == "exported" and imported["status"] == "succeeded"
    assert imported["userId"] == "carol" and imported["tags"] == ["t1"]
    assert imported["input"] == {"q": "x"} and imported["output"] == {"a": 1}
    got = other.agent.runs.get(imported["id"]).data
    by_id = {s["id"]: s for s in got["spans"]}
    assert set(by_id) == {"root", "llm"}
    assert by_id["llm"]["parentSpanId"] == "root" and by_id["llm"]["type"] == "model_call"
    assert by_id["llm"]["input"] == {"prompt": "p"}

    err = error_of(lambda: other.agent.runs.import_trace({"resourceSpans": []}))
    assert err.status == 400 and field_of(err) == "resourceSpans"
    broken = {"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "zz", "traceId": "0" * 32}]}]}]}
    assert field_of(error_of(lambda: other.agent.runs.import_trace(broken))) == \
        "resourceSpans[0].scopeSpans[0].spans[0].spanId"
    assert field_of(error_of(lambda: other.agent.runs.import_trace({"spans": []}))) == "spans"
    err = error_of(lambda: other.agent.runs.export_trace(run["id"]))
    assert err.status == 404 and err.code == "NOT_FOUND"


def test_invocations_naming_the_run_join_its_timeline(steward: Steward, env: Env) -> None:
    env.refund_action("runs-refund")
    run = env.agent.runs.start(name="timeline").data
    before = steward.fixture_writes()
    env.agent.runs.ingest_spans(run["id"], [{"id": "tool-step", "name": "refund", "type": "tool_call"}])
    inv = env.agent.actions.invoke("runs-refund", refund(), run_id=run["id"],
                                   parent_span_id="tool-step").data
    assert inv["status"] == "succeeded"
    assert steward.fixture_writes() == before + 1, "one provider write"
    got = env.agent.runs.get(run["id"]).data
    assert [(i["id"], i["parentSpanId"]) for i in got["invocations"]] == [(inv["id"], "tool-step")]

    err = error_of(lambda: env.agent.actions.invoke("runs-refund", refund(), parent_span_id="x"))
    assert err.status == 400 and field_of(err) == "parentSpanId"
    err = error_of(lambda: env.agent.actions.invoke("runs-refund", refund(), run_id=run["id"],
                                                    parent_span_id="bad span"))
    assert err.status == 400 and field_of(err) == "parentSpanId"

    err = error_of(lambda: env.agent.actions.invoke("runs-refund", refund(), run_id="run_missing"))
    assert err.status == 400 and field_of(err) == "runId"
    err = error_of(lambda: env.agent.actions.invoke("runs-refund", refund(), run_id="not-a-run"))
    assert err.status == 400 and field_of(err) == "runId"
    assert steward.fixture_writes() == before + 1, "a refused runId sends nothing"


def test_policies_match_the_runs_user_and_tags(steward: Steward, env: Env, other: Env) -> None:
    env.refund_action("runs-gated")
    by_user = env.operator.approval_policies.create(
        name="alice needs approval", match_kind="action", match_action_name="runs-gated",
        match_user_id="alice", effect="require_approval",
    ).data
    by_tag = env.operator.approval_policies.create(
        name="prod tag needs approval", match_kind="action", match_action_name="runs-gated",
        match_tags=["prod"], effect="require_approval",
    ).data
    try:
        alice = env.agent.runs.start(name="alice", user_id="alice").data
        bob = env.agent.runs.start(name="bob", user_id="bob").data
        prod = env.agent.runs.start(name="prod", user_id="bob", tags=["prod", "x"]).data
        before = steward.fixture_writes()

        parked = env.agent.actions.invoke("runs-gated", refund(), run_id=alice["id"]).data
        assert parked["pendingApproval"] is True and parked["approvalId"]
        assert steward.fixture_writes() == before, "alice's invocation waits for a human"
        timeline = env.agent.runs.get(alice["id"]).data
        assert [a["id"] for a in timeline["approvals"]] == [parked["approvalId"]]
        assert [i["id"] for i in timeline["invocations"]] == [parked["id"]]

        tagged = env.agent.actions.invoke("runs-gated", refund(), run_id=prod["id"]).data
        assert tagged["pendingApproval"] is True
        assert steward.fixture_writes() == before

        ran = env.agent.actions.invoke("runs-gated", refund(), run_id=bob["id"]).data
        assert ran["status"] == "succeeded"
        assert steward.fixture_writes() == before + 1, "bob's run is not matched"
        no_run = env.agent.actions.invoke("runs-gated", refund()).data
        assert no_run["status"] == "succeeded", "without a run there is no user to match"
        assert steward.fixture_writes() == before + 2

        # A run of another environment is no run here.
        foreign = other.agent.runs.start(name="foreign", user_id="alice").data
        err = error_of(lambda: env.agent.actions.invoke("runs-gated", refund(), run_id=foreign["id"]))
        assert err.status == 400 and field_of(err) == "runId"
        assert steward.fixture_writes() == before + 2
    finally:
        env.operator.approval_policies.delete(by_user["id"])
        env.operator.approval_policies.delete(by_tag["id"])
