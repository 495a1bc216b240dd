"""Runs the Temporal peer's worker (its own process, as a deployment would) until killed.

Usage: worker.py temporal_address max_concurrency   (FIXTURE_URL in the environment)
"""

import asyncio
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(__file__))

from temporalio.client import Client  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from workflow import TASK_QUEUE, RefundWorkflow, refund  # noqa: E402


async def main():
    address, concurrency = sys.argv[1], int(sys.argv[2])
    client = await Client.connect(address)
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        worker = Worker(
            client,
            task_queue=TASK_QUEUE,
            workflows=[RefundWorkflow],
            activities=[refund],
            activity_executor=pool,
            max_concurrent_activities=concurrency,
            max_concurrent_workflow_tasks=concurrency,
        )
        print("worker running", flush=True)
        await worker.run()


asyncio.run(main())
