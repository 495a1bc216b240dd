"""Per-key budgets through the official SDK (`budgets.list|get|put|delete`), and their
enforcement at admission: 100 concurrent invokes by a key capped at 10 let exactly 10 through,
counted as refunds the fixture committed, on the embedded store and on PostgreSQL; unknown
exposure that alone blocks the decision is BUDGET_RECONCILIATION_REQUIRED until reconciled."""

from __future__ import annotations

import asyncio
import secrets as pysecrets
from collections.abc import Iterator
from typing import Any

import anlyon
import pytest
from anlyon.config import RetryConfig
from anlyon.errors import AnlyonError, FeatureNotAvailableError
from conftest import Steward, create_key, running_steward
from recovery_support import fresh_database

CAP = 10
CONCURRENT_INVOKES = 100
NO_RETRY = RetryConfig(max_attempts=1)


def expect(call: Any, *, status: int, code: str) -> AnlyonError:
    with pytest.raises(AnlyonError) as caught:
        call()
    assert caught.value.status == status, caught.value
    assert caught.value.code == code, caught.value
    return caught.value


def refund(amount: int = 100) -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": amount}


def new_agent(steward: Steward, name: str, database: str | None = None) -> tuple[anlyon.Client, str]:
    """A fresh agent key (its own budget) and its id."""
    key = create_key(steward.data_dir, "sdk-main", name, database=database)
    client = steward.client(key, retry=NO_RETRY)
    return client, client.auth.identity().data["apiKeyId"]


def refund_action_on(steward: Steward, operator: anlyon.Client, name: str) -> None:
    secret = f"BUDGET_{pysecrets.token_hex(4).upper()}"
    operator.secrets.put(secret, value="sk_test_budget", allowed_hosts=[steward.fixture_host])
    operator.actions.create(
        name=name,
        adapter={"type": "stripe.refund",
                 "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                            "baseUrl": steward.fixture_url},
                 "credentialSecret": secret},
    )


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[tuple[Steward, str | None]]:
    """A server of its own on each store (the concurrency rule lives in each backend's SQL)."""
    if request.param == "sqlite":
        with running_steward(["--reconcile-interval-ms", "0"]) as steward:
            yield steward, None
    else:
        with fresh_database() as url, running_steward(["--reconcile-interval-ms", "0"],
                                                      database=url) as steward:
            yield steward, url


def test_100_concurrent_invokes_against_a_cap_of_10_let_exactly_10_through(
        backend: tuple[Steward, str | None]) -> None:
    steward, database = backend
    operator = steward.client(steward.keys["operator"])
    refund_action_on(steward, operator, "budget-refund")
    key = create_key(steward.data_dir, "sdk-main", "budget-agent", database=database)
    key_id = steward.client(key).auth.identity().data["apiKeyId"]
    put = operator.budgets.put(key_id, dimension_caps={"invocations": CAP}).data
    assert put["dimensionCaps"] == {"invocations": CAP}
    before = steward.fixture_writes()

    async def run() -> list[Any]:
        async with anlyon.AsyncClient(api_key=key, base_url=steward.url, retry=NO_RETRY) as agent:
            calls = [agent.actions.invoke("budget-refund", refund())
                     for _ in range(CONCURRENT_INVOKES)]
            return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(run())
    through = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(e, AnlyonError) and e.status == 429 and e.code == "BUDGET_EXCEEDED"
               for e in refused), [repr(e) for e in refused if getattr(e, "code", None) != "BUDGET_EXCEEDED"][:3]
    assert len(through) == CAP, f"{len(through)} admitted under a cap of {CAP}"
    assert all(r.data["status"] == "succeeded" for r in through)
    assert steward.fixture_writes() == before + CAP, "exactly the admitted invokes reached the provider"
    assert refused[0].details["cap"] == CAP

    view = operator.budgets.get(key_id).data
    usage = view["usage"]["invocations"]
    assert (usage["consumed"], usage["reserved"], usage["unknownExposure"]) == (CAP, 0, 0)
    assert usage["available"] == 0
    assert view["alerting"] is True and view["reconciliationRequired"] is False


