"""The MCP inspector's CLI (npm `@modelcontextprotocol/inspector`, pinned in tests/inspector)
lists and calls a Steward tool over both transports: stdio through the same host configuration
file the README gives (`steward mcp --server URL`, the key in the environment), and Streamable
HTTP with a bearer header, on the inspector's default (legacy) protocol era and on its `modern`
era (MCP 2026-07-28, stateless). A client nobody here wrote; writes are counted at the fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    REPO,
    STRIPE_SECRET_NAME,
    STRIPE_SECRET_VALUE,
    Steward,
    child_env,
    create_key,
    steward_bin,
)

INSPECTOR = REPO / "tests" / "inspector" / "node_modules" / ".bin" / "mcp-inspector"
INSPECTOR_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def agent_key(steward: Steward) -> str:
    if not INSPECTOR.exists():
        pytest.fail(f"{INSPECTOR} is missing: run `npm ci --ignore-scripts` in tests/inspector "
                    "(scripts/python-tests does)")
    d = steward.data_dir
    operator = steward.client(create_key(d, "mcp-inspector", "insp-op", role="operator"))
    operator.secrets.put(STRIPE_SECRET_NAME, value=STRIPE_SECRET_VALUE,
                         allowed_hosts=[steward.fixture_host])
    operator.actions.create(name="inspector.refund", adapter={
        "type": "stripe.refund",
        "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                   "baseUrl": steward.fixture_url},
        "credentialSecret": STRIPE_SECRET_NAME,
    })
    return create_key(d, "mcp-inspector", "insp-agent")


def inspector(steward: Steward, key: str, transport: str, *method: str) -> dict[str, Any]:
    """Runs the inspector CLI once; its JSON answer."""
    with tempfile.TemporaryDirectory(prefix="mcp-inspector-") as tmp:
        # A throwaway HOME: the inspector keeps its catalog and settings there.
        env = {**child_env(), "HOME": tmp}
        if transport == "stdio":
            config = Path(tmp) / "mcp.json"
            config.write_text(json.dumps({"mcpServers": {"steward": {
                "command": str(steward_bin()),
                "args": ["mcp", "--server", steward.url],
                "env": {"STEWARD_API_KEY": key},
            }}}))
            target = ["--config", str(config), "--server", "steward"]
        else:
            target = [steward.url + "/mcp", "--transport", "http",
                      "--header", f"Authorization: Bearer {key}"]
        if transport == "http-modern":
            # The 2026-07-28 revision, pinned: no `initialize`, the version and capabilities
            # on every request, `server/discover` first; no fallback to an older revision.
            target += ["--protocol-era", "modern"]
        done = subprocess.run([str(INSPECTOR), "--cli", *target, *method], env=env,
                              capture_output=True, text=True, timeout=INSPECTOR_TIMEOUT_S,
                              cwd=tmp)
    assert done.returncode == 0, f"inspector failed: {done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


@pytest.mark.parametrize("transport", ["stdio", "http", "http-modern"])
def test_the_mcp_inspector_cli_lists_and_calls_a_tool(
        steward: Steward, agent_key: str, transport: str) -> None:
    listed = inspector(steward, agent_key, transport, "--method", "tools/list")
    assert [t["name"] for t in listed["tools"]] == ["inspector_refund"], listed
    key = f"inspector-{transport}-{uuid.uuid4()}"
    arguments = ["paymentIntent=pi_inspector", "amount=700", f"operationKey={key}"]
    before = steward.fixture_writes()
    for _ in range(2):
        called = inspector(steward, agent_key, transport, "--method", "tools/call",
                           "--tool-name", "inspector_refund", "--tool-arg", *arguments)
        assert called["isError"] is False, called
        # Only a 2026-07-28 result carries its `resultType` (older peers get it stripped).
        assert ("resultType" in called) == (transport == "http-modern"), called
        assert called["structuredContent"]["status"] == "succeeded", called
        assert called["structuredContent"]["operationKey"] == key
        assert steward.fixture_writes() == before + 1, "the second call replays, no new write"
    assert STRIPE_SECRET_VALUE not in json.dumps(called)
