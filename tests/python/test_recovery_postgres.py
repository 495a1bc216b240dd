"""A Python agent with its journal in its own PostgreSQL database, against a real Steward: the
application's row and the operation's intent commit in one transaction (or roll back together),
and an agent killed after that commit and before dispatch (or inside the dispatch) is recovered
by the next process with the same keys and one provider write, counted at the fixture."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from conftest import Steward
from recovery_support import fresh_database
from steward_recovery import Config, LocalState, Operations, PostgresJournal

AGENT_RUN_S = 60

# One agent process: in one transaction of its own database it records the order's refund
# request and begins the refund, commits, then runs it (STEWARD_CRASH_AT decides where it dies).
AGENT = """
import json, os, sys
import anlyon, psycopg
from steward_recovery import Config, Operations, PostgresJournal

cfg = json.loads(sys.argv[1])
conn = psycopg.connect(cfg["database"])
journal = PostgresJournal(conn)
ops = Operations(anlyon.Client(api_key=cfg["key"], base_url=cfg["url"]), journal,
                 Config(environment="sdk-main"))
with conn.transaction():
    conn.execute("INSERT INTO refund_requests (order_id, amount) VALUES (%s, %s)",
                 (cfg["order"], cfg["amount"]))
    op = ops.begin(cfg["key_name"], cfg["action"],
                   {"paymentIntent": cfg["pi"], "amount": cfg["amount"]}, join_transaction=True)
print(json.dumps({"id": op.id, "idempotencyKey": op.idempotency_key}), flush=True)
op = ops.run(op)
print(json.dumps({"state": op.state.value}), flush=True)
"""


@pytest.fixture
def database() -> Iterator[str]:
    with fresh_database() as url:
        with psycopg.connect(url) as conn:
            conn.execute(
                "CREATE TABLE refund_requests (order_id TEXT PRIMARY KEY, amount BIGINT NOT NULL)"
            )
            conn.commit()
        yield url


def ops_on(conn: psycopg.Connection, steward: Steward) -> Operations:
    client = steward.client(steward.keys["agent"])
    return Operations(client, PostgresJournal(conn), Config(environment="sdk-main"))


def test_the_application_row_and_the_intent_commit_or_roll_back_together(
    database: str, steward: Steward, refund_action: dict
) -> None:
    order = f"order-{secrets.token_hex(4)}"
    with psycopg.connect(database) as conn, psycopg.connect(database) as reader:
        ops = ops_on(conn, steward)

        class Abandon(Exception):
            pass

        with pytest.raises(Abandon), conn.transaction():
            conn.execute("INSERT INTO refund_requests VALUES (%s, 500)", (order,))
            ops.begin(f"refund:{order}", refund_action["name"],
                      {"paymentIntent": f"pi_{order}", "amount": 500}, join_transaction=True)
            raise Abandon  # the application changes its mind: everything rolls back
        assert reader.execute("SELECT count(*) FROM refund_requests").fetchone()[0] == 0
        assert reader.execute("SELECT count(*) FROM steward_operations").fetchone()[0] == 0
        reader.commit()
        assert PostgresJournal(reader).all() == []

        with conn.transaction():
            conn.execute("INSERT INTO refund_requests VALUES (%s, 500)", (order,))
            op = ops.begin(f"refund:{order}", refund_action["name"],
                           {"paymentIntent": f"pi_{order}", "amount": 500},
                           join_transaction=True)
        assert reader.execute("SELECT count(*) FROM refund_requests").fetchone()[0] == 1
        reader.commit()
        assert PostgresJournal(reader).get(op.id) == op


@pytest.mark.parametrize("point", ["before_dispatch", "after_dispatch", "after_response"])
def test_an_agent_killed_after_the_commit_is_recovered_with_the_same_keys_and_one_write(
    point: str, database: str, steward: Steward, refund_action: dict
) -> None:
    order = f"order-{secrets.token_hex(4)}"
    cfg = {
        "database": database, "key": steward.keys["agent"], "url": steward.url,
        "action": refund_action["name"], "order": order, "key_name": f"refund:{order}",
        "pi": f"pi_{order}", "amount": 700,
    }
    writes_before = steward.fixture_writes()
    env = {**os.environ, "STEWARD_CRASH_AT": point}
    agent = subprocess.run([sys.executable, "-c", AGENT, json.dumps(cfg)], capture_output=True,
                           text=True, env=env, timeout=AGENT_RUN_S, stdin=subprocess.DEVNULL)
    assert agent.returncode == -6, (agent.returncode, agent.stdout, agent.stderr)  # SIGABRT
    assert f"crash point {point} reached" in agent.stderr, agent.stderr
    begun = json.loads(agent.stdout.splitlines()[0])
    expected_writes = 0 if point == "before_dispatch" else 1
    assert steward.fixture_writes() == writes_before + expected_writes

    with psycopg.connect(database) as conn:
        # The application's row and the intent both survived the crash.
        assert conn.execute("SELECT amount FROM refund_requests WHERE order_id = %s",
                            (order,)).fetchone() == (700,)
        conn.commit()
        ops = ops_on(conn, steward)
        (found,) = ops.journal.unfinished()
        assert found.id == begun["id"] and found.state is LocalState.SUBMITTED
        assert found.idempotency_key == begun["idempotencyKey"]

        report = ops.recover()
        (recovered,) = report.operations
        assert recovered.error is None, recovered.error
        assert [s.kind for s in recovered.steps][:2] == ["dispatch", "adopt"]
        op = recovered.operation
        assert op.state is LocalState.SUCCEEDED and op.id == begun["id"]
        assert op.idempotency_key == begun["idempotencyKey"]
        assert op.attempt_count == 2  # the same request, sent again
        assert op.server_record["operationKey"] == f"refund:{order}"
        assert steward.fixture_writes() == writes_before + 1
        writes = [w for w in steward.fixture_write_list() if w.get("payment_intent") == cfg["pi"]]
        assert len(writes) == 1, writes

        # Recovering again, or beginning the same refund again, sends nothing new.
        ops.complete(op, {"refunded": True})
        assert ops.recover().operations[0].operation.state is LocalState.COMPLETED
        again = ops.begin(f"refund:{order}", refund_action["name"],
                          {"paymentIntent": cfg["pi"], "amount": 700})
        assert again.id == op.id and ops.run(again).state is LocalState.COMPLETED
        assert steward.fixture_writes() == writes_before + 1
