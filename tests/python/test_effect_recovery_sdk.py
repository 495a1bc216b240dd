"""The SDK's effect-recovery calls and its approval gate, driven by the official client.

`reconcile_effect`, `replay_effect`, `resolve_effect` and `add_effect_note` act on an effect the
fixture left `unknown` (it committed the refund and dropped the answer); every test counts the
fixture's committed writes, so a recovery that wrote a second refund fails here.
`approvals.gate` runs the decorated function only after a human approves, and never after a deny.
"""

from __future__ import annotations

import secrets as pysecrets
import threading
import time
from typing import Any

import anlyon
import pytest
from anlyon import AnlyonError, ApprovalDeniedError

from conftest import Steward

DECISION_WAIT_S = 10.0


def refund_input() -> dict[str, Any]:
    return {"paymentIntent": "pi_" + pysecrets.token_hex(8), "amount": 900}


def expect(call: Any, *, status: int, code: str) -> AnlyonError:
    with pytest.raises(AnlyonError) as caught:
        call()
    assert caught.value.status == status, caught.value
    assert caught.value.code == code, caught.value
    return caught.value


def unknown_effect(steward: Steward, agent: anlyon.Client) -> str:
    """An effect the provider committed while its answer was lost: exactly one write, `unknown`."""
    before = steward.fixture_writes()
    steward.set_fault("drop_after_commit")
    inv = agent.actions.invoke("refund-payment", refund_input()).data
    steward.clear_faults()
    assert inv["status"] == "unknown", inv
    assert steward.fixture_writes() == before + 1
    return inv["effectId"]


def test_reconcile_settles_an_unknown_effect_without_writing(
        faults: Steward, agent: anlyon.Client, operator: anlyon.Client,
        other_operator: anlyon.Client, refund_action: dict[str, Any]) -> None:
    effect_id = unknown_effect(faults, agent)
    writes = faults.fixture_writes()

    expect(lambda: other_operator.actions.reconcile_effect(effect_id), status=404, code="NOT_FOUND")
    settled = agent.actions.reconcile_effect(effect_id).data
    assert settled["id"] == effect_id
    assert settled["outcome"] == "succeeded" and settled["stage"] == "settled", settled
    assert faults.fixture_writes() == writes, "reconciling reads the provider; it never writes"
    # Reconciling again is safe: it looks again and changes nothing.
    assert agent.actions.reconcile_effect(effect_id).data["outcome"] == "succeeded"
    assert faults.fixture_writes() == writes


def test_replay_resends_under_the_same_provider_key_and_writes_nothing_new(
        faults: Steward, agent: anlyon.Client, operator: anlyon.Client,
        refund_action: dict[str, Any]) -> None:
    effect_id = unknown_effect(faults, agent)
    writes = faults.fixture_writes()

    replayed = operator.actions.replay_effect(effect_id).data
    assert replayed["outcome"] == "succeeded", replayed
    assert len(replayed["attempts"]) == 2, "the replay is a second attempt on the same effect"
    assert faults.fixture_writes() == writes, "the provider deduplicated the replay by its key"
    # A settled effect is never replayed.
    expect(lambda: operator.actions.replay_effect(effect_id), status=409, code="effect_not_unknown")
    assert faults.fixture_writes() == writes


