"""`resolve_effect`'s `actualImpact` and `partialEffect` settle limit accounting.

An unknown refund holds its whole amount as exposure against a money limit; a person resolving it
by hand says what really happened, and the limit then counts exactly that. Each scenario works
in an environment of its own, so one limit's usage is this test's alone.
"""

from __future__ import annotations

import pytest
from anlyon import AnlyonError

from conftest import Steward
from test_governance import Env, refund


def limit_and_unknown_refund(steward: Steward, env: Env, amount: int) -> tuple[str, str]:
    """A 100.00 usd daily limit on the env's refunds, and a refund of `amount` left unknown."""
    env.refund_action("actual-refund")
    limit = env.operator.impact_limits.create(
        name="daily refunds", dimension="money", currency="usd", period="day", amount=10_000).data
    steward.set_fault("drop_after_commit")
    try:
        inv = env.agent.actions.invoke("actual-refund", refund(amount)).data
    finally:
        steward.clear_faults()
    assert inv["status"] == "unknown", inv
    held = env.operator.impact_limits.get(limit["id"]).data
    assert held["unknownExposure"] == amount and held["consumed"] == 0, held
    return limit["id"], inv["effectId"]


def test_a_success_consumes_the_actual_amount(steward: Steward) -> None:
    env = Env(steward, "sdk-actual-1")
    limit, effect = limit_and_unknown_refund(steward, env, 1000)
    resolved = env.approver.actions.resolve_effect(
        effect, outcome="succeeded", reason="the dashboard shows 5.00 refunded",
        actual_impact=[{"dimension": "money", "currency": "usd", "amount": 500, "bound": "exact"}]).data
    assert resolved["outcome"] == "succeeded"
    assert resolved["reservations"][0]["amount"] == 500
    assert resolved["reservations"][0]["state"] == "consumed"
    usage = env.operator.impact_limits.get(limit).data
    assert (usage["consumed"], usage["unknownExposure"], usage["available"]) == (500, 0, 9_500), usage


def test_a_confirmed_partial_failure_consumes_what_it_changed(steward: Steward) -> None:
    env = Env(steward, "sdk-actual-2")
    limit, effect = limit_and_unknown_refund(steward, env, 1000)
    env.approver.actions.resolve_effect(
        effect, outcome="failed", partial_effect="confirmed", reason="Support confirmed 3.00",
        actual_impact=[{"dimension": "money", "currency": "usd", "amount": 300}])
    usage = env.operator.impact_limits.get(limit).data
    assert (usage["consumed"], usage["unknownExposure"], usage["available"]) == (300, 0, 9_700), usage


def test_a_plain_failure_releases_and_contradictions_are_refused(steward: Steward) -> None:
    env = Env(steward, "sdk-actual-3")
    limit, effect = limit_and_unknown_refund(steward, env, 1000)

    def refused(field: str, **kwargs) -> None:
        with pytest.raises(AnlyonError) as caught:
            env.approver.actions.resolve_effect(effect, reason="x", **kwargs)
        assert caught.value.status == 400 and caught.value.details["field"] == field, caught.value

    money = [{"dimension": "money", "currency": "usd", "amount": 300}]
    refused("actualImpact", outcome="failed", actual_impact=money)
    refused("actualImpact", outcome="failed", partial_effect="confirmed")
    refused("actualImpact[0].currency", outcome="succeeded",
            actual_impact=[{"dimension": "money", "amount": 1}])
    refused("actualImpact[0].amount", outcome="succeeded",
            actual_impact=[{"dimension": "money", "currency": "usd", "amount": -1}])
    refused("actualImpact[1].dimension", outcome="succeeded", actual_impact=money * 2)
    assert env.operator.impact_limits.get(limit).data["unknownExposure"] == 1000, "refusals change nothing"

    env.approver.actions.resolve_effect(effect, outcome="failed", reason="nothing was refunded")
    usage = env.operator.impact_limits.get(limit).data
    assert (usage["consumed"], usage["unknownExposure"], usage["available"]) == (0, 0, 10_000), usage
