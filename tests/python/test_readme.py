"""The README runs as written.

Every fenced block that README.md marks with `<!-- readme: run -->` on the line before it runs,
in order, in one bash session started in a fresh, empty directory (so `steward serve` makes a fresh
data directory there), with `steward` and `python3` on the PATH being the binary under test and the
virtualenv that holds the official SDK. A block marked `<!-- readme: file NAME -->` is written to
NAME in that directory instead of run. Lines that build the binary (`cargo ...`) are skipped: the
binary under test is the one already built.

What a block claims to print is written in it as comment lines starting with `#>`: each claim must
appear in that block's output (stdout and stderr, as a terminal shows them), in the order written. Whitespace does not count (JSON answers are
compact on the wire and spaced in the README) and `...` stands for anything.

The walkthrough listens on the README's own ports (4000 and 4010), so the test refuses to start when
either is taken rather than talk to someone else's server.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, steward_bin

README = REPO / "README.md"
MARK = re.compile(r"^<!-- readme: (run|file ([\w./-]+)) -->\n```(\w*)\n(.*?)^```", re.M | re.S)
CLAIM = re.compile(r"^\s*#>\s?(.*)$")
BLOCK_MARK = "@@README-BLOCK {}@@"
PORTS = (4000, 4010)
# The whole walkthrough: two servers starting, a dozen invokes, one approval, one reconcile.
TIMEOUT_S = 180


@dataclass
class Block:
    index: int
    line: int
    lang: str
    file: str | None
    text: str

    def claims(self) -> list[str]:
        return [m.group(1) for line in self.text.splitlines() if (m := CLAIM.match(line))]


def blocks() -> list[Block]:
    text = README.read_text()
    found = []
    for i, m in enumerate(MARK.finditer(text)):
        line = text.count("\n", 0, m.start()) + 1
        found.append(Block(i, line, m.group(3), m.group(2), m.group(4)))
    return found


def script(found: list[Block]) -> str:
    parts = [
        "set -euo pipefail",
        # Every background process the README starts ends with the walkthrough.
        "trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null || true' EXIT",
    ]
    for b in found:
        parts.append(f"echo '{BLOCK_MARK.format(b.index)}'")
        if b.file is not None:
            parts.append(f"cat > {b.file} <<'README_FILE_END'\n{b.text}README_FILE_END")
        elif b.lang == "python":
            parts.append(f"python3 - <<'README_PY_END'\n{b.text}README_PY_END")
        elif b.lang in ("sh", "bash", ""):
            lines = [": skipped, the binary is built" if line.startswith("cargo ") else line
                     for line in b.text.splitlines()]
            parts.append("\n".join(lines))
        else:
            raise AssertionError(f"README.md:{b.line}: a runnable block must be sh or python, not {b.lang}")
    return "\n".join(parts) + "\n"


def squeeze(s: str) -> str:
    return re.sub(r"\s+", "", s)


def find_claims(block: Block, output: str) -> None:
    """Each claim in order, whitespace ignored, `...` matching anything."""
    haystack = squeeze(output)
    at = 0
    for claim in block.claims():
        pattern = ".*?".join(re.escape(piece) for piece in squeeze(claim).split("..."))
        m = re.compile(pattern, re.S).search(haystack, at)
        assert m, (
            f"README.md:{block.line}: the block claims `{claim}` but printed (from the last match on):\n"
            f"{output if at == 0 else haystack[at:]}"
        )
        at = m.end()


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_the_readme_marks_its_walkthrough() -> None:
    found = blocks()
    # The quickstarts, the approval end to end and the recovery walkthrough at least.
    assert len(found) >= 6, [b.line for b in found]
    assert sum(len(b.claims()) for b in found) >= 10


def test_the_readme_runs_as_written() -> None:
    for port in PORTS:
        if not port_free(port):
            pytest.fail(f"port {port} is taken: the README walkthrough listens there")
    found = blocks()
    with tempfile.TemporaryDirectory(prefix="steward-readme-") as tmp:
        work = Path(tmp)
        bin_dir = work / ".bin"
        bin_dir.mkdir()
        (bin_dir / "steward").symlink_to(steward_bin().resolve())
        # A wrapper, not a link: a link to the virtualenv's python outside the virtualenv is
        # the base interpreter, without the SDK.
        python3 = bin_dir / "python3"
        python3.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        python3.chmod(0o755)
        # The walkthrough reads the repository's sample documents as `tests/...`.
        (work / "tests").symlink_to(REPO / "tests")
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        # Only warnings from the servers: their output shares the walkthrough's.
        env["STEWARD_LOG"] = "warn"
        # Its own process group: whatever the walkthrough leaves running ends with the test.
        proc = subprocess.Popen(
            # What a person sees in the terminal is both streams: claims match either.
            ["bash", "-c", "exec 2>&1\n" + script(found)],
            cwd=work, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f"the README walkthrough did not finish in {TIMEOUT_S} s\n{out[-8000:]}")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert proc.returncode == 0, (
            f"the README walkthrough failed (exit {proc.returncode})\n"
            f"--- output\n{out[-8000:]}"
        )
        for b in found:
            start = out.index(BLOCK_MARK.format(b.index))
            nxt = BLOCK_MARK.format(b.index + 1)
            end = out.index(nxt) if nxt in out else len(out)
            find_claims(b, out[start:end])
