"""Governance through the official SDK (anlyon==0.6.0), unchanged, against Steward.

Approval policies (CRUD, PATCH null-vs-omitted, versions and tombstones, evaluate, decisions that
are never rewritten), scopes and separation of duties, impact declarations and limits, and the kill
switch. Each area works in its own environments so that nothing here changes what the other test
files see. Provider writes are counted at the fixture, never inferred from HTTP 200s.
"""

from __future__ import annotations

import secrets as pysecrets
import time
from collections.abc import Callable
from typing import Any

import anlyon
import pytest
from anlyon import AnlyonError, ScopeCheckError

from conftest import STRIPE_SECRET_NAME, STRIPE_SECRET_VALUE, Steward, create_key

PRIVILEGED = {
    "actions:resolve",
    "actions:govern",
    "approvals:decide",
    "policies:read",
    "policies:write",
    "environments:halt",
    "impact-limits:write",
}
SETTLE_TIMEOUT_S = 10.0


def status_of(call: Callable[[], Any]) -> int:
    try:
        call()
    except AnlyonError as error:
        assert error.status is not None
        return error.status
    return 200


def error_of(call: Callable[[], Any]) -> AnlyonError:
    with pytest.raises(AnlyonError) as caught:
        call()
    return caught.value


def refund(amount: int = 1000) -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": amount}


class Env:
    """One environment with its own keys, secret and actions, all made through the SDK."""

    def __init__(self, steward: Steward, name: str) -> None:
        self.steward = steward
        self.name = name
        self.operator = steward.client(create_key(steward.data_dir, name, f"{name}-op", role="operator"))
        self.approver = steward.client(create_key(steward.data_dir, name, f"{name}-approver", role="operator"))
        self.agent = steward.client(create_key(steward.data_dir, name, f"{name}-agent"))
        self.operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE, allowed_hosts=[steward.fixture_host])

    def refund_action(self, name: str, **extra: Any) -> dict[str, Any]:
        adapter = {
            "type": "stripe.refund",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": self.steward.fixture_url},
            "credentialSecret": STRIPE_SECRET_NAME,
        }
        return self.operator.actions.create(name=name, adapter=adapter, **extra).data

    def read_action(self, name: str) -> dict[str, Any]:
        """A plain template read against the fixture's write counter: no provider write."""
        return self.operator.actions.create(
            name=name, method="GET", url_template=f"{self.steward.fixture_url}/_fixture/writes"
        ).data


@pytest.fixture(scope="module")
def gov(steward: Steward) -> Env:
    return Env(steward, "sdk-gov")


@pytest.fixture(scope="module")
def gov_other(steward: Steward) -> Env:
    return Env(steward, "sdk-gov-other")


