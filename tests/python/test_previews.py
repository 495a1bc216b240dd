"""Execution-bound previews, driven by the official SDK against a real server and the fixture.

A preview reads the payment intent (read-only), renders the exact refund request, and records
both with an expiry; an invoke bound to it must match it exactly. Every assertion about sending
counts the fixture's committed writes, so a preview that wrote, or a stale binding that went
through, fails here.
"""

from __future__ import annotations

import secrets as pysecrets
import time
from typing import Any

import anlyon
import pytest
from anlyon import AnlyonError

from conftest import STRIPE_SECRET_VALUE, Steward


def expect(call: Any, *, status: int, code: str) -> AnlyonError:
    with pytest.raises(AnlyonError) as caught:
        call()
    assert caught.value.status == status, caught.value
    assert caught.value.code == code, caught.value
    return caught.value


def paid_intent(steward: Steward, amount: int = 5000) -> str:
    """A payment intent the fixture knows, with `amount` paid and nothing refunded."""
    pi = "pi_" + pysecrets.token_hex(8)
    steward._fixture("POST", "/_fixture/payment_intents", {"id": pi, "amount": amount, "currency": "usd"})
    return pi


@pytest.fixture(scope="module")
def preview_action(operator: anlyon.Client, steward: Steward, stripe_secret: str) -> str:
    """A refund action of its own, so that a test may give it a new version."""
    name = "refund-previewed"
    operator.actions.create(
        name=name,
        adapter={"type": "stripe.refund",
                 "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                            "baseUrl": steward.fixture_url},
                 "credentialSecret": stripe_secret},
    )
    return name


def test_a_preview_reads_without_writing_and_a_bound_invoke_writes_once(
        steward: Steward, agent: anlyon.Client, preview_action: str) -> None:
    pi = paid_intent(steward)
    refund = {"paymentIntent": pi, "amount": 1200}
    before = steward.fixture_writes()

    preview = agent.actions.preview(preview_action, refund, ttl_seconds=120).data
    assert preview["id"].startswith("prv_") and preview["status"] == "active", preview
    assert steward.fixture_writes() == before, "a preview never writes"
    read = preview["reads"][0]
    assert read["paymentIntent"] == pi and read["amount"] == 5000 and read["amountRefunded"] == 0
    assert {"name": "payment_intent_exists", "holds": True} in preview["preconditions"]
    refundable = next(p for p in preview["preconditions"] if p["name"] == "amount_refundable")
    assert refundable["holds"] is True, refundable
    request = preview["request"]
    assert request["method"] == "POST" and request["url"].endswith("/v1/refunds")
    assert f"payment_intent={pi}" in request["body"] and "amount=1200" in request["body"]
    assert STRIPE_SECRET_VALUE not in str(preview), "the credential is never shown"
    assert preview["guarantees"]["providerIdempotency"] is True
    assert agent.actions.get_preview(preview["id"]).data["request"] == request

    invoked = agent.actions.invoke(preview_action, refund, preview_id=preview["id"]).data
    assert invoked["status"] == "succeeded", invoked
    assert steward.fixture_writes() == before + 1
    effect = agent.actions.effect(invoked["effectId"]).data
    assert effect["previewId"] == preview["id"]
    assert effect["preview"]["id"] == preview["id"] and effect["preview"]["status"] == "used"
    assert agent.actions.get_preview(preview["id"]).data["effectId"] == invoked["effectId"]

    # A preview binds one call: a second invoke naming it is refused and sends nothing.
    used = expect(lambda: agent.actions.invoke(preview_action, refund, preview_id=preview["id"]),
                  status=409, code="preview_already_used")
    assert used.details["effectId"] == invoked["effectId"]
    assert steward.fixture_writes() == before + 1

    # What the provider now holds shows in the next preview.
    again = agent.actions.preview(preview_action, {"paymentIntent": pi, "amount": 4000}).data
    assert again["reads"][0]["amountRefunded"] == 1200
    assert next(p for p in again["preconditions"] if p["name"] == "amount_refundable")["holds"] is False


def test_a_changed_input_is_refused_with_zero_writes(
        steward: Steward, agent: anlyon.Client, preview_action: str) -> None:
    pi = paid_intent(steward)
    preview = agent.actions.preview(preview_action, {"paymentIntent": pi, "amount": 100}).data
    before = steward.fixture_writes()
    err = expect(lambda: agent.actions.invoke(preview_action, {"paymentIntent": pi, "amount": 101},
                                              preview_id=preview["id"]),
                 status=409, code="preview_mismatch")
    assert err.details["field"] == "input"
    assert steward.fixture_writes() == before
    assert agent.actions.get_preview(preview["id"]).data["status"] == "active", "still unbound"


