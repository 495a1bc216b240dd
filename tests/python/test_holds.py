"""Holds seen through the official SDK (anlyon==0.6.0), unchanged: an operator holds one
operation key (over HTTP: the SDK has no holds resource); the SDK's invoke under it comes back
parked with values the SDK knows (`status` running, `stage` ready) and `held`; a retry returns the
same invocation; release runs it once. Provider writes are counted at the fixture.
"""

from __future__ import annotations

import secrets as pysecrets
import time
from typing import Any

import httpx

from conftest import STRIPE_SECRET_NAME, STRIPE_SECRET_VALUE, Steward, create_key

SETTLE_TIMEOUT_S = 10.0


def refund() -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": 1000}


def test_the_sdk_sees_a_held_call_parked_and_release_runs_it_once(steward: Steward) -> None:
    name = "sdk-hold"
    operator_key = create_key(steward.data_dir, name, f"{name}-op", role="operator")
    operator = steward.client(operator_key)
    agent = steward.client(create_key(steward.data_dir, name, f"{name}-agent"))
    operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                         allowed_hosts=[steward.fixture_host])
    operator.actions.create(name="hold-refund", adapter={
        "type": "stripe.refund",
        "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                   "baseUrl": steward.fixture_url},
        "credentialSecret": STRIPE_SECRET_NAME,
    })
    api = httpx.Client(base_url=f"{steward.url}/api/v2",
                       headers={"Authorization": f"Bearer {operator_key}"})
    held = api.post("/holds", json={"operationKey": "sdk-held-1", "reason": "dispute"})
    assert held.status_code == 201, held.text
    hold_id = held.json()["data"]["id"]

    before = steward.fixture_writes()
    body = refund()
    parked = agent.actions.invoke("hold-refund", body, operation_key="sdk-held-1").data
    assert parked["status"] == "running" and parked["stage"] == "ready", parked
    assert parked["held"] == {"holdId": hold_id, "reason": "dispute"}, parked
    again = agent.actions.invoke("hold-refund", body, operation_key="sdk-held-1").data
    assert again["id"] == parked["id"], "a retry of a held key is the same invocation"
    assert agent.actions.invocation(parked["id"]).data["held"]["holdId"] == hold_id
    time.sleep(0.5)
    assert steward.fixture_writes() == before, "nothing is sent while held"

    released = api.post(f"/holds/{hold_id}/release", json={})
    assert released.status_code == 200, released.text
    assert released.json()["data"]["released"] == 1
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline and steward.fixture_writes() < before + 1:
        time.sleep(0.05)
    time.sleep(0.3)
    assert steward.fixture_writes() == before + 1, "exactly once after release"
    done = agent.actions.invocation(parked["id"]).data
    assert done["status"] == "succeeded" and "held" not in done, done
