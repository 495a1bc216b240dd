"""Structured policy `conditions` through the official SDK: saved, shown, evaluated and bounded.

A policy whose `conditions` say "amount at least 500 in usd or eur" parks exactly the invokes that
match and lets the rest run; the fixture's write count shows which ran. Bad trees are refused when
saved with the node named, and nothing is written.
"""

from __future__ import annotations

from typing import Any

import pytest
from anlyon import AnlyonError

from conftest import Steward
from test_governance import Env, refund

BIG_REFUND = {"all": [
    {"field": "input.amount", "op": "gte", "value": 500},
    {"field": "input.currency", "op": "in", "value": ["usd", "eur"]},
]}


@pytest.fixture(scope="module")
def conds(steward: Steward) -> Env:
    return Env(steward, "sdk-conditions")


def test_conditions_park_exactly_the_matching_invokes(steward: Steward, conds: Env) -> None:
    conds.refund_action("cond-refund")
    policy = conds.operator.approval_policies.create(
        name="big refunds", match_kind="action", match_action_name="cond-refund",
        conditions=BIG_REFUND).data
    assert policy["conditions"] == BIG_REFUND
    assert conds.operator.approval_policies.get(policy["id"]).data["conditions"] == BIG_REFUND

    before = steward.fixture_writes()
    big = conds.agent.actions.invoke("cond-refund", {**refund(900), "currency": "usd"}).data
    assert big["status"] == "pending_approval", big
    small = conds.agent.actions.invoke("cond-refund", {**refund(100), "currency": "usd"}).data
    assert small["status"] == "succeeded", small
    other = conds.agent.actions.invoke("cond-refund", {**refund(900), "currency": "gbp"}).data
    assert other["status"] == "succeeded", other
    assert steward.fixture_writes() == before + 2, "only the two unmatched invokes ran"

    evaluated = conds.operator.approval_policies.evaluate(
        kind="action", action_name="cond-refund", payload={"amount": 700, "currency": "eur"}).data
    assert [m["id"] for m in evaluated["matched"]] == [policy["id"]], evaluated
    unmatched = conds.operator.approval_policies.evaluate(
        kind="action", action_name="cond-refund", payload={"amount": 700, "currency": "gbp"}).data
    assert unmatched["matched"] == [], unmatched

    # Cleared with null: the policy then matches every invoke of the action.
    cleared = conds.operator.approval_policies.update(policy["id"], conditions=None).data
    assert cleared["conditions"] is None
    parked = conds.agent.actions.invoke("cond-refund", {**refund(100), "currency": "usd"}).data
    assert parked["status"] == "pending_approval"
    conds.operator.approval_policies.delete(policy["id"])


@pytest.mark.parametrize("tree,field", [
    ({"all": []}, "conditions.all"),
    ({"field": "secret.value", "op": "eq", "value": 1}, "conditions.field"),
    ({"field": "input.amount", "op": "like", "value": 1}, "conditions.op"),
    ({"any": [{"field": "input.a", "op": "gt", "value": "x"}]}, "conditions.any[0].value"),
    ({"not": {"not": {"not": {"not": {"not": {"not": {"not": {"not": {"not": {
        "field": "input.a", "op": "exists"}}}}}}}}}}, "conditions"),
])
def test_bad_conditions_are_refused_naming_the_node(conds: Env, tree: Any, field: str) -> None:
    before = len(conds.operator.approval_policies.list().data)
    with pytest.raises(AnlyonError) as caught:
        conds.operator.approval_policies.create(
            name="bad", match_kind="action", conditions=tree, effect="require_approval")
    assert caught.value.status == 400 and caught.value.code == "VALIDATION_ERROR"
    assert caught.value.details["field"] == field, caught.value.details
    assert len(conds.operator.approval_policies.list().data) == before
