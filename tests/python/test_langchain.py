"""The hosted product's LangChain integration (`anlyon-langchain==0.3.1`, unchanged) against
Steward: `action_tools(client)` turns Steward's actions into LangChain tools, a tool call writes
once at the provider, and `AnlyonTracer` records the chain as a run of nested spans that
`runs.get` returns.
"""

from __future__ import annotations

import secrets as pysecrets

import pytest
from anlyon_langchain import AnlyonTracer, action_tools
from langchain_core.callbacks import CallbackManager
from langchain_core.language_models.fake import FakeListLLM

from conftest import STRIPE_SECRET_NAME, STRIPE_SECRET_VALUE, Steward, create_key


@pytest.fixture(scope="module")
def lc(steward: Steward):
    operator = steward.client(create_key(steward.data_dir, "sdk-langchain", "lc-op", role="operator"))
    agent = steward.client(create_key(steward.data_dir, "sdk-langchain", "lc-agent"))
    operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                         allowed_hosts=[steward.fixture_host])
    operator.actions.create(
        name="lc-refund",
        description="Refund a payment through the fixture",
        adapter={
            "type": "stripe.refund",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": steward.fixture_url},
            "credentialSecret": STRIPE_SECRET_NAME,
        },
    )
    return agent


def test_action_tools_call_steward_and_the_tracer_records_nested_spans(
        steward: Steward, lc) -> None:
    tools = action_tools(lc)
    assert [t.name for t in tools] == ["lc-refund"]
    [tool] = tools
    assert "Refund a payment" in tool.description

    payment = "pi_" + pysecrets.token_hex(8)
    run_name = "lc run " + pysecrets.token_hex(4)
    tracer = AnlyonTracer(lc, run_name=run_name)
    before = steward.fixture_writes()
    # An agent loop as LangChain's own chains run one: a chain whose run manager hands child
    # callbacks to a model call and to a step that calls the tool. (langchain-core 1.x starts a
    # `RunnableSequence` with `serialized=None`, which anlyon-langchain 0.3.1 does not read, so
    # the chains here name themselves.)
    root = CallbackManager.configure(inheritable_callbacks=[tracer]).on_chain_start(
        {"name": "refund agent"}, {"request": "please refund"})
    plan = FakeListLLM(responses=["refund it"]).invoke(
        "please refund", config={"callbacks": root.get_child()})
    step = root.get_child().on_chain_start({"name": "act"}, {"plan": plan})
    result = tool.invoke({"paymentIntent": payment, "amount": 1000},
                         config={"callbacks": step.get_child()})
    step.on_chain_end({"result": result})
    root.on_chain_end({"result": result})
    assert result["status"] == "succeeded", result
    assert steward.fixture_writes() == before + 1, "one tool call, one provider write"
    assert [w for w in steward.fixture_write_list() if payment in str(w)], "the tool's refund"

    [run] = lc.runs.list(search=run_name).data
    assert run["status"] == "succeeded" and run["application"] == "langchain"
    got = lc.runs.get(run["id"]).data
    kinds = sorted(s["type"] for s in got["spans"])
    assert kinds == ["model_call", "tool_call", "workflow_step", "workflow_step"], kinds
    assert all(s["status"] == "succeeded" and s["endedAt"] for s in got["spans"])
    [root] = got["spanTree"]
    assert root["type"] == "workflow_step"
    children = {c["type"]: c for c in root["children"]}
    assert set(children) == {"model_call", "workflow_step"}
    [tool_span] = children["workflow_step"]["children"]
    assert tool_span["type"] == "tool_call" and tool_span["name"] == "lc-refund"
