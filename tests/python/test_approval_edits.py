"""Edit-and-approve through the official SDK: an approver corrects a parked call's input, another
key approves the edit, the provider fixture records one write of the edited input, and the
agent's retry of its operation key (with the input it sent) observes the edited invocation.

The SDK's `approvals.approve` sends only a note; the edit's `input` goes through the SDK's own
transport (`_post`), the body being additive to the SDK's decision body.
"""

from __future__ import annotations

import secrets as pysecrets
import uuid
from typing import Any

import anlyon
import pytest

from conftest import Steward, create_key


def test_an_edited_call_runs_once_with_the_edit_and_the_agent_sees_what_changed(
        steward: Steward, operator: anlyon.Client, agent: anlyon.Client,
        refund_action: dict[str, Any]) -> None:
    # A second person in the same environment: the edit's approver.
    second = steward.client(create_key(steward.data_dir, "sdk-main", "sdk-second-approver",
                                       role="operator"))
    name = "sdk-edited-refund"
    operator.actions.create(name=name, adapter=dict(refund_action["adapter"]), requires_approval=True)
    before = steward.fixture_writes()
    intent = "pi_" + pysecrets.token_hex(8)
    sent = {"paymentIntent": intent, "amount": 9000}
    key = f"edit-{uuid.uuid4()}"
    inv = agent.actions.invoke(name, sent, operation_key=key).data
    assert inv["status"] == "pending_approval", inv

    edit = {"paymentIntent": intent, "amount": 900}
    edited = operator.approvals._post(
        f"/{inv['approvalId']}/approve", body={"input": edit, "note": "a tenth"}).data
    assert edited["approval"]["status"] == "pending"
    assert edited["invocation"]["editedInput"] == edit
    assert steward.fixture_writes() == before, "an edit sends nothing"

    # The editor's own approval of its edit counts for nothing.
    with pytest.raises(anlyon.AnlyonError) as own:
        operator.approvals.approve(inv["approvalId"], note="mine")
    assert own.value.status == 403 and own.value.code == "own_edit_decision_forbidden"

    decided = second.approvals.approve(inv["approvalId"], note="ok").data
    assert decided["approval"]["status"] == "approved"
    assert decided["invocation"]["status"] == "succeeded"
    writes = [w for w in steward.fixture_write_list() if w.get("payment_intent") == intent]
    assert [w["amount"] for w in writes] == [900], writes
    assert steward.fixture_writes() == before + 1

    # The agent retries its operation key with what it sent: the same invocation, edited, and
    # nothing more written. The SDK reads the extra fields as it reads any.
    again = agent.actions.invoke(name, sent, operation_key=key).data
    assert again["id"] == inv["id"]
    assert again["status"] == "succeeded"
    assert again["input"] == sent
    assert again["editedInput"] == edit
    assert again["inputEdits"] == [
        {"op": "replace", "path": "/amount", "before": 9000, "after": 900}]
    assert steward.fixture_writes() == before + 1
