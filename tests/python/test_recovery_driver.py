"""The recovery driver against a real Steward, path by path of the decision table: a final
refusal is surfaced, an unknown outcome is assigned for reconciliation and never resent, a pending
approval is observed (the same approval, across a restart) and runs once when approved, and a
journal that contradicts the server is escalated with nothing sent."""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path

import anlyon
import pytest
from conftest import STRIPE_SECRET_NAME, Steward
from steward_recovery import Config, LocalState, Operations, SqliteJournal
from steward_recovery.drive import drive

GATED = "refund-payment-gated-recovery"


def operations(steward: Steward, path: Path, **config: float) -> Operations:
    journal = SqliteJournal(sqlite3.connect(path))
    return Operations(steward.client(steward.keys["agent"]), journal,
                      Config(environment="sdk-main", **config))


def refund_input() -> dict:
    return {"paymentIntent": f"pi_{secrets.token_hex(6)}", "amount": 200}


@pytest.fixture(scope="module")
def gated_action(steward: Steward, operator: anlyon.Client, refund_action: dict) -> str:
    operator.actions.create(
        name=GATED,
        requires_approval=True,
        adapter={"type": "stripe.refund",
                 "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                            "baseUrl": steward.fixture_url},
                 "credentialSecret": STRIPE_SECRET_NAME},
    )
    return GATED


def test_a_final_refusal_is_failed_locally_and_surfaced(steward: Steward, tmp_path: Path) -> None:
    ops = operations(steward, tmp_path / "a.db")
    op = ops.run(ops.begin("refund:nowhere", "no-such-action", refund_input()))
    assert op.state is LocalState.FAILED and op.invocation_id is None and op.attempt_count == 1
    assert "NOT_FOUND" in (op.last_error or "")
    report = ops.recover()
    assert [s.kind for s in report.operations[0].steps] == ["surface"]
    assert report.to_complete()[0].id == op.id


def test_an_unknown_outcome_is_assigned_and_never_resent(
    faults: Steward, refund_action: dict, tmp_path: Path
) -> None:
    steward = faults
    ops = operations(steward, tmp_path / "b.db")
    before = steward.fixture_writes()
    steward.set_fault("drop_after_commit")
    op = ops.begin(f"refund:{secrets.token_hex(4)}", refund_action["name"], refund_input())
    op, steps = drive(ops, op)
    assert [s.kind for s in steps][:2] == ["dispatch", "assign_reconciliation"], steps
    assert op.attempt_count == 1 and op.assignee == "reconciliation-queue"
    # The server's read-only reconcile may already have found the provider's write.
    assert op.state in (LocalState.UNKNOWN, LocalState.SUCCEEDED), op
    steward.clear_faults()
    for _ in range(2):  # restarts: read, never resend
        (recovered,) = [r for r in ops.recover().operations if r.operation.id == op.id]
        assert "dispatch" not in [s.kind for s in recovered.steps]
        assert recovered.operation.attempt_count == 1
    assert steward.fixture_writes() == before + 1


def test_a_pending_approval_is_observed_across_a_restart_and_runs_once(
    steward: Steward, operator: anlyon.Client, other_operator: anlyon.Client,
    gated_action: str, tmp_path: Path
) -> None:
    path = tmp_path / "c.db"
    before = steward.fixture_writes()
    ops = operations(steward, path, approval_wait_s=1.0)
    op = ops.run(ops.begin(f"refund:{secrets.token_hex(4)}", gated_action, refund_input()))
    assert op.state is LocalState.PENDING_APPROVAL and op.approval_id, op
    approval = op.approval_id

    restarted = operations(steward, path, approval_wait_s=1.0)
    (again,) = restarted.recover().operations
    assert [s.kind for s in again.steps][0] == "observe_approval"
    assert again.operation.approval_id == approval
    assert restarted.recover().pending_approval()[0].approval_id == approval

    operator.approvals.approve(approval)
    (done,) = operations(steward, path, approval_wait_s=30.0).recover().operations
    assert done.operation.state is LocalState.SUCCEEDED, done
    assert done.operation.approval_id == approval and done.operation.attempt_count == 1
    mine = [a for a in operator.approvals.list(limit=200).data
            if a.get("invocationId") == op.invocation_id]
    assert len(mine) == 1, mine
    assert steward.fixture_writes() == before + 1


def test_a_journal_that_contradicts_the_server_is_escalated_and_nothing_is_sent(
    steward: Steward, refund_action: dict, tmp_path: Path
) -> None:
    ops = operations(steward, tmp_path / "d.db")
    op = ops.run(ops.begin(f"refund:{secrets.token_hex(4)}", refund_action["name"],
                           refund_input()))
    assert op.state is LocalState.SUCCEEDED
    before = steward.fixture_writes()
    # The journal names an invocation this server never had.
    ops.journal.save(op.evolve(state=LocalState.RUNNING, invocation_id="inv_missing0000"))
    (recovered,) = ops.recover().operations
    assert recovered.error and "invocation_missing" in recovered.error
    kept = ops.journal.get(op.id)
    assert kept.state is LocalState.RUNNING and "invocation_missing" in kept.last_error
    assert steward.fixture_writes() == before
