"""Impact limits narrowed by `resourcePrefix`, through the official SDK.

A refund changes its payment intent (`<provider>/v1/payment_intents/<id>`): a limit whose prefix
names one customer's intents caps only their refunds. Writes are counted at the fixture.
"""

from __future__ import annotations

import secrets as pysecrets

import pytest
from anlyon import AnlyonError

from conftest import Steward
from test_governance import Env


def test_a_prefixed_limit_caps_only_its_resources(steward: Steward) -> None:
    env = Env(steward, "sdk-prefix")
    env.refund_action("prefix-refund")
    prefix = f"{steward.fixture_url}/v1/payment_intents/pi_acme_"
    limit = env.operator.impact_limits.create(
        name="acme refunds", dimension="money", currency="usd", period="total", amount=1000,
        resource_prefix=prefix).data
    assert limit["resourcePrefix"] == prefix
    assert env.operator.impact_limits.get(limit["id"]).data["resourcePrefix"] == prefix

    before = steward.fixture_writes()
    tag = pysecrets.token_hex(4)
    first = env.agent.actions.invoke("prefix-refund", {"paymentIntent": f"pi_acme_{tag}1", "amount": 800}).data
    assert first["status"] == "succeeded", first
    second = env.agent.actions.invoke("prefix-refund", {"paymentIntent": f"pi_acme_{tag}2", "amount": 800}).data
    assert second["status"] == "failed" and second["grade"] == "refused", second
    other = env.agent.actions.invoke("prefix-refund", {"paymentIntent": f"pi_other_{tag}", "amount": 800}).data
    assert other["status"] == "succeeded", "another customer's refund is not counted"
    assert steward.fixture_writes() == before + 2
    usage = env.operator.impact_limits.get(limit["id"]).data
    assert (usage["consumed"], usage["available"]) == (800, 200), usage


@pytest.mark.parametrize("prefix", ["", "a\nb", "x" * 513])
def test_a_bad_prefix_is_refused_naming_the_field(steward: Steward, prefix: str) -> None:
    env = Env(steward, "sdk-prefix-bad")
    with pytest.raises(AnlyonError) as caught:
        env.operator.impact_limits.create(name="bad", dimension="emails", period="day", amount=1,
                                          resource_prefix=prefix)
    assert caught.value.status == 400 and caught.value.details["field"] == "resourcePrefix"
    assert env.operator.impact_limits.list().data == []
