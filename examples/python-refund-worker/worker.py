#!/usr/bin/env python3
"""A crash-safe refund worker in Python, on the official Anlyon SDK and steward-recovery: the
Python twin of examples/refund-worker, and a worker `steward chaos --worker` drives.

It takes refund tasks from a JSON file and runs each as one business operation:

1. ``begin`` the operation ``refund:<orderId>`` with the ``stripe.refund`` input (journaled
   and fsync'd in the worker's SQLite file before anything is sent);
2. ``run`` it against the ``refund-order`` action;
3. ``complete`` it (the final local save);
4. the continuation: mark the order in the worker's own table and queue one customer
   notification in an outbox (both idempotent, so the ``after_save`` window is real and safe);
5. ``mark_continued``.

On start it first ``recover``s whatever a previous run left. Configuration comes from the
environment (what ``steward chaos`` sets) or the flags: STEWARD_URL, STEWARD_API_KEY,
STEWARD_JOURNAL, STEWARD_TASKS, STEWARD_ACTION, STEWARD_ENVIRONMENT, STEWARD_ASSIGNEE,
STEWARD_APPROVAL_WAIT_S, and STEWARD_CRASH_AT for a crash point. Exit 0 when every task rests
(continued, or explicitly pending approval or unknown), 1 otherwise; one JSON line per task on
stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anlyon
from anlyon.config import RetryConfig
from steward_recovery import (
    APPROVAL_WAIT_S_DEFAULT,
    ASSIGNEE_DEFAULT,
    Config,
    LocalState,
    Operation,
    Operations,
    SqliteJournal,
)

#: The prefix of every refund's operation key; the rest is the order id.
OPERATION_KEY_PREFIX = "refund:"

ORDERS_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS refund_orders (
    order_id     TEXT PRIMARY KEY,
    status       TEXT NOT NULL,
    refund_id    TEXT,
    operation_id TEXT NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS refund_notifications (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id     TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    message      TEXT NOT NULL
)""",
)

# Loopback never goes through a proxy.
for _var in ("NO_PROXY", "no_proxy"):
    os.environ[_var] = ",".join(p for p in (os.environ.get(_var, ""), "127.0.0.1", "localhost") if p)


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", default=env("STEWARD_URL"), help="Steward's base URL")
    p.add_argument("--key", default=env("STEWARD_API_KEY"), help="an agent API key")
    p.add_argument("--journal", default=env("STEWARD_JOURNAL"),
                   help="the worker's SQLite file: the journal and the worker's own tables")
    p.add_argument("--tasks", default=env("STEWARD_TASKS"),
                   help='a JSON list of {"orderId", "paymentIntent", "amount"}')
    p.add_argument("--action", default=env("STEWARD_ACTION", "refund-order"))
    p.add_argument("--environment", default=env("STEWARD_ENVIRONMENT", "test"))
    p.add_argument("--assignee", default=env("STEWARD_ASSIGNEE", ASSIGNEE_DEFAULT))
    p.add_argument("--approval-wait-s", type=float,
                   default=float(env("STEWARD_APPROVAL_WAIT_S", APPROVAL_WAIT_S_DEFAULT)))
    args = p.parse_args(argv)
    for name in ("server", "key", "journal", "tasks"):
        if not getattr(args, name):
            p.error(f"--{name} (or its STEWARD_* variable) is required")
    return args


def load_tasks(path: str) -> list[dict[str, Any]]:
    tasks = json.loads(Path(path).read_text())
    orders = [t["orderId"] for t in tasks]
    if len(set(orders)) != len(orders):
        raise SystemExit(f"an order appears twice in {path}")
    return tasks


def order_of(op: Operation) -> str:
    return op.operation_key.removeprefix(OPERATION_KEY_PREFIX)


def refund_id(op: Operation) -> str | None:
    record = op.server_record if isinstance(op.server_record, dict) else {}
    body = record.get("body")
    return body.get("id") if isinstance(body, dict) else None


