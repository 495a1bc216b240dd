"""The deployment files in deploy/ are checked by the tools that will read them.

`deploy/steward.service` goes through `systemd-analyze verify` with its `ExecStart` pointed at the
binary under test: every directive must parse (systemd only warns on a bad value, so any output
fails the test) and the command must exist.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import REPO, steward_bin

UNIT = REPO / "deploy" / "steward.service"


def test_the_systemd_unit_verifies_cleanly(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (Debian's systemd package)"
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/steward serve" in text
    unit = tmp_path / "steward.service"
    unit.write_text(text.replace("/usr/local/bin/steward", str(Path(steward_bin()).resolve())))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "" and done.stderr.strip() == "", (done.stdout, done.stderr)


def test_a_broken_directive_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a value systemd cannot parse is reported."""
    analyze = shutil.which("systemd-analyze")
    assert analyze
    unit = tmp_path / "steward.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/steward", str(Path(steward_bin()).resolve()))
                    .replace("ProtectSystem=strict", "ProtectSystem=bogus"))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert "bogus" in done.stderr, done.stderr