def test_resolve_by_hand_needs_another_key_and_an_unknown_effect(
        faults: Steward, agent: anlyon.Client, operator: anlyon.Client,
        other_operator: anlyon.Client, refund_action: dict[str, Any]) -> None:
    effect_id = unknown_effect(faults, operator)
    writes = faults.fixture_writes()

    expect(lambda: operator.actions.resolve_effect(effect_id, outcome="succeeded", reason="seen"),
           status=403, code="self_resolution_forbidden")
    second = faults.client(_second_operator(faults))
    bad = expect(lambda: second.actions.resolve_effect(effect_id, outcome="maybe", reason="x"),
                 status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "outcome", bad.details
    expect(lambda: agent.actions.resolve_effect(effect_id, outcome="succeeded", reason="x"),
           status=403, code="FORBIDDEN")
    expect(lambda: other_operator.actions.resolve_effect(effect_id, outcome="succeeded", reason="x"),
           status=404, code="NOT_FOUND")
    assert agent.actions.effect(effect_id).data["outcome"] == "unknown", "refusals change nothing"

    # A second operator-role key, not the one that invoked, resolves it.
    resolved = second.actions.resolve_effect(
        effect_id, outcome="succeeded", reason="the dashboard shows the refund",
        external_reference="re_dashboard_1").data
    assert resolved["outcome"] == "succeeded" and resolved["stage"] == "settled", resolved
    assert resolved["externalReference"] == "re_dashboard_1"
    expect(lambda: second.actions.resolve_effect(effect_id, outcome="failed", reason="again"),
           status=409, code="effect_not_unknown")
    assert faults.fixture_writes() == writes, "resolving by hand sends nothing"


def test_a_note_is_appended_to_the_effects_evidence(
        steward: Steward, operator: anlyon.Client, other_operator: anlyon.Client,
        refund_action: dict[str, Any]) -> None:
    inv = operator.actions.invoke("refund-payment", refund_input()).data
    effect_id = inv["effectId"]
    before = len(operator.actions.effect(effect_id).data["evidence"])

    noted = operator.actions.add_effect_note(effect_id, "called the customer").data
    notes = [e for e in noted["evidence"] if e.get("kind") == "note"]
    assert len(noted["evidence"]) == before + 1
    assert notes and "called the customer" in str(notes[-1]), noted["evidence"]
    bad = expect(lambda: operator.actions.add_effect_note(effect_id, "   "),
                 status=400, code="VALIDATION_ERROR")
    assert bad.details["field"] == "note"
    expect(lambda: other_operator.actions.add_effect_note(effect_id, "x"), status=404, code="NOT_FOUND")
    assert len(operator.actions.effect(effect_id).data["evidence"]) == before + 1


def _decide_when_pending(decider: anlyon.Client, title: str, approve: bool) -> threading.Thread:
    """Decides the pending approval titled `title` as soon as it shows up (bounded wait)."""

    def run() -> None:
        deadline = time.monotonic() + DECISION_WAIT_S
        while time.monotonic() < deadline:
            pending = [a for a in decider.approvals.list(status="pending").data if a["title"] == title]
            if pending:
                if approve:
                    decider.approvals.approve(pending[0]["id"], note="go")
                else:
                    decider.approvals.deny(pending[0]["id"], note="not today")
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_gate_runs_the_function_only_after_approval(
        agent: anlyon.Client, operator: anlyon.Client) -> None:
    calls: list[str] = []
    title = "Ship it? " + pysecrets.token_hex(4)

    @agent.approvals.gate(title=title, timeout_seconds=DECISION_WAIT_S)
    def ship(order: str) -> str:
        calls.append(order)
        return "shipped " + order

    decider = _decide_when_pending(operator, title, approve=True)
    assert ship("ord_1") == "shipped ord_1"
    decider.join(timeout=DECISION_WAIT_S)
    assert calls == ["ord_1"]

    denied_title = "Delete it? " + pysecrets.token_hex(4)

    @agent.approvals.gate(title=denied_title, timeout_seconds=DECISION_WAIT_S)
    def delete(order: str) -> None:
        calls.append("deleted " + order)

    decider = _decide_when_pending(operator, denied_title, approve=False)
    with pytest.raises(ApprovalDeniedError) as denied:
        delete("ord_2")
    decider.join(timeout=DECISION_WAIT_S)
    assert denied.value.approval["status"] == "denied"
    assert denied.value.approval["decisionNote"] == "not today", "the gate hands back the decision note"
    assert calls == ["ord_1"], "a denied gate never runs its function"


_SECOND_OPERATOR: dict[str, str] = {}


def _second_operator(steward: Steward) -> str:
    """A second operator-role key in the suite's environment (created once)."""
    from conftest import create_key

    if "key" not in _SECOND_OPERATOR:
        _SECOND_OPERATOR["key"] = create_key(steward.data_dir, "sdk-main", "sdk-second-operator",
                                             role="operator")
    return _SECOND_OPERATOR["key"]