def test_a_new_action_version_is_refused_with_zero_writes(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client, preview_action: str) -> None:
    refund = {"paymentIntent": paid_intent(steward), "amount": 100}
    preview = agent.actions.preview(preview_action, refund).data
    operator.actions.update(preview_action, description="edited after the preview")
    before = steward.fixture_writes()
    err = expect(lambda: agent.actions.invoke(preview_action, refund, preview_id=preview["id"]),
                 status=409, code="preview_action_changed")
    assert err.details["actionVersion"] == preview["actionVersion"] + 1
    assert steward.fixture_writes() == before


def test_an_expired_preview_is_refused_with_zero_writes(
        steward: Steward, agent: anlyon.Client, preview_action: str) -> None:
    refund = {"paymentIntent": paid_intent(steward), "amount": 100}
    preview = agent.actions.preview(preview_action, refund, ttl_seconds=1).data
    time.sleep(1.2)
    assert agent.actions.get_preview(preview["id"]).data["status"] == "expired"
    before = steward.fixture_writes()
    expect(lambda: agent.actions.invoke(preview_action, refund, preview_id=preview["id"]),
           status=409, code="preview_expired")
    assert steward.fixture_writes() == before


def test_a_refreshed_preview_refuses_the_old_binding_and_carries_no_approval(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client, stripe_secret: str) -> None:
    gated = "refund-previewed-gated"
    operator.actions.create(
        name=gated, requires_approval=True,
        adapter={"type": "stripe.refund",
                 "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                            "baseUrl": steward.fixture_url},
                 "credentialSecret": stripe_secret})
    refund = {"paymentIntent": paid_intent(steward), "amount": 300}
    key = "order-" + pysecrets.token_hex(4)
    old = agent.actions.preview(gated, refund).data
    parked = agent.actions.invoke(gated, refund, preview_id=old["id"], operation_key=key).data
    assert parked["status"] == "pending_approval"
    # The same operation under the same preview is the same invocation.
    again = agent.actions.invoke(gated, refund, preview_id=old["id"], operation_key=key).data
    assert again["id"] == parked["id"]

    new = agent.actions.refresh_preview(old["id"], ttl_seconds=60).data
    assert new["id"] != old["id"] and new["refreshes"] == old["id"]
    assert agent.actions.get_preview(old["id"]).data["supersededBy"] == new["id"]
    before = steward.fixture_writes()

    # The parked operation is bound to the old preview: the new one does not take it (or its
    # approval) over.
    err = expect(lambda: agent.actions.invoke(gated, refund, preview_id=new["id"], operation_key=key),
                 status=409, code="preview_mismatch")
    assert err.details["field"] == "operationKey"
    # An unbound refreshed-away preview cannot be used either.
    other = agent.actions.preview(gated, refund).data
    agent.actions.refresh_preview(other["id"])
    gone = expect(lambda: agent.actions.invoke(gated, refund, preview_id=other["id"]),
                  status=409, code="preview_superseded")
    assert gone.details["supersededBy"]
    expect(lambda: agent.actions.refresh_preview(other["id"]), status=409, code="preview_superseded")

    # Bound to the new preview, the invoke is a new invocation that needs its own approval.
    fresh = agent.actions.invoke(gated, refund, preview_id=new["id"]).data
    assert fresh["status"] == "pending_approval" and fresh["approvalId"] != parked["approvalId"]
    assert steward.fixture_writes() == before
    decided = operator.approvals.approve(fresh["approvalId"]).data
    assert decided["invocation"]["status"] == "succeeded"
    assert steward.fixture_writes() == before + 1


def test_previews_are_validated_and_walled_by_environment(
        steward: Steward, agent: anlyon.Client, other_operator: anlyon.Client,
        preview_action: str) -> None:
    refund = {"paymentIntent": paid_intent(steward), "amount": 100}
    for ttl in (0, 3601):
        err = expect(lambda: agent.actions.preview(preview_action, refund, ttl_seconds=ttl),
                     status=400, code="VALIDATION_ERROR")
        assert err.details["field"] == "ttlSeconds"
    err = expect(lambda: agent.actions.preview(preview_action, {"paymentIntent": "pi_1"}),
                 status=400, code="VALIDATION_ERROR")
    assert err.details["field"].startswith("input")
    expect(lambda: agent.actions.preview("no-such-action", refund), status=404, code="NOT_FOUND")
    expect(lambda: agent.actions.get_preview("prv_nothing"), status=404, code="NOT_FOUND")

    preview = agent.actions.preview(preview_action, refund).data
    expect(lambda: other_operator.actions.get_preview(preview["id"]), status=404, code="NOT_FOUND")
    expect(lambda: other_operator.actions.refresh_preview(preview["id"]), status=404, code="NOT_FOUND")
    bad = expect(lambda: agent.actions.invoke(preview_action, refund, preview_id="x"),
                 status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "previewId"
    before = steward.fixture_writes()
    expect(lambda: agent.actions.invoke(preview_action, refund, preview_id="prv_nothing"),
           status=404, code="NOT_FOUND")
    assert steward.fixture_writes() == before
    assert agent.actions.get_preview(preview["id"]).data["status"] == "active"
