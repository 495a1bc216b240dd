"""The Temporal peer's workflow and activity: the same work as Steward's workload (a). The
workflow id is the operation key; its one activity sends the refund to the fixture under it."""

import os
import sys
from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from loadgen import Fixture

TASK_QUEUE = "steward-bench"
_fixture = None


@activity.defn
def refund(key: str, payment_intent: str, amount: int) -> str:
    global _fixture
    if _fixture is None:
        _fixture = Fixture(os.environ["FIXTURE_URL"])
    return _fixture.refund(key, payment_intent, amount)


@workflow.defn
class RefundWorkflow:
    @workflow.run
    async def run(self, key: str, payment_intent: str, amount: int) -> str:
        return await workflow.execute_activity(
            refund,
            args=[key, payment_intent, amount],
            start_to_close_timeout=timedelta(seconds=10),
        )
