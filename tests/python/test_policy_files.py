"""Policy files through the official SDK (anlyon==0.6.0): `approval_policies.plan_file`,
`apply_file` and `test_file`, and `version(id, n)`.

A policy file describes an environment's whole policy set. Planning writes nothing; applying
makes exactly the planned change or answers 409 STALE_PLAN and changes nothing; testing decides
cases against the post-apply set and writes nothing. Each test works in environments of its own.
"""

from __future__ import annotations

import secrets as pysecrets
from typing import Any

import pytest
from anlyon import AnlyonError

from conftest import STRIPE_SECRET_NAME, STRIPE_SECRET_VALUE, Steward, create_key

FILE = """
policies:
  - name: big refunds need two
    matchKind: action
    matchActionName: pf-refund
    condition: input.amount >= 5000
    effect: require_approval
    requiredApprovals: 2
  - name: small refunds run
    matchKind: action
    matchActionName: pf-refund
    effect: auto_approve
    priority: -1
"""


class Env:
    """One environment with an operator, an agent and a refund action, made through the SDK."""

    def __init__(self, steward: Steward, name: str) -> None:
        self.steward = steward
        self.operator = steward.client(create_key(steward.data_dir, name, f"{name}-op", role="operator"))
        self.agent = steward.client(create_key(steward.data_dir, name, f"{name}-agent"))
        self.operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                                  allowed_hosts=[steward.fixture_host])
        adapter = {
            "type": "stripe.refund",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": steward.fixture_url},
            "credentialSecret": STRIPE_SECRET_NAME,
        }
        self.operator.actions.create(name="pf-refund", adapter=adapter)

    def policies(self) -> list[dict[str, Any]]:
        return self.operator.approval_policies.list().data


def env(steward: Steward) -> Env:
    return Env(steward, "pf-" + pysecrets.token_hex(4))


def error_of(call: Any) -> AnlyonError:
    with pytest.raises(AnlyonError) as caught:
        call()
    return caught.value


def test_plan_then_apply_round_trips_and_a_second_plan_is_empty(steward: Steward) -> None:
    e = env(steward)
    plan = e.operator.approval_policies.plan_file(FILE).data
    assert plan["summary"] == {"create": 2, "update": 0, "delete": 0, "unchanged": 0}
    assert sorted(c["name"] for c in plan["changes"]) == ["big refunds need two", "small refunds run"]
    assert e.policies() == [], "plan is read-only"

    applied = e.operator.approval_policies.apply_file(FILE, digest=plan["digest"],
                                                      change_note="reviewed").data
    assert applied["applied"] is True
    live = {p["name"]: p for p in e.policies()}
    assert live["big refunds need two"]["requiredApprovals"] == 2
    assert live["big refunds need two"]["version"] == 1
    first = e.operator.approval_policies.version(live["big refunds need two"]["id"], 1).data
    assert first["changeNote"] == "reviewed"

    # The same file again changes nothing, and says so.
    again = e.operator.approval_policies.plan_file(FILE).data
    assert again["summary"]["unchanged"] == 2 and again["changes"] == []
    noop = e.operator.approval_policies.apply_file(FILE, digest=again["digest"]).data
    assert noop["applied"] is False

    # An edited file updates in place (a new version) and deletes what it no longer lists.
    edited = FILE.replace("requiredApprovals: 2", "requiredApprovals: 3").split("  - name: small")[0]
    plan = e.operator.approval_policies.plan_file(edited).data
    assert plan["summary"] == {"create": 0, "update": 1, "delete": 1, "unchanged": 0}
    e.operator.approval_policies.apply_file(edited, digest=plan["digest"])
    live = e.policies()
    assert [(p["name"], p["version"], p["requiredApprovals"]) for p in live] == [
        ("big refunds need two", 2, 3)
    ]

    # The applied set decides invocations: a big refund parks, nothing is sent.
    before = steward.fixture_writes()
    parked = e.agent.actions.invoke("pf-refund", {"paymentIntent": "pi_pf", "amount": 9000},
                                    operation_key="pf-" + pysecrets.token_hex(4)).data
    assert parked["status"] == "pending_approval"
    assert steward.fixture_writes() == before


