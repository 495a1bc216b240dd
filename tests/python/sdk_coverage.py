"""Which of the SDK's methods Steward's own Python tests call, read from the installed SDK.

`python tests/python/sdk_coverage.py` prints a Markdown table, one row per method of the
resources listed in `RESOURCES`: the HTTP call it makes (read from its source) and the test
files that call it. `test_sdk_coverage.py` fails when a method of the governed core has no test.

A call counts when a test file contains `.<resource>.<method>(`, for example
`client.actions.invoke(` or `admin.approval_policies.plan_file(`.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import re
import sys

import anlyon

# Client attribute -> the sync resource class that serves it.
RESOURCES: dict[str, str] = {
    "actions": "ActionsResource",
    "approvals": "ApprovalsResource",
    "approval_policies": "ApprovalPoliciesResource",
    "impact_limits": "ImpactLimitsResource",
    "secrets": "SecretsResource",
    "environment": "EnvironmentResource",
    "auth": "AuthResource",
    "budgets": "BudgetsResource",
    "runs": "RunsResource",
    "events": "EventsResource",
    "connections": "ConnectionsResource",
}

# The governed core of issue #14: every method here must have a test.
GOVERNED_CORE = (
    "actions",
    "approvals",
    "approval_policies",
    "impact_limits",
    "secrets",
    "environment",
    "auth",
    "budgets",
)

HTTP_VERBS = {"_get": "GET", "_post": "POST", "_put": "PUT", "_patch": "PATCH", "_delete": "DELETE"}

TESTS = pathlib.Path(__file__).resolve().parent


def _path_text(node: ast.expr) -> str:
    """The path argument as the source writes it: a literal, or an f-string with {names}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append("{" + ast.unparse(value.value) + "}")  # type: ignore[attr-defined]
        return "".join(parts)
    return "<" + ast.unparse(node) + ">"


def _http_call(function: ast.FunctionDef) -> str:
    """The first `self._get/_post/...` call in a method, as `VERB path`."""
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in HTTP_VERBS
            and node.args
        ):
            return f"{HTTP_VERBS[node.func.attr]} {_path_text(node.args[0])}"
    return "(no direct call)"


def methods() -> list[tuple[str, str, str, str]]:
    """(resource, method, http call, base path) for every public method of RESOURCES."""
    package = pathlib.Path(inspect.getfile(anlyon)).parent / "resources"
    found = []
    for source in sorted(package.glob("*.py")):
        tree = ast.parse(source.read_text())
        base = ""
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_BASE" for t in node.targets
            ):
                base = _path_text(node.value)
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            attr = next((a for a, c in RESOURCES.items() if c == node.name), None)
            if attr is None:
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                    found.append((attr, item.name, _http_call(item), base))
    return found


def callers() -> dict[tuple[str, str], list[str]]:
    """(resource, method) -> the test files that call it."""
    calls: dict[tuple[str, str], list[str]] = {}
    pattern = re.compile(r"\.(\w+)\.(\w+)\(")
    for test in sorted(TESTS.glob("test_*.py")):
        text = test.read_text()
        for resource, method in set(pattern.findall(text)):
            calls.setdefault((resource, method), []).append(test.name)
    return calls


def table() -> str:
    calls = callers()
    rows = ["| SDK method | HTTP | tested in |", "|---|---|---|"]
    for resource, method, http, base in methods():
        files = calls.get((resource, method), [])
        http = http.replace("GET ", f"GET {base}", 1) if http.startswith("GET ") else http
        for verb in ("POST ", "PUT ", "PATCH ", "DELETE "):
            if http.startswith(verb):
                http = f"{verb}{base}{http[len(verb):]}"
        rows.append(
            f"| `{resource}.{method}` | `{http}` | {', '.join(sorted(files)) or '**none**'} |"
        )
    return "\n".join(rows)


def untested(resources: tuple[str, ...] = GOVERNED_CORE) -> list[str]:
    calls = callers()
    return [
        f"{resource}.{method}"
        for resource, method, _, _ in methods()
        if resource in resources and not calls.get((resource, method))
    ]


if __name__ == "__main__":
    print(table())
    missing = untested()
    if missing:
        print(f"\n{len(missing)} governed-core methods without a test: {', '.join(missing)}")
        sys.exit(1)
