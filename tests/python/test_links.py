"""`dependsOn` and `compensates` on invoke, driven by the official SDK.

A dependency holds only when its effect settled with the outcome asked for: an `unknown` effect
(the fixture committed the refund and dropped the answer) never does, so the dependent invoke is
refused with nothing recorded and nothing sent, and the same invoke proceeds once a reconcile has
settled it. Every assertion about sending counts the fixture's committed writes.
"""

from __future__ import annotations

import secrets as pysecrets
from typing import Any

import anlyon
import pytest
from anlyon import AnlyonError

from conftest import Steward


def refund_input(amount: int = 700) -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": amount}


def expect(call: Any, *, status: int, code: str) -> AnlyonError:
    with pytest.raises(AnlyonError) as caught:
        call()
    assert caught.value.status == status, caught.value
    assert caught.value.code == code, caught.value
    return caught.value


def invocation_total(client: anlyon.Client) -> int:
    return int(client.actions.invocations(limit=1).pagination["total"])


def test_a_dependency_that_holds_lets_the_invoke_run_once(
        steward: Steward, agent: anlyon.Client, refund_action: dict[str, Any]) -> None:
    first = agent.actions.invoke("refund-payment", refund_input()).data
    assert first["status"] == "succeeded"
    before = steward.fixture_writes()

    second = agent.actions.invoke(
        "refund-payment", refund_input(),
        depends_on=[{"effect": first["effectId"], "outcome": "succeeded"}]).data
    assert second["status"] == "succeeded", second
    assert steward.fixture_writes() == before + 1
    effect = agent.actions.effect(second["effectId"]).data
    assert effect["dependsOn"] == [{"effect": first["effectId"], "outcome": "succeeded"}]
    assert effect["compensates"] is None and effect["compensatedBy"] == []


def test_an_unknown_dependency_refuses_until_a_reconcile_settles_it(
        faults: Steward, agent: anlyon.Client, refund_action: dict[str, Any]) -> None:
    steward = faults
    steward.set_fault("drop_after_commit")
    parent = agent.actions.invoke("refund-payment", refund_input()).data
    steward.clear_faults()
    assert parent["status"] == "unknown", parent
    writes, total = steward.fixture_writes(), invocation_total(agent)

    child_input = refund_input(300)
    depends = [{"effect": parent["effectId"], "outcome": "succeeded"}]
    refused = expect(lambda: agent.actions.invoke("refund-payment", child_input, depends_on=depends),
                     status=409, code="dependency_not_satisfied")
    assert refused.details["unmet"] == [{
        "effect": parent["effectId"], "wanted": "succeeded",
        "outcome": "unknown", "stage": "reconciling",
    }], refused.details
    assert steward.fixture_writes() == writes, "a refused dependency sends nothing"
    assert invocation_total(agent) == total, "and records nothing"

    # Asking for the other outcome is refused the same way: unknown holds neither.
    expect(lambda: agent.actions.invoke(
        "refund-payment", child_input,
        depends_on=[{"effect": parent["effectId"], "outcome": "failed"}]),
        status=409, code="dependency_not_satisfied")

    settled = agent.actions.reconcile_effect(parent["effectId"]).data
    assert settled["outcome"] == "succeeded"
    child = agent.actions.invoke("refund-payment", child_input, depends_on=depends).data
    assert child["status"] == "succeeded", child
    assert steward.fixture_writes() == writes + 1, "the same invoke proceeds once, after the reconcile"

    # Now it holds succeeded, so asking for failed is refused with what it holds.
    wrong = expect(lambda: agent.actions.invoke(
        "refund-payment", refund_input(),
        depends_on=[{"effect": parent["effectId"], "outcome": "failed"}]),
        status=409, code="dependency_not_satisfied")
    assert wrong.details["unmet"][0]["outcome"] == "succeeded"
    assert steward.fixture_writes() == writes + 1


def test_dependencies_are_validated_and_walled_by_environment(
        steward: Steward, agent: anlyon.Client, other_operator: anlyon.Client,
        refund_action: dict[str, Any]) -> None:
    mine = agent.actions.invoke("refund-payment", refund_input()).data
    before = steward.fixture_writes()
    cases = [
        ([{"effect": mine["effectId"], "outcome": "unknown"}], "dependsOn[0].outcome"),
        ([{"effect": mine["effectId"], "outcome": "pending"}], "dependsOn[0].outcome"),
        ([{"effect": "not-an-effect", "outcome": "succeeded"}], "dependsOn[0].effect"),
        ([{"effect": mine["effectId"]}], "dependsOn[0].outcome"),
        ([{"effect": mine["effectId"], "outcome": "succeeded"}] * 2, "dependsOn[1].effect"),
    ]
    for depends, field in cases:
        err = expect(lambda: agent.actions.invoke("refund-payment", refund_input(), depends_on=depends),
                     status=400, code="VALIDATION_ERROR")
        assert err.details["field"] == field, (depends, err.details)

    # Another environment's effect is one that does not exist here.
    other_action = other_operator.actions.create(
        name="other-lookup", method="GET", url_template=steward.fixture_url + "/v1/lookup").data
    assert other_action["name"] == "other-lookup"
    err = expect(lambda: other_operator.actions.invoke(
        "other-lookup", {}, depends_on=[{"effect": mine["effectId"], "outcome": "succeeded"}]),
        status=400, code="VALIDATION_ERROR")
    assert err.details["field"] == "dependsOn[0].effect"
    assert steward.fixture_writes() == before


def test_a_compensation_links_both_ways_and_needs_a_settled_effect(
        faults: Steward, agent: anlyon.Client, other_operator: anlyon.Client,
        refund_action: dict[str, Any]) -> None:
    steward = faults
    original = agent.actions.invoke("refund-payment", refund_input(1500)).data
    assert original["status"] == "succeeded"
    before = steward.fixture_writes()

    undo = agent.actions.invoke("refund-payment", refund_input(1500),
                                compensates=original["effectId"]).data
    assert undo["status"] == "succeeded"
    assert steward.fixture_writes() == before + 1
    assert agent.actions.effect(undo["effectId"]).data["compensates"] == original["effectId"]
    assert agent.actions.effect(original["effectId"]).data["compensatedBy"] == [undo["effectId"]]

    # An unknown effect cannot be compensated: what it did is not known yet.
    steward.set_fault("drop_after_commit")
    unsure = agent.actions.invoke("refund-payment", refund_input()).data
    steward.clear_faults()
    writes, total = steward.fixture_writes(), invocation_total(agent)
    refused = expect(lambda: agent.actions.invoke("refund-payment", refund_input(),
                                                  compensates=unsure["effectId"]),
                     status=409, code="compensation_target_not_settled")
    assert refused.details["effect"] == unsure["effectId"]
    assert steward.fixture_writes() == writes and invocation_total(agent) == total

    bad = expect(lambda: agent.actions.invoke("refund-payment", refund_input(), compensates="x"),
                 status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "compensates"
    # Another environment cannot name this one's effects.
    other_operator.actions.create(
        name="other-undo", method="GET", url_template=steward.fixture_url + "/v1/lookup")
    hidden = expect(lambda: other_operator.actions.invoke(
        "other-undo", {}, compensates=original["effectId"]), status=400, code="VALIDATION_ERROR")
    assert hidden.details["field"] == "compensates"
    assert agent.actions.effect(original["effectId"]).data["compensatedBy"] == [undo["effectId"]]
