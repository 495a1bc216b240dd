"""The same work as Steward's workload (a), on DBOS Transact: a workflow whose id is the
operation key, with one step that sends the refund to the fixture under that key. DBOS records
the workflow and the step's result in its PostgreSQL system database, so starting the workflow
again with the same id returns the recorded result.

Usage: drive.py out.json levels duration_s requests_max run_id fixture_url system_database_url
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from dbos import DBOS, DBOSConfig, SetWorkflowID  # noqa: E402

from loadgen import Fixture, parse_args, run_threads, save  # noqa: E402

args = parse_args(sys.argv)
fixture = Fixture(args["fixture"])
config: DBOSConfig = {
    "name": "steward-bench",
    "system_database_url": sys.argv[7],
    # Enough connections for the highest concurrency, so the pool is not the bottleneck.
    "sys_db_pool_size": max(args["levels"]) + 8,
}
DBOS(config=config)


@DBOS.step()
def refund_step(key: str, payment_intent: str, amount: int) -> str:
    return fixture.refund(key, payment_intent, amount)


@DBOS.workflow()
def refund_workflow(key: str, payment_intent: str, amount: int) -> str:
    return refund_step(key, payment_intent, amount)


def one(key, n):
    with SetWorkflowID(key):
        refund_workflow(key, f"pi_{key}", 100 + n % 900)


DBOS.launch()
try:
    save(args["out"], run_threads("dbos", args, one, fixture))
finally:
    DBOS.destroy()