class Worker:
    def __init__(self, ops: Operations, db: sqlite3.Connection) -> None:
        self.ops = ops
        self.db = db
        self.failures = 0

    def record_order(self, op: Operation) -> None:
        """The continuation: upserts the order's status and, for a refund, queues exactly one
        notification. One transaction; safe to run any number of times."""
        result = op.result or {}
        status = "refunded" if result.get("refunded") else result.get("reason", "failed")
        order = order_of(op)
        with self.db:  # commits (or rolls back) this one transaction
            self.db.execute(
                "INSERT INTO refund_orders (order_id, status, refund_id, operation_id) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (order_id) DO UPDATE SET "
                "status = excluded.status, refund_id = excluded.refund_id, "
                "operation_id = excluded.operation_id",
                (order, status, refund_id(op), op.id),
            )
            queued = self.db.execute(
                "SELECT 1 FROM refund_notifications WHERE order_id = ?", (order,)
            ).fetchone()
            if status == "refunded" and queued is None:
                self.db.execute(
                    "INSERT INTO refund_notifications (order_id, operation_id, message) "
                    "VALUES (?, ?, ?)",
                    (order, op.id, f"Your order {order} has been refunded."),
                )

    def finish(self, op: Operation) -> Operation:
        """Settled -> complete (the final local save) -> continuation -> continued. Completed ->
        continuation -> continued. Anything else is left as it rests."""
        if op.state.is_settled():
            if op.state is LocalState.SUCCEEDED:
                result = {"refunded": True, "refundId": refund_id(op)}
            else:
                result = {"refunded": False, "reason": op.state.value}
            op = self.ops.complete(op, result)
        if op.state is not LocalState.COMPLETED:
            return op
        self.record_order(op)
        return self.ops.mark_continued(op)

    def run_task(self, task: dict[str, Any], done: set[str], action: str) -> None:
        op = self.ops.begin(
            f"{OPERATION_KEY_PREFIX}{task['orderId']}",
            action,
            {"paymentIntent": task["paymentIntent"], "amount": task["amount"]},
        )
        if op.id in done or op.state is LocalState.CONTINUED:
            return
        if not (op.state.is_settled() or op.state is LocalState.COMPLETED):
            op = self.ops.run(op)
        self.finish(op)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    tasks = load_tasks(args.tasks)
    db = sqlite3.connect(args.journal, timeout=5.0)
    journal = SqliteJournal(db)
    with db:
        for statement in ORDERS_SCHEMA:
            db.execute(statement)
    # The SDK's own retries are kept to one send: steward-recovery resends the identical
    # request itself, with the same Idempotency-Key, on "not now" answers and lost connections.
    client = anlyon.Client(api_key=args.key, base_url=args.server,
                           retry=RetryConfig(max_attempts=1))
    config = Config(environment=args.environment, assignee=args.assignee,
                    approval_wait_s=args.approval_wait_s)
    worker = Worker(Operations(client, journal, config), db)

    # 1. Recover before any new work: nothing is resent with a new key.
    report = worker.ops.recover()
    print(f"python-refund-worker: recovered {report.summary()}", file=sys.stderr)
    done: set[str] = set()
    for recovered in report.operations:
        done.add(recovered.operation.id)
        if recovered.error is not None:
            print(f"python-refund-worker: {recovered.operation.id}: {recovered.error}",
                  file=sys.stderr)
            worker.failures += 1
            continue
        try:
            worker.finish(recovered.operation)
        except Exception as e:  # reported, counted, and the run goes on to the next
            print(f"python-refund-worker: {recovered.operation.id}: {e}", file=sys.stderr)
            worker.failures += 1

    # 2. The tasks: begin is idempotent, so a task already journaled is the same operation.
    for task in tasks:
        try:
            worker.run_task(task, done, args.action)
        except Exception as e:
            print(f"python-refund-worker: order {task['orderId']}: {e}", file=sys.stderr)
            worker.failures += 1

    # 3. Say where every task rests.
    ops = journal.all()
    resting = True
    for task in tasks:
        op = next((o for o in ops if o.action == args.action
                   and o.operation_key == f"{OPERATION_KEY_PREFIX}{task['orderId']}"), None)
        resting &= op is not None and op.state in (
            LocalState.CONTINUED, LocalState.PENDING_APPROVAL, LocalState.UNKNOWN)
        print(json.dumps({
            "orderId": task["orderId"],
            "operationId": op and op.id,
            "state": op and op.state.value,
            "invocationId": op and op.invocation_id,
            "approvalId": op and op.approval_id,
            "assignee": op and op.assignee,
        }))
    client.close()
    return 0 if resting and worker.failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
