"""Links into the design documents point at headings that exist, and DECISIONS.md keeps its shape.

Standard library only, no server: `python3 tests/python/test_docs_links.py` runs the same checks
as pytest does. A link `DECISIONS.md#<anchor>` or `ARCHITECTURE.md#<anchor>` anywhere in the
repository (Markdown, Rust, Python, scripts), and a `(#anchor)` link inside those two documents,
must name an anchor the document has, computed as GitHub computes it from a heading.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
TARGETS = ("DECISIONS.md", "ARCHITECTURE.md")
SKIPPED_DIRS = {".git", "target", "node_modules", ".venv", ".cache", "__pycache__"}
SCANNED_SUFFIXES = {".md", ".rs", ".py", ".sh", ".toml", ".yaml", ".yml", ".html", ".txt"}
LINK = re.compile(r"\b(DECISIONS|ARCHITECTURE)\.md#([^\s)\]<>\"'`,;]+)")
LOCAL_LINK = re.compile(r"\]\(#([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(path: Path) -> list[tuple[int, int, str]]:
    """(line, level, text) of every heading outside fenced code."""
    found, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            found.append((number, len(match.group(1)), match.group(2)))
    return found


def anchors(path: Path) -> set[str]:
    """Every anchor of a document, with GitHub's `-1`, `-2` suffixes for repeated headings and
    any explicit `<a id=...>` or `<a name=...>`."""
    result: set[str] = set()
    counts: dict[str, int] = {}
    for _, _, text in headings(path):
        base = slug(text)
        n = counts.get(base, 0)
        counts[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    explicit = re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", path.read_text(encoding="utf-8"))
    return result | set(explicit)


def scanned_files() -> list[Path]:
    files = []
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        for name in names:
            path = Path(root, name)
            if path.suffix in SCANNED_SUFFIXES:
                files.append(path)
    return sorted(files)


def dangling_links() -> list[str]:
    known = {name: anchors(DOCS / name) for name in TARGETS}
    problems = []
    for path in scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        rel = path.relative_to(REPO)
        for number, line in enumerate(text.splitlines(), 1):
            for doc, anchor in LINK.findall(line):
                if anchor.rstrip(".") not in known[f"{doc}.md"]:
                    problems.append(f"{rel}:{number}: {doc}.md#{anchor}")
            if path.parent == DOCS and path.name in TARGETS:
                for anchor in LOCAL_LINK.findall(line):
                    if anchor not in known[path.name]:
                        problems.append(f"{rel}:{number}: #{anchor}")
    return problems


def decisions_shape_problems() -> list[str]:
    """Each DECISIONS.md entry (a `###` heading) has a status line first, no issue number in
    any heading, and no two headings share an anchor."""
    path = DOCS / "DECISIONS.md"
    lines = path.read_text(encoding="utf-8").splitlines()
    problems, seen = [], set()
    for number, level, text in headings(path):
        if re.search(r"#\d", text) or re.search(r"\bissues?\b", text, re.I):
            problems.append(f"line {number}: an issue number in a heading: {text}")
        anchor = slug(text)
        if anchor in seen:
            problems.append(f"line {number}: a second heading with anchor #{anchor}")
        seen.add(anchor)
        if level == 3:
            following = next((l for l in lines[number:] if l.strip()), "")
            if not re.match(r"Status: (current\b|superseded by \[)", following):
                problems.append(f"line {number}: entry without a status line: {text}")
    return problems


def test_slug_matches_github() -> None:
    assert slug("Invoking and idempotency") == "invoking-and-idempotency"
    assert slug("`http.idempotent`'s config") == "httpidempotents-config"
    assert slug("Links (dependsOn and compensates)") == "links-dependson-and-compensates"
    assert slug("Storage: PostgreSQL and replicas") == "storage-postgresql-and-replicas"


def test_the_scan_finds_links_into_both_documents() -> None:
    # Guards the scan itself: if it found nothing, the check below would pass vacuously.
    found = {doc for path in scanned_files() if path.suffix == ".md"
             for doc, _ in LINK.findall(path.read_text(encoding="utf-8", errors="replace"))}
    assert found == {"DECISIONS", "ARCHITECTURE"}, found


def test_no_link_into_the_design_documents_dangles() -> None:
    problems = dangling_links()
    assert not problems, "links to anchors that do not exist:\n" + "\n".join(problems)


def test_every_decision_has_a_status_and_headings_carry_no_issue_number() -> None:
    problems = decisions_shape_problems()
    assert not problems, "\n".join(problems)


if __name__ == "__main__":
    failures = 0
    for name, test in sorted(globals().items()):
        if name.startswith("test_") and callable(test):
            try:
                test()
                print(f"ok    {name}")
            except AssertionError as error:
                failures += 1
                print(f"FAIL  {name}\n{error}")
    sys.exit(1 if failures else 0)
