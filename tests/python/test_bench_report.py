"""bench/report.py names the saturated resource of a missed target from `steward bench`'s split,
and still writes RESULTS.md from an older run without it.

Standard library only, no server: the run directory is made up here (one made-up Restate row),
so nothing is timed; `python3 tests/python/test_bench_report.py` runs the same checks as pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "bench" / "report.py"


def steward_row(workload, store, c, throughput, p50, split=None):
    row = {"workload": workload, "store": store, "concurrency": c, "requests": int(throughput * 10),
           "errors": 0, "writes": 0, "writesExpected": 0, "seconds": 10.0, "throughput": throughput,
           "p50Ms": p50, "meanMs": p50 * 1.1, "p90Ms": p50, "p99Ms": p50, "maxMs": p50, "ratio": "-",
           "firstError": None}
    if split is not None:
        row["split"] = split
    return row


def cpu_bound(steward_us, postgres_us=None, waits=None):
    return {"machineBusyPct": 99.0,
            "cpuUs": {"client": 60.0, "fixture": 90.0, "steward": steward_us, "postgres": postgres_us},
            "runQueueMs": {"client": 0.2, "fixture": 0.7, "steward": 1.8, "postgres": None},
            "serverMs": 40.0, "commitsPerRequest": 2.0, "commitMs": 30.0, "commits": {}, "dispatchMs": 5.0,
            "pgWaits": waits}


def write_run(run: Path, with_split: bool, proxy=None, c1_commit_ms=2.0, floor_cpu=None):
    pick = (lambda s: s) if with_split else (lambda s: None)
    waits = {"samples": 300, "states": {"cpu": 2.0, "walFlush": 6.0, "lock": 1.0, "idleInTransaction": 4.0},
             "events": {}}
    quiet_c1 = {"machineBusyPct": 60.0, "cpuUs": {"client": 140.0, "fixture": 240.0, "steward": 1900.0,
                                                  "postgres": None},
                "runQueueMs": {}, "serverMs": 3.0, "commitsPerRequest": 2.0, "commitMs": c1_commit_ms, "commits": {},
                "dispatchMs": 0.5, "pgWaits": None}
    floor64 = cpu_bound(None)
    if floor_cpu is not None:
        floor64["cpuUs"].update(client=floor_cpu[0], fixture=floor_cpu[1])
    rows = [
        steward_row("floor", "-", 1, 4000.0, 0.1, pick(cpu_bound(None))),
        steward_row("floor", "-", 64, 11000.0, 5.0, pick(floor64)),
        steward_row("a", "embedded", 1, 250.0, 3.0, pick(quiet_c1)),
        steward_row("a", "embedded", 64, 1100.0, 50.0, pick(cpu_bound(800.0))),
        steward_row("a", "postgres", 16, 330.0, 45.0, pick(cpu_bound(1280.0, 2900.0, waits))),
        steward_row("a", "postgres", 64, 300.0, 200.0, pick(cpu_bound(1350.0, 3400.0, waits))),
    ]
    if proxy is not None:
        # The durable-proxy floor: (throughput at 64, p50 at 1, its CPU per request at 64).
        throughput, p50, cpu = proxy
        rows.append(steward_row("proxy", "embedded", 1, 1000.0, p50, pick(cpu_bound(450.0))))
        rows.append(steward_row("proxy", "embedded", 64, throughput, 6.0, pick(cpu_bound(cpu))))
    (run / "steward.json").write_text(json.dumps({"cores": 2, "rows": rows, "recovery": []}))
    restate = [{"system": "restate", "concurrency": 64, "ok": 7000, "errors": 0, "writes": 7000,
                "seconds": 10.0, "latenciesUs": [90000] * 100}]
    (run / "restate.json").write_text(json.dumps(restate))
    floor = {"concurrency": 64, "requests": 1000, "failed": 0, "seconds": 10, "throughput": 101.0,
             "latencyAvgMs": 600.0}
    if with_split:
        floor.update({"machineBusyPct": 100.0, "cpuUs": {"client": 1600.0, "postgres": 11000.0}})
    (run / "pg-floor.json").write_text(json.dumps([floor]))


def results(with_split: bool, proxy=None, c1_commit_ms=2.0, floor_cpu=None) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        write_run(run, with_split, proxy, c1_commit_ms, floor_cpu)
        out = run / "RESULTS.md"
        subprocess.run([sys.executable, str(REPORT), str(run), str(out), "test"], check=True)
        return out.read_text()


def missed(text: str, target: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith(f"- **{target}**")]
    assert len(lines) == 1, f"no single explanation of {target!r} in:\n{text}"
    return lines[0]


def test_a_missed_throughput_target_names_the_cpu_and_projects_steward_alone():
    text = results(with_split=True)
    line = missed(text, "(a) embedded, c=64: >= 10x Restate")
    assert "CPU: machine busy 99 % of 2 cores" in line, line
    assert "steward 800 us + fixture 90 us + client 60 us" in line, line
    # 2 cores / 800 us per request = 2,500/s; Restate 700/s measured.
    assert "about 2500/s, bound by Steward's CPU, 3.57x Restate" in line, line


def test_postgres_is_bound_by_its_own_cpu_when_the_floor_was_cpu_bound_too():
    text = results(with_split=True)
    line = missed(text, "(a) PostgreSQL, c=64: >= 3x Restate")
    assert "6.0 flushing WAL" in line, line
    # 2 cores / 3,400 us = 588/s, below Steward's 1,481/s; the CPU-bound floor (101/s) is left out.
    assert "about 588/s, bound by PostgreSQL's CPU" in line, line
    assert "was CPU-bound too" in line, line
    assert "floor requests/s | floor latency avg ms | machine busy %" in text
    assert "| 64 | 101 | 600.00 | 100 | 1600 | 11000 |" in text


def test_c1_latency_is_split_and_projected_with_a_fast_fsync():
    line = missed(results(with_split=True), "(a) embedded, c=1: p50 <= 6x the floor's p50")
    assert "2.000 ms in 2.0 commits" in line and "the largest part is commits" in line, line
    # Mean 3.3 ms less (2.0 - 2 x 0.15) ms = 1.6 ms; p50 3.0 x 1.6 / 3.3 = 1.455 ms, 14.55x the floor.
    assert "about 1.455 ms, 14.55x the floor's p50" in line, line


def test_a_missed_embedded_target_says_whether_the_durable_proxy_met_it():
    # The proxy at 5,500/s is 0.50x the floor's 11,000/s at c=64 and 0.4 ms is 4x its 0.1 ms p50
    # at c=1: the machine allows both targets, and Steward's CPU is 10x the proxy's.
    text = results(with_split=True, proxy=(5500.0, 0.4, 80.0))
    line = missed(text, "(a) embedded, c=64: >= 0.35x the floor")
    assert "reached 0.50x the floor here, so this machine allows the target" in line, line
    assert "the proxy 80 us, Steward 800 us (10.0x)" in line, line
    line = missed(text, "(a) embedded, c=1: p50 <= 6x the floor's p50")
    assert "reached 4.00x the floor here, so this machine allows the target" in line, line
    assert "| (the durable-proxy floor) | floor (Rust client) | 64 | 0.50x | 1.20x |" in text
    # A proxy that misses them too says so.
    text = results(with_split=True, proxy=(2200.0, 0.9, 300.0))
    line = missed(text, "(a) embedded, c=64: >= 0.35x the floor")
    assert "reached 0.20x the floor here, so this machine does not allow the target" in line, line
    line = missed(text, "(a) embedded, c=1: p50 <= 6x the floor's p50")
    assert "reached 9.00x the floor here, so this machine does not allow the target" in line, line
    # Without a proxy row, nothing is said of it.
    assert "durable-proxy floor" not in missed(results(with_split=True), "(a) embedded, c=64: >= 0.35x the floor")


def test_a_missed_embedded_target_gives_the_budget_steward_would_have():
    # c=64: 0.35 x 11,000/s = 3,850/s; 2 cores / 3,850 = 519 us for all; client 60 + fixture 90
    # leave Steward 369 us, and it took 800 (2.2x over).
    line = missed(results(with_split=True), "(a) embedded, c=64: >= 0.35x the floor")
    assert "(3850/s) the 2 cores, fully busy, give all processes together 519 us per request" in line, line
    assert ("the fixture and the client take at least 150 us of it (the least of this cell and the floor's), "
            "which leaves Steward at most 369 us per request against 800 us measured (2.2x over).") in line, line
    # Where the client and the fixture took less in the floor's cell (30 + 40 us), that is what
    # they are charged: 519 - 70 leaves Steward 449 us.
    line = missed(results(with_split=True, floor_cpu=(30.0, 40.0)), "(a) embedded, c=64: >= 0.35x the floor")
    assert "take at least 70 us of it" in line and "Steward at most 449 us per request" in line, line
    # PostgreSQL (a) at 3x Restate's 700/s: 2 cores / 2,100/s = 952 us for all, client and fixture
    # 150 of it; Steward 1,350 + PostgreSQL 3,400 = 4,750 us against the 802 left.
    line = missed(results(with_split=True), "(a) PostgreSQL, c=64: >= 3x Restate")
    assert ("at 3x Restate (2100/s) the 2 cores, fully busy, give all processes together 952 us per request; "
            "the fixture and the client take at least 150 us of it (the least of this cell and the floor's), which "
            "leaves Steward and PostgreSQL at most 802 us per request against 4750 us measured (5.9x over); PostgreSQL alone spent 11000 us per request "
            "on (a)'s commits in the PostgreSQL floor.") in line, line
    # c=1: p50 3.0 ms less 2.0 ms of commits is 1.0 ms, 10x the floor's 0.1 ms: past 6x already.
    line = missed(results(with_split=True, proxy=(5500.0, 0.4, 80.0)), "(a) embedded, c=1: p50 <= 6x the floor's p50")
    assert "the p50 less the commits' mean time is 1.000 ms (10.00x the floor's p50), so the target leaves nothing for the commits" in line, line
    assert "its extra hop added 0.300 ms to the floor's p50" in line, line
    # With 2.7 ms of commits, 0.3 ms is left of the 0.6 ms the target allows.
    line = missed(results(with_split=True, c1_commit_ms=2.7), "(a) embedded, c=1: p50 <= 6x the floor's p50")
    assert "(3.00x the floor's p50), so the target leaves the two commits at most 0.300 ms together, against 2.700 ms measured." in line, line
    assert "extra hop" not in line, line


def test_an_older_run_without_the_split_still_reports():
    text = results(with_split=False)
    assert "| (a) embedded, c=64: >= 10x Restate | 1.57x" in text
    assert "### Missed targets" not in text  # the profile it includes may name the list
    assert "| 64 | 101 | 600.00 | - | - | - |" in text


if __name__ == "__main__":
    for name, test in list(globals().items()):
        if name.startswith("test_"):
            test()
    print("ok")
