"""Defaults that protect (issue #25 item 5), through the official SDK and raw HTTP.

- A governed invoke with neither an operationKey nor an Idempotency-Key is answered with a
  `no_request_key` warning beside `data`, or refused (`operation_key_required`) where the
  environment's `unkeyedInvokes` is `refuse`. The SDK always sends an Idempotency-Key, so its
  invokes are never warned; anlyon 0.6.0 reads `data` and ignores the extra `warnings` key.
- Saving an action whose credential may not reach its URL answers a warning, and the SDK's
  `actions.create` returns the action as usual.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import anlyon

_RAW = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _call(steward: Any, key: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request with no Idempotency-Key (the SDK always sends one)."""
    request = urllib.request.Request(
        f"{steward.url}/api/v2{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with _RAW.open(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_unkeyed_invoke_is_warned_and_refused_where_the_environment_says(
    steward: Any, agent: anlyon.Client, refund_action: dict[str, Any]
) -> None:
    name = refund_action["name"]
    agent_key, operator_key = steward.keys["agent"], steward.keys["operator"]
    writes = steward.fixture_writes()

    status, body = _call(steward, agent_key, "POST", f"/actions/{name}/invoke",
                         {"input": {"paymentIntent": "pi_unkeyed_1", "amount": 101}})
    assert status == 200, body
    assert [w["code"] for w in body["warnings"]] == ["no_request_key"]
    assert body["warnings"][0]["field"] == "operationKey"

    # The SDK sends an Idempotency-Key: no warning, and its answer reads as always.
    answer = agent.actions.invoke(name, {"paymentIntent": "pi_unkeyed_2", "amount": 102},
                                  operation_key="unkeyed-2")
    assert answer["status"] == "succeeded"
    assert "warnings" not in json.loads(steward.last_response().body)
    assert steward.fixture_writes() == writes + 2

    status, body = _call(steward, operator_key, "PATCH", "/environment",
                         {"unkeyedInvokes": "refuse"})
    assert status == 200 and body["data"]["unkeyedInvokes"] == "refuse", body
    try:
        status, body = _call(steward, agent_key, "POST", f"/actions/{name}/invoke",
                             {"input": {"paymentIntent": "pi_unkeyed_3", "amount": 103}})
        assert status == 400, body
        assert body["error"]["code"] == "operation_key_required"
        assert body["error"]["details"]["field"] == "operationKey"
        assert steward.fixture_writes() == writes + 2, "nothing sent"
        # The SDK's own invokes carry a key and still run.
        answer = agent.actions.invoke(name, {"paymentIntent": "pi_unkeyed_4", "amount": 104})
        assert answer["status"] == "succeeded"
        assert steward.fixture_writes() == writes + 3
    finally:
        status, body = _call(steward, operator_key, "PATCH", "/environment",
                             {"unkeyedInvokes": "accept"})
        assert status == 200 and body["data"]["unkeyedInvokes"] == "accept", body


def test_action_saved_with_a_credential_that_cannot_reach_its_url_warns(
    steward: Any, operator: anlyon.Client
) -> None:
    operator.secrets.put("ELSEWHERE_ONLY", value="sk_test_elsewhere_only_0123456789",
                         allowed_hosts=["api.example.com"])
    steward.secret_values.append("sk_test_elsewhere_only_0123456789")
    created = operator.actions.create(
        name="refund-elsewhere",
        adapter={
            "type": "stripe.refund",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": steward.fixture_url},
            "credentialSecret": "ELSEWHERE_ONLY",
        },
    )
    assert created.data["name"] == "refund-elsewhere"
    warnings = json.loads(steward.last_response().body)["warnings"]
    assert [w["code"] for w in warnings] == ["credential_host_not_allowed"]
    assert warnings[0]["field"] == "adapter.config.baseUrl"
    assert "ELSEWHERE_ONLY" in warnings[0]["message"]