def wait_for(predicate: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# -- scopes and identity ---------------------------------------------------------------------


def test_identity_reports_the_credential_and_no_default_role_is_privileged(
        steward: Steward, gov: Env) -> None:
    agent = gov.agent.auth.identity().data
    assert agent["credentialType"] == "api_key" and agent["apiKeyId"].startswith("key_")
    assert agent["environmentId"].startswith("env_")
    assert "actions:invoke" in agent["scopes"]
    assert not PRIVILEGED & set(agent["scopes"]), agent["scopes"]
    op = gov.operator.auth.identity().data
    assert PRIVILEGED <= set(op["scopes"]), op["scopes"]
    assert op["environmentId"] == agent["environmentId"]
    with pytest.raises(ScopeCheckError) as broad:
        gov.operator.auth.require_scopes(["actions:invoke"], forbidden=["policies:write"])
    assert broad.value.forbidden == ["policies:write"]
    gov.agent.auth.require_scopes(["actions:invoke"], forbidden=sorted(PRIVILEGED))

    # Any other scope string a key is given is kept and reported.
    custom = steward.client(create_key(steward.data_dir, "sdk-gov", "sdk-gov-custom",
                                       scopes=["actions:invoke", "sessions:write"]))
    checked = custom.auth.require_scopes(["actions:invoke", "sessions:write"])
    assert set(checked["scopes"]) == {"actions:invoke", "sessions:write"}


# -- approval policies ---------------------------------------------------------------------------


def test_scoped_deny_affects_only_the_intended_action_and_is_never_rewritten(
        steward: Steward, gov: Env) -> None:
    gov.read_action("gov-read")
    gov.refund_action("gov-refund")
    policy = gov.operator.approval_policies.create(
        name="gov refund denied", match_kind="action", match_action_name="gov-refund",
        effect="auto_deny", change_note="incident freeze",
    ).data
    assert policy["scope"] == "specific_action"
    assert policy["needsScopeReview"] is False and policy["version"] == 1
    try:
        assert gov.agent.actions.invoke("gov-read", {}).data["status"] == "succeeded"
        before = steward.fixture_writes()
        denied = gov.agent.actions.invoke("gov-refund", refund()).data
        assert denied["status"] == "denied"
        assert denied["responseStatus"] is None and denied["body"] is None
        decision = denied["decision"]
        assert decision["source"] == "policy" and decision["code"] == "POLICY_DENIED"
        assert decision["effect"] == "denied"
        assert decision["policy"] == {"id": policy["id"], "name": policy["name"], "version": 1}
        assert steward.fixture_writes() == before, "a denied invocation is never sent"

        gov.operator.approval_policies.update(policy["id"], priority=9)
    finally:
        gov.operator.approval_policies.delete(policy["id"])
    assert gov.agent.actions.invocation(denied["id"]).data["decision"] == decision

    history = gov.operator.approval_policies.versions(policy["id"]).data
    assert [(v["version"], v["deleted"]) for v in history] == [(3, True), (2, False), (1, False)]
    first = gov.operator.approval_policies.version(policy["id"], 1).data
    assert first["changeNote"] == "incident freeze" and first["policy"]["effect"] == "auto_deny"
    paged = gov.operator.approval_policies.versions(policy["id"], limit=1, before=3)
    assert [v["version"] for v in paged.data] == [2]
    assert status_of(lambda: gov.operator.approval_policies.get(policy["id"])) == 404


def test_runtime_credentials_cannot_read_or_modify_policy(gov: Env) -> None:
    policy = gov.operator.approval_policies.create(
        name="gov guarded", match_kind="custom", effect="require_approval").data
    runtime = gov.agent
    try:
        assert status_of(lambda: runtime.approval_policies.list()) == 403
        assert status_of(lambda: runtime.approval_policies.get(policy["id"])) == 403
        assert status_of(lambda: runtime.approval_policies.create(
            name="mine", match_kind="custom", effect="auto_approve")) == 403
        assert status_of(lambda: runtime.approval_policies.disable(policy["id"])) == 403
        assert status_of(lambda: runtime.approval_policies.delete(policy["id"])) == 403
        assert status_of(lambda: runtime.approval_policies.versions(policy["id"])) == 403
        assert status_of(lambda: runtime.approval_policies.evaluate(kind="custom")) == 403
        assert gov.operator.approval_policies.get(policy["id"]).data["enabled"] is True
    finally:
        gov.operator.approval_policies.delete(policy["id"])


def test_other_environments_are_unreachable(gov: Env, gov_other: Env) -> None:
    gov.refund_action("gov-foreign-target")
    policy = gov.operator.approval_policies.create(
        name="gov scoped", match_kind="custom", effect="require_approval").data
    other = gov_other.operator
    try:
        assert status_of(lambda: other.approval_policies.get(policy["id"])) == 404
        assert status_of(lambda: other.approval_policies.update(policy["id"], enabled=False)) == 404
        assert status_of(lambda: other.approval_policies.delete(policy["id"])) == 404
        assert policy["id"] not in [p["id"] for p in other.approval_policies.list().data]
        err = error_of(lambda: other.approval_policies.create(
            name="cross", match_kind="action", match_action_name="gov-foreign-target",
            effect="auto_deny"))
        assert err.status == 400 and err.details["field"] == "matchActionName"
    finally:
        gov.operator.approval_policies.delete(policy["id"])


def test_create_update_and_null_clearing(gov: Env) -> None:
    gov.refund_action("gov-null-refund")
    op = gov.operator
    created = op.approval_policies.create(
        name="gov null", match_kind="action", match_action_name="gov-null-refund",
        match_agent_id="agent_1", min_amount=50, effect="require_approval", priority=40,
    ).data
    try:
        match = created["match"]
        assert match["actionName"] == "gov-null-refund" and match["agentId"] == "agent_1"
        assert match["minAmount"] == 50
        unchanged = op.approval_policies.update(created["id"], priority=41).data
        assert unchanged["match"]["agentId"] == "agent_1" and unchanged["match"]["minAmount"] == 50
        assert unchanged["priority"] == 41 and unchanged["version"] == 2
        cleared = op.approval_policies.update(created["id"], match_agent_id=None, min_amount=None).data
        assert cleared["match"]["actionName"] == "gov-null-refund"
        assert cleared["match"]["agentId"] is None and cleared["match"]["minAmount"] is None
        err = error_of(lambda: op.approval_policies.update(created["id"], match_kind="custom"))
        assert err.status == 400 and err.details["field"] == "matchActionName"
        ok = op.approval_policies.update(created["id"], match_kind="custom", match_action_name=None).data
        assert ok["scope"] == "custom_requests"
        assert op.approval_policies.disable(created["id"]).data["enabled"] is False
        assert op.approval_policies.enable(created["id"]).data["enabled"] is True
        # A broad auto-deny must be acknowledged.
        err = error_of(lambda: op.approval_policies.create(
            name="gov deny all", match_kind="any", effect="auto_deny"))
        assert err.status == 400 and err.details["field"] == "acknowledgeBroadScope"
        broad = op.approval_policies.create(
            name="gov deny all", match_kind="any", effect="auto_deny",
            acknowledge_broad_scope=True, enabled=False).data
        assert broad["scope"] == "all_requests" and broad["needsScopeReview"] is False
        op.approval_policies.delete(broad["id"])
    finally:
        op.approval_policies.delete(created["id"])


def test_condition_is_checked_at_save_and_evaluate_is_read_only(steward: Steward, gov: Env) -> None:
    gov.refund_action("gov-cel-refund")
    op = gov.operator
    err = error_of(lambda: op.approval_policies.create(
        name="gov bad cel", match_kind="action", match_action_name="gov-cel-refund",
        condition="input.amount >="))
    assert err.status == 400 and err.details["field"] == "condition"
    err = error_of(lambda: op.approval_policies.create(
        name="gov bad var", match_kind="action", condition="secrets.key == 1"))
    assert err.status == 400 and err.details["field"] == "condition"
    policy = op.approval_policies.create(
        name="gov big refunds", match_kind="action", match_action_name="gov-cel-refund",
        condition="input.amount >= 500", required_approvals=2,
    ).data
    try:
        before = steward.fixture_writes()
        evaluated = op.approval_policies.evaluate(
            kind="action", action_name="gov-cel-refund", payload={"paymentIntent": "pi", "amount": 900})
        assert evaluated.data["evaluation"] == "policy_only"
        assert evaluated.data["effect"] == "require_approval"
        assert evaluated.data["requiredApprovals"] == 2
        small = op.approval_policies.evaluate(
            kind="action", action_name="gov-cel-refund", payload={"amount": 100}).data
        assert small["effect"] is None
        assert steward.fixture_writes() == before, "evaluate sends nothing"
        listed = op.approval_policies.list(action_name="gov-cel-refund").data
        assert policy["id"] in [p["id"] for p in listed]

        # The policy parks a big refund for two approvers; the requester never decides.
        parked = op.actions.invoke("gov-cel-refund", refund(900)).data
        assert parked["status"] == "pending_approval"
        assert parked["decision"]["code"] == "POLICY_REQUIRES_APPROVAL"
        approval = op.approvals.get(parked["approvalId"]).data
        assert approval["requiredApprovals"] == 2
        err = error_of(lambda: op.approvals.approve(parked["approvalId"]))
        assert err.status == 403
        assert gov.approver.approvals.approve(parked["approvalId"]).data["approval"]["status"] == "pending"
        assert steward.fixture_writes() == before
        third = steward.client(create_key(steward.data_dir, "sdk-gov", "sdk-gov-third", role="operator"))
        assert third.approvals.approve(parked["approvalId"]).data["approval"]["status"] == "approved"
        assert op.actions.invocation(parked["id"]).data["status"] == "succeeded"
        assert steward.fixture_writes() == before + 1
    finally:
        op.approval_policies.delete(policy["id"])


# -- impact declarations and limits ----------------------------------------------------------


def test_declare_impact_needs_govern_to_change_a_governed_action(steward: Steward, gov: Env) -> None:
    op = gov.operator
    op.actions.create(name="gov-email", method="POST",
                      url_template=f"{steward.fixture_url}/v1/refunds",
                      body_template={"payment_intent": "{{input.pi}}", "amount": 1})
    impact = {"dimension": "emails", "amount": "count(input.to)", "bound": "exact"}
    declared = op.actions.declare("gov-email", impact=impact).data
    assert declared["governed"] is True
    assert declared["impact"] == {**impact, "unit": "emails"}
    err = error_of(lambda: op.actions.declare(
        "gov-email", impact={"dimension": "money", "amount": "input.amount", "bound": "exact"}))
    assert err.status == 400 and err.details["field"] == "impact.unit"
    err = error_of(lambda: op.actions.declare(
        "gov-email", impact={"dimension": "emails", "amount": "input + 1", "bound": "exact"}))
    assert err.status == 400 and err.details["field"] == "impact.amount"

    # A key that may edit actions but not govern them cannot change a governed declaration.
    editor = steward.client(create_key(steward.data_dir, "sdk-gov", "sdk-gov-editor",
                                       scopes=["actions:read", "actions:write"]))
    err = error_of(lambda: editor.actions.declare("gov-email", impact=None))
    assert err.status == 403 and err.details["requiredScope"] == "actions:govern"
    assert editor.actions.update("gov-email", description="plain edits are fine").data["governed"] is True

    limit = op.impact_limits.create(name="gov emails", dimension="emails", period="day", amount=3).data
    assert limit["unit"] == "emails" and limit["available"] == 3
    try:
        before = steward.fixture_writes()
        missing = gov.agent.actions.invoke("gov-email", {"pi": "pi_x"}).data
        assert missing["grade"] == "refused" and missing["status"] == "failed"
        assert missing["error"]["code"] == "impact_quantity_missing"
        too_many = gov.agent.actions.invoke("gov-email", {"pi": "pi_y", "to": ["a", "b", "c", "d"]}).data
        assert too_many["grade"] == "refused"
        assert steward.fixture_writes() == before, "a refused effect sends nothing"
    finally:
        op.impact_limits.archive(limit["id"])
    assert op.actions.declare("gov-email", governed=False).data["impact"] is None


def test_limits_reserve_consume_and_add_up(steward: Steward, gov: Env) -> None:
    gov.refund_action("gov-limited")
    op = gov.operator
    limit = op.impact_limits.create(name="gov refunds", dimension="money", currency="usd",
                                    period="day", amount=2500, action_name="gov-limited").data
    assert (limit["unit"], limit["currency"]) == ("usd", "usd")
    try:
        before = steward.fixture_writes()
        first = gov.agent.actions.invoke("gov-limited", refund(1000)).data
        assert first["status"] == "succeeded"
        second = gov.agent.actions.invoke("gov-limited", refund(1000)).data
        assert second["status"] == "succeeded"
        third = gov.agent.actions.invoke("gov-limited", refund(1000)).data
        assert third["status"] == "failed" and third["grade"] == "refused"
        assert third["error"]["code"] == "impact_limit_exhausted"
        assert steward.fixture_writes() == before + 2
        seen = gov.agent.impact_limits.get(limit["id"]).data
        assert (seen["consumed"], seen["reserved"], seen["unknownExposure"], seen["available"]) == (2000, 0, 0, 500)
        listed = {item["id"]: item for item in gov.agent.impact_limits.list().data}
        assert listed[limit["id"]]["available"] == 500
        refused = gov.agent.actions.effects(grade="refused", action="gov-limited").data
        assert third["effectId"] in [e["id"] for e in refused]

        raised = op.impact_limits.update(limit["id"], amount=3000, name="gov refunds raised").data
        assert raised["available"] == 1000 and raised["name"] == "gov refunds raised"
        assert gov.agent.actions.invoke("gov-limited", refund(1000)).data["status"] == "succeeded"
        assert status_of(lambda: gov.agent.impact_limits.update(limit["id"], amount=10**9)) == 403
        assert status_of(lambda: gov.agent.impact_limits.archive(limit["id"])) == 403
    finally:
        archived = op.impact_limits.archive(limit["id"]).data
    assert archived["archived"] is True
    assert limit["id"] not in [item["id"] for item in op.impact_limits.list().data]
    assert limit["id"] in [item["id"] for item in op.impact_limits.list(include_archived=True).data]


# -- the kill switch ---------------------------------------------------------------------------


def test_halt_sends_nothing_and_resume_runs_approved_work_once(steward: Steward) -> None:
    env = Env(steward, "sdk-halt")
    env.refund_action("halt-refund")
    env.refund_action("halt-gated", requires_approval=True)
    parked = env.agent.actions.invoke("halt-gated", refund()).data
    assert parked["status"] == "pending_approval"
    before = steward.fixture_writes()

    assert status_of(lambda: env.agent.environment.halt(reason="agent tries")) == 403
    halted = env.operator.environment.halt(reason="incident 7").data
    assert halted["halted"] is True
    assert env.agent.environment.get().data["haltReason"] == "incident 7"
    err = error_of(lambda: env.agent.actions.invoke("halt-refund", refund()))
    assert err.status == 409 and err.code == "environment_halted"
    err = error_of(lambda: env.agent.actions.invoke("halt-gated", refund()))
    assert err.status == 409 and err.code == "environment_halted"

    # Approvals can still be decided; the approved work parks and nothing is sent.
    assert env.approver.approvals.approve(parked["approvalId"]).data["approval"]["status"] == "approved"
    time.sleep(0.5)
    assert steward.fixture_writes() == before, "zero provider writes while halted"
    assert env.agent.actions.invocation(parked["id"]).data["status"] == "running"
    kinds = [e["kind"] for e in env.agent.actions.effect(parked["effectId"]).data["evidence"]]
    assert "parked" in kinds

    resumed = env.operator.environment.resume().data
    assert resumed["halted"] is False and resumed["released"] == 1
    assert wait_for(lambda: steward.fixture_writes() == before + 1), "the approved work runs after resume"
    assert env.operator.environment.resume().data["released"] == 0
    time.sleep(0.3)
    assert steward.fixture_writes() == before + 1, "exactly once"
    assert env.agent.actions.invocation(parked["id"]).data["status"] == "succeeded"
    assert env.agent.actions.invoke("halt-refund", refund()).data["status"] == "succeeded"
    assert steward.fixture_writes() == before + 2
