"""Framework glue against a real Steward: a tool call is a business operation under a key derived
from the application's identifiers, so a retried call observes the first one (one provider write,
counted at the fixture). The decorator, and the LangChain wrapper on langchain-core's tools."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import pytest
from conftest import Steward
from langchain_core.tools import StructuredTool
from pydantic import BaseModel
from steward_recovery import Config, LocalState, Operations, SqliteJournal, operation_tool
from steward_recovery.langchain import action_tools, recoverable_tool


@pytest.fixture
def ops(steward: Steward, tmp_path: Path) -> Operations:
    journal = SqliteJournal(sqlite3.connect(tmp_path / "agent.db"))
    return Operations(steward.client(steward.keys["agent"]), journal,
                      Config(environment="sdk-main"))


def test_a_decorated_tool_called_twice_acts_once(ops: Operations, steward: Steward,
                                                 refund_action: dict) -> None:
    @operation_tool(ops, refund_action["name"], key="refund:{order_id}")
    def refund(order_id: str, payment_intent: str, amount: int) -> dict:
        return {"paymentIntent": payment_intent, "amount": amount}

    order = f"order-{secrets.token_hex(4)}"
    before = steward.fixture_writes()
    first = refund(order, f"pi_{order}", 300)
    assert first["status"] == "succeeded" and first["operationKey"] == f"refund:{order}"
    assert first["state"] == "continued" and first["body"]["status"] == "succeeded"
    again = refund(order_id=order, payment_intent=f"pi_{order}", amount=300)  # the retry
    assert again["operationId"] == first["operationId"]
    assert again["invocationId"] == first["invocationId"]
    assert steward.fixture_writes() == before + 1
    # Another order is another operation.
    other = refund(f"{order}-b", f"pi_{order}_b", 300)
    assert other["operationId"] != first["operationId"]
    assert steward.fixture_writes() == before + 2
    # The same order with another amount is refused locally: the key names the first refund.
    with pytest.raises(Exception, match="different input"):
        refund(order, f"pi_{order}", 999)
    assert steward.fixture_writes() == before + 2


def test_a_tool_call_interrupted_before_its_answer_is_observed_on_retry(
    ops: Operations, steward: Steward, refund_action: dict
) -> None:
    # A first call that died after it was sent: the journal holds it submitted, no answer.
    order = f"order-{secrets.token_hex(4)}"
    op = ops.begin(f"refund:{order}", refund_action["name"],
                   {"paymentIntent": f"pi_{order}", "amount": 400})
    first = ops.calls.invoke(op.action, op.input, op.operation_key, None, op.idempotency_key)
    ops.journal.save(op.evolve(state=LocalState.SUBMITTED, attempt_count=1))
    before = steward.fixture_writes()

    @operation_tool(ops, refund_action["name"], key=lambda order_id, **_: f"refund:{order_id}")
    def refund(order_id: str, payment_intent: str, amount: int) -> dict:
        return {"paymentIntent": payment_intent, "amount": amount}

    retried = refund(order, f"pi_{order}", 400)
    assert retried["invocationId"] == first.id and retried["status"] == "succeeded"
    assert steward.fixture_writes() == before


class RefundArgs(BaseModel):
    orderId: str
    paymentIntent: str
    amount: int


def test_a_langchain_tool_retried_by_the_agent_acts_once(ops: Operations, steward: Steward,
                                                         refund_action: dict) -> None:
    plain = StructuredTool.from_function(
        func=lambda **_: None, name=refund_action["name"], description="Refund a payment",
        args_schema=RefundArgs, infer_schema=False,
    )
    tool = recoverable_tool(plain, ops, key="refund:{orderId}",
                            input=lambda orderId, paymentIntent, amount: {
                                "paymentIntent": paymentIntent, "amount": amount})
    assert tool.name == plain.name and "never acts twice" in tool.description
    order = f"order-{secrets.token_hex(4)}"
    args = {"orderId": order, "paymentIntent": f"pi_{order}", "amount": 250}
    before = steward.fixture_writes()
    first = tool.invoke(args)
    again = tool.invoke(args)
    assert first["status"] == "succeeded" and again["operationId"] == first["operationId"]
    assert steward.fixture_writes() == before + 1


def test_action_tools_come_from_the_servers_action_list(ops: Operations, steward: Steward,
                                                        refund_action: dict) -> None:
    (tool,) = action_tools(ops, {refund_action["name"]: "refund:{paymentIntent}"})
    assert tool.name == refund_action["name"]
    pi = f"pi_{secrets.token_hex(4)}"
    before = steward.fixture_writes()
    for _ in range(2):
        answer = tool.invoke({"paymentIntent": pi, "amount": 150})
        assert answer["status"] == "succeeded", answer
    assert steward.fixture_writes() == before + 1
