"""The README's "Making a Python agent crash-safe" walkthrough, run as written against a real
Steward (only its placeholders are filled in): it refunds once, and running it again (a restart)
writes nothing new."""

from __future__ import annotations

import re
import secrets
import sqlite3
from pathlib import Path

from conftest import REPO, Steward

SECTION = "## Making a Python agent crash-safe"


def walkthrough() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index(SECTION):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_walkthrough_refunds_once_across_a_restart(
    steward: Steward, refund_action: dict, tmp_path: Path
) -> None:
    db_path = tmp_path / "agent.db"
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE refunds (order_id TEXT PRIMARY KEY, status TEXT)")
    code = (
        walkthrough()
        .replace('"agent.db"', repr(str(db_path)))
        .replace('"http://127.0.0.1:4000"', repr(steward.url))
        .replace('"refund-order"', repr(refund_action["name"]))
        .replace('environment="test"', 'environment="sdk-main"')
    )
    order = f"order-{secrets.token_hex(4)}"
    continued: list[str] = []
    before = steward.fixture_writes()
    for _ in range(2):  # the second run is the restart
        scope = {
            "agent_key": steward.keys["agent"], "order_id": order, "pi": f"pi_{order}",
            "cents": 425, "remind_the_approver": print, "open_ticket": print,
            "mark_order_and_notify_once": lambda op: continued.append(op.id),
        }
        exec(compile(code, "README.md", "exec"), scope)
        assert scope["op"].state.value == "continued"
    assert steward.fixture_writes() == before + 1
    assert len(set(continued)) == 1
