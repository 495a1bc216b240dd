"""`steward chaos` over the Python refund worker (examples/python-refund-worker): every crash
point once, counted at the provider fixture, and a worker that forgets its journal and invents
new operation keys on restart, to show the same count catches a duplicate.

Bounded for CI: one iteration per point (about a minute here). The acceptance run is
`steward chaos --worker "<python> examples/python-refund-worker/worker.py" --iterations 20`.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from conftest import REPO, child_env, steward_bin

WORKER = REPO / "examples" / "python-refund-worker" / "worker.py"
#: One chaos run's bound, in seconds: ten points, each a fresh world and two or three worker runs.
CHAOS_RUN_S = 300
POINTS = (
    "before_dispatch", "after_dispatch", "after_response", "awaiting_approval", "after_save",
    "server_after_record", "server_after_send", "server_after_response", "sigkill_hold",
    "sigkill_worker",
)
ROW = re.compile(r"^(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(.*)$")

# Forgets everything on every start: drops the journal and rewrites each task's order id with a
# fresh suffix, so a restart begins new operations under new operation keys.
FORGETFUL = """
import json, os, pathlib, uuid
for suffix in ("", "-wal", "-shm"):
    pathlib.Path(os.environ["STEWARD_JOURNAL"] + suffix).unlink(missing_ok=True)
tasks = pathlib.Path(os.environ["STEWARD_TASKS"])
items = json.loads(tasks.read_text())
for t in items:
    t["orderId"] = t["orderId"].split("~")[0] + "~" + uuid.uuid4().hex[:8]
tasks.write_text(json.dumps(items))
"""


def chaos(worker: str, *args: str) -> tuple[int, str, dict[str, dict[str, str]]]:
    env = child_env()
    done = subprocess.run(
        [str(steward_bin()), "chaos", "--worker", worker, *args],
        capture_output=True, text=True, env=env, timeout=CHAOS_RUN_S, stdin=subprocess.DEVNULL,
    )
    rows = {}
    for line in done.stdout.splitlines():
        m = ROW.match(line)
        if m and m.group(1) in POINTS:
            rows[m.group(1)] = dict(zip(
                ("runs", "ops", "expected", "seen", "duplicates", "lost", "states"), m.groups()[1:]
            ))
    return done.returncode, done.stdout + done.stderr[-3000:], rows


def python_worker() -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(WORKER))}"


def test_every_crash_point_once_no_duplicate_and_nothing_lost() -> None:
    code, out, rows = chaos(python_worker(), "--iterations", "1")
    assert code == 0 and "chaos: ok" in out, out
    assert set(rows) == set(POINTS), out
    for point, row in rows.items():
        assert row["duplicates"] == "0" and row["lost"] == "0", (point, row, out)
        assert row["expected"] == row["seen"], (point, row, out)
        assert int(row["runs"]) >= 2, (point, row)
    # Every operation rests continued, except the one Steward itself left unknown before it sent
    # (server_after_record), which is assigned for reconciliation and never resent.
    assert rows["after_dispatch"]["states"].strip() == "continued=3", out
    assert "unknown=1" in rows["server_after_record"]["states"], out


def test_a_worker_that_invents_new_keys_on_restart_is_caught() -> None:
    forgetful = (
        f"{shlex.quote(sys.executable)} -c {shlex.quote(FORGETFUL)} && {python_worker()}"
    )
    code, out, rows = chaos(forgetful, "--iterations", "1", "--points", "after_dispatch")
    assert code != 0 and "chaos: FAILED" in out, out
    assert int(rows["after_dispatch"]["duplicates"]) >= 1, out