def test_budgets_are_read_put_and_deleted_by_an_operator_only(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client,
        other_operator: anlyon.Client, refund_action: dict[str, Any]) -> None:
    client, key_id = new_agent(steward, "budget-crud")
    expect(lambda: operator.budgets.get(key_id), status=404, code="NOT_FOUND")
    created = operator.budgets.put(key_id, dimension_caps={"invocations": 1}).data
    assert created["apiKeyId"] == key_id
    assert created["enabled"] is True and created["alertThreshold"] == 0.8
    assert created["monthlyCostCentsCap"] is None and created["estimatedCostCents"] == 0
    assert created["period"] == "month"
    # A put changes only what it names.
    changed = operator.budgets.put(key_id, alert_threshold=0.5).data
    assert changed["dimensionCaps"] == {"invocations": 1} and changed["alertThreshold"] == 0.5
    assert key_id in [b["apiKeyId"] for b in operator.budgets.list().data]
    # The agent reads budgets (impact-limits:read) but cannot change one, not even its own.
    assert agent.budgets.get(key_id).data["apiKeyId"] == key_id
    expect(lambda: agent.budgets.put(key_id, dimension_caps={"invocations": 99}),
           status=403, code="FORBIDDEN")
    expect(lambda: agent.budgets.delete(key_id), status=403, code="FORBIDDEN")
    # Validation names the field.
    bad = expect(lambda: operator.budgets.put(key_id, dimension_caps={"tokens": 5}),
                 status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "dimensionCaps.tokens"
    bad = expect(lambda: operator.budgets.put(key_id, alert_threshold=1.5),
                 status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "alertThreshold"
    bad = expect(lambda: operator.budgets.put(key_id, monthly_cost_cents_cap=-1),
                 status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "monthlyCostCentsCap"
    # Another environment's operator sees no such key.
    expect(lambda: other_operator.budgets.get(key_id), status=404, code="NOT_FOUND")
    expect(lambda: other_operator.budgets.put(key_id, dimension_caps={"invocations": 5}),
           status=404, code="NOT_FOUND")
    expect(lambda: other_operator.budgets.delete(key_id), status=404, code="NOT_FOUND")
    assert key_id not in [b["apiKeyId"] for b in other_operator.budgets.list().data]

    # Enforced: one invocation, then BUDGET_EXCEEDED with nothing recorded or sent.
    before = steward.fixture_writes()
    assert client.actions.invoke("refund-payment", refund()).data["status"] == "succeeded"
    err = expect(lambda: client.actions.invoke("refund-payment", refund()),
                 status=429, code="BUDGET_EXCEEDED")
    assert err.details == {"dimension": "invocations", "cap": 1, "used": 1}
    assert steward.fixture_writes() == before + 1
    # Resending an operation already recorded is not a new invocation: it is answered.
    payload = refund()
    operator.budgets.put(key_id, dimension_caps={"invocations": 2})
    first = client.actions.invoke("refund-payment", payload, operation_key="budget-op-1").data
    again = client.actions.invoke("refund-payment", payload, operation_key="budget-op-1").data
    assert again["id"] == first["id"]
    # Disabled or deleted, it refuses nothing.
    operator.budgets.put(key_id, enabled=False)
    assert client.actions.invoke("refund-payment", refund()).data["status"] == "succeeded"
    operator.budgets.put(key_id, enabled=True)
    expect(lambda: client.actions.invoke("refund-payment", refund()),
           status=429, code="BUDGET_EXCEEDED")
    deleted = operator.budgets.delete(key_id).data
    assert deleted == {"apiKeyId": key_id, "deleted": True}
    expect(lambda: operator.budgets.get(key_id), status=404, code="NOT_FOUND")
    expect(lambda: operator.budgets.delete(key_id), status=404, code="NOT_FOUND")
    assert client.actions.invoke("refund-payment", refund()).data["status"] == "succeeded"
    assert steward.fixture_writes() == before + 4
    # Budget rows are not impact limits.
    assert all(not l["name"].startswith("budget:") for l in operator.impact_limits.list().data)


def test_a_cost_cap_is_refused_at_save_naming_the_field_and_never_reported(
        backend: tuple[Steward, str | None]) -> None:
    """Nothing prices a call, so a cost cap could never refuse: a put naming one is refused
    (and saves nothing), on both stores; `null` is accepted and the answer never claims a cap."""
    steward, database = backend
    operator = steward.client(steward.keys["operator"], retry=NO_RETRY)
    _, key_id = new_agent(steward, "budget-cost-cap", database)
    for cap in (500, 0):
        bad = expect(lambda: operator.budgets.put(key_id, monthly_cost_cents_cap=cap,
                                                  dimension_caps={"invocations": 3}),
                     status=400, code="VALIDATION_ERROR")
        assert bad.details["field"] == "monthlyCostCentsCap", bad
        assert "prices no call" in str(bad), bad
    # The refused put saved nothing, not even its other fields.
    expect(lambda: operator.budgets.get(key_id), status=404, code="NOT_FOUND")
    saved = operator.budgets.put(key_id, monthly_cost_cents_cap=None,
                                 dimension_caps={"invocations": 3}).data
    assert saved["monthlyCostCentsCap"] is None and saved["dimensionCaps"] == {"invocations": 3}
    bad = expect(lambda: operator.budgets.put(key_id, monthly_cost_cents_cap=1),
                 status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "monthlyCostCentsCap"
    for view in (operator.budgets.get(key_id).data,
                 next(b for b in operator.budgets.list().data if b["apiKeyId"] == key_id)):
        assert view["monthlyCostCentsCap"] is None and view["dimensionCaps"] == {"invocations": 3}


def test_unknown_exposure_that_alone_blocks_admission_requires_reconciliation(
        faults: Steward, operator: anlyon.Client, refund_action: dict[str, Any]) -> None:
    client, key_id = new_agent(faults, "budget-exposure")
    operator.budgets.put(key_id, dimension_caps={"invocations": 2})
    before = faults.fixture_writes()
    faults.set_fault("drop_after_commit")
    unknown = client.actions.invoke("refund-payment", refund()).data
    assert unknown["status"] == "unknown"
    faults.clear_faults()
    assert client.actions.invoke("refund-payment", refund()).data["status"] == "succeeded"
    view = operator.budgets.get(key_id).data
    assert view["reconciliationRequired"] is True
    assert view["usage"]["invocations"]["unknownExposure"] == 1
    err = expect(lambda: client.actions.invoke("refund-payment", refund()),
                 status=503, code="BUDGET_RECONCILIATION_REQUIRED")
    assert err.details["unknownExposure"] == 1
    assert faults.fixture_writes() == before + 2, "the refused invoke sent nothing"
    # A human settles the unknown effect (it did happen): the exposure becomes consumption,
    # and the cap is now simply full.
    operator.actions.resolve_effect(unknown["effectId"], outcome="succeeded",
                                    reason="the provider shows the refund")
    view = operator.budgets.get(key_id).data
    assert view["reconciliationRequired"] is False
    assert view["usage"]["invocations"]["consumed"] == 2
    expect(lambda: client.actions.invoke("refund-payment", refund()),
           status=429, code="BUDGET_EXCEEDED")


def test_billing_reads_answer_from_the_keys_budget_and_the_rest_is_not_offered(
        steward: Steward, operator: anlyon.Client, refund_action: dict[str, Any]) -> None:
    client, key_id = new_agent(steward, "budget-billing")
    quota = client.billing.quota().data
    assert (quota["apiKeyId"], quota["budgeted"], quota["cap"], quota["used"]) == (key_id, False, None, 0)
    assert client.billing.current_usage().data["usage"] == {"invocations": 0}
    operator.budgets.put(key_id, dimension_caps={"invocations": 3})
    assert client.actions.invoke("refund-payment", refund()).data["status"] == "succeeded"
    quota = client.billing.quota().data
    assert (quota["budgeted"], quota["cap"], quota["used"], quota["remaining"]) == (True, 3, 1, 2)
    assert quota["periodStart"] < quota["periodEnd"]
    usage = client.billing.current_usage().data
    assert usage["usage"] == {"invocations": 1} and usage["estimatedCostCents"] == 0
    workspace = client.billing.workspace_budget().data
    assert workspace["enabled"] is False and workspace["monthlyTargetCents"] is None
    for call in (client.billing.current_plan, client.billing.plans, client.billing.cost_estimate,
                 client.billing.stripe_config, lambda: client.billing.usage_history(days=7),
                 lambda: client.billing.invoices(limit=5)):
        with pytest.raises(FeatureNotAvailableError) as caught:
            call()
        assert caught.value.status == 402 and caught.value.code == "FEATURE_NOT_AVAILABLE"
