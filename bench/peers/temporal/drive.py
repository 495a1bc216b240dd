"""Load for the Temporal peer: each request starts the workflow with id = the operation key and
waits for its result (the worker runs in its own process).

Usage: drive.py out.json levels duration_s requests_max run_id fixture_url temporal_address
"""

import asyncio
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from temporalio.client import Client  # noqa: E402

from loadgen import Fixture, parse_args, run_async, save  # noqa: E402
from workflow import TASK_QUEUE, RefundWorkflow  # noqa: E402


async def main():
    args = parse_args(sys.argv)
    fixture = Fixture(args["fixture"])
    client = await Client.connect(sys.argv[7])

    async def one(key, n):
        await client.execute_workflow(
            RefundWorkflow.run,
            args=[key, f"pi_{key}", 100 + n % 900],
            id=key,
            task_queue=TASK_QUEUE,
        )

    save(args["out"], await run_async("temporal", args, one, fixture))


asyncio.run(main())
