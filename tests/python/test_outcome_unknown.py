"""The official SDK against an answer that could not be recorded after the provider call (#26).

The server runs with the test-only write fault (`STEWARD_FAIL_WRITES_WHILE_FILE`): while the
file exists, every write of the embedded store fails as a failed disk write would. The fixture
holds the refund's answer after committing it; the test makes the disk fail meanwhile, so the
commit of the answer fails after the provider call. The SDK must surface that distinctly
(`outcome_unknown`, 503, "may have been sent"), never as "nothing was sent", and a call with the
same keys must end with the settled outcome and no second write.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import anlyon
import pytest
from anlyon.config import RetryConfig
from anlyon.errors import AnlyonError

from conftest import STRIPE_SECRET_NAME, STRIPE_SECRET_VALUE, running_steward

HOLD_MS = 1500
WAIT_S = 20.0


def wait_for(probe: Any, limit_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(0.05)
    return bool(probe())


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Any:
    fault = tmp_path_factory.mktemp("fault") / "fail-writes"
    with running_steward(["--reconcile-interval-ms", "0"],
                         server_env={"STEWARD_FAIL_WRITES_WHILE_FILE": str(fault)}) as steward:
        operator = steward.client(steward.keys["operator"])
        operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                             allowed_hosts=[steward.fixture_host])
        operator.actions.create(
            name="refund-payment",
            adapter={"type": "stripe.refund",
                     "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                                "baseUrl": steward.fixture_url},
                     "credentialSecret": STRIPE_SECRET_NAME},
        )
        yield steward, fault


def invoke_while_the_disk_fails(steward: Any, fault: Path, client: anlyon.Client,
                                key: str) -> Any:
    """Invokes with the fixture holding the answer, fails the disk once the refund is committed,
    and returns what the SDK returned or raised."""
    steward.set_fault("hold_after_commit", ms=HOLD_MS)
    writes_before = steward.fixture_writes()
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["result"] = client.actions.invoke(
                "refund-payment", {"paymentIntent": f"pi_{key}", "amount": 1200},
                operation_key=key, idempotency_key=f"idem-{key}")
        except AnlyonError as e:
            outcome["error"] = e

    worker = threading.Thread(target=call)
    worker.start()
    assert wait_for(lambda: steward.fixture_writes() == writes_before + 1), "the refund committed"
    fault.write_text("fail")
    return worker, outcome


def test_the_sdk_surfaces_outcome_unknown_and_the_same_keys_settle_it(failing: Any) -> None:
    steward, fault = failing
    no_retry = steward.client(steward.keys["agent"], retry=RetryConfig(max_attempts=1))
    writes_before = steward.fixture_writes()
    worker, outcome = invoke_while_the_disk_fails(steward, fault, no_retry, "order-sdk-1")
    worker.join(timeout=WAIT_S)
    try:
        error = outcome.get("error")
        assert isinstance(error, AnlyonError), outcome
        assert error.code == "outcome_unknown", error
        assert error.status == 503, error
        assert error.details["mayHaveBeenSent"] is True, error.details
        assert error.details["effectId"].startswith("eff_"), error.details
        assert "nothing was sent" not in str(error), str(error)
        assert "same operationKey" in str(error), str(error)
    finally:
        fault.unlink()
    # The same keys, through the SDK: the settled outcome, and no second write.
    agent = steward.client(steward.keys["agent"])
    again = agent.actions.invoke(
        "refund-payment", {"paymentIntent": "pi_order-sdk-1", "amount": 1200},
        operation_key="order-sdk-1", idempotency_key="idem-order-sdk-1")
    assert again.data["status"] == "succeeded", again.data
    assert steward.fixture_writes() == writes_before + 1


def test_the_sdks_own_retry_with_the_same_key_gets_the_settled_answer(failing: Any) -> None:
    steward, fault = failing
    # The SDK retries a 503 with the same Idempotency-Key, honouring Retry-After (1 s).
    agent = steward.client(steward.keys["agent"], retry=RetryConfig(max_attempts=5, jitter=False))
    writes_before = steward.fixture_writes()
    worker, outcome = invoke_while_the_disk_fails(steward, fault, agent, "order-sdk-2")
    # The disk comes back while the SDK is retrying.
    time.sleep(HOLD_MS / 1000 + 0.5)
    fault.unlink()
    worker.join(timeout=WAIT_S * 2)
    assert "result" in outcome, outcome
    assert outcome["result"].data["status"] == "succeeded", outcome["result"].data
    assert steward.fixture_writes() == writes_before + 1
    statuses = [r.status for r in steward.recorded if "/invoke" in r.url]
    assert 503 in statuses, statuses