def test_an_edit_between_plan_and_apply_is_a_stale_plan_and_changes_nothing(steward: Steward) -> None:
    e = env(steward)
    plan = e.operator.approval_policies.plan_file(FILE).data
    e.operator.approval_policies.create(name="late edit", match_kind="action",
                                        match_action_name="pf-refund", effect="auto_approve")
    before = e.policies()
    error = error_of(lambda: e.operator.approval_policies.apply_file(FILE, digest=plan["digest"]))
    assert error.status == 409 and error.code == "STALE_PLAN", error
    assert e.policies() == before, "a stale plan changes nothing"
    # A digest that never was a plan of this file is stale too.
    error = error_of(lambda: e.operator.approval_policies.apply_file(FILE, digest="sha256:" + "0" * 64))
    assert error.code == "STALE_PLAN"


def test_test_file_decides_cases_against_the_post_apply_set_and_writes_nothing(steward: Steward) -> None:
    e = env(steward)
    cases = [
        {"name": "big", "actionName": "pf-refund", "payload": {"paymentIntent": "pi_1", "amount": 9000},
         "expect": {"effect": "require_approval", "requiredApprovals": 2}},
        {"name": "small", "actionName": "pf-refund", "payload": {"paymentIntent": "pi_1", "amount": 10},
         "expect": {"effect": "auto_approve", "policy": "small refunds run"}},
        {"name": "wrong on purpose", "actionName": "pf-refund",
         "payload": {"paymentIntent": "pi_1", "amount": 10}, "expect": {"effect": "auto_deny"}},
    ]
    before = steward.fixture_writes()
    report = e.operator.approval_policies.test_file(FILE, cases).data
    assert [r["passed"] for r in report["results"]] == [True, True, False]
    assert report["passed"] is False
    assert report["results"][0]["policy"] == "big refunds need two"
    assert e.policies() == [], "test writes nothing"
    assert steward.fixture_writes() == before, "test dispatches nothing"
    # Cases may come as YAML text too.
    text = "- {name: big, actionName: pf-refund, payload: {amount: 9000}, expect: {requiredApprovals: 2}}"
    assert e.operator.approval_policies.test_file(FILE, text).data["passed"] is True


def test_a_file_with_problems_is_refused_with_each_named(steward: Steward) -> None:
    e = env(steward)
    broken = """
policies:
  - {name: a, matchKind: action, effect: maybe}
  - {name: b, matchKind: action, matchActionName: no-such-action}
colour: red
"""
    error = error_of(lambda: e.operator.approval_policies.plan_file(broken))
    assert error.status == 400 and error.code == "VALIDATION_ERROR"
    fields = {p["field"] for p in error.details["errors"]}
    assert {"colour", "policies[0].effect"} <= fields, fields
    error = error_of(lambda: e.operator.approval_policies.plan_file("policies: ["))
    assert error.details["field"] == "source"
    # Names the environment does not have are refused against the environment.
    only_b = "policies:\n  - {name: b, matchKind: action, matchActionName: no-such-action}\n"
    error = error_of(lambda: e.operator.approval_policies.plan_file(only_b))
    assert error.details["field"] == "policies[0].matchActionName"


def test_policy_files_need_policy_scopes_and_stay_in_their_environment(steward: Steward) -> None:
    e, other = env(steward), env(steward)
    error = error_of(lambda: e.agent.approval_policies.plan_file(FILE))
    assert error.status == 403
    plan = e.operator.approval_policies.plan_file(FILE).data
    # The same digest means nothing in another environment: its live set is another.
    error = error_of(lambda: other.operator.approval_policies.apply_file(FILE, digest="sha256:" + "1" * 64))
    assert error.code == "STALE_PLAN"
    e.operator.approval_policies.apply_file(FILE, digest=plan["digest"])
    assert other.policies() == []
    policy_id = e.policies()[0]["id"]
    error = error_of(lambda: other.operator.approval_policies.version(policy_id, 1))
    assert error.status == 404
