"""The official SDK's own real-backend suite (`tests/test_real_backend.py` of the anlyon 0.6.0
source distribution, written by the SDK's authors against their hosted backend), run unchanged
against Steward. scripts/python-tests downloads the sdist from PyPI and unpacks it; this test
sets up what that suite expects (the keys and actions it names in its environment variables)
and runs it in a child pytest, which must pass every one of its tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from conftest import _DIRECT, REPO, Steward, create_key

SUITE = REPO / ".cache" / "anlyon-sdist" / "anlyon-0.6.0" / "tests" / "test_real_backend.py"
# The suite's own tests, by name: all of them must run and pass.
EXPECTED_TESTS = 5
SUITE_TIMEOUT_S = 120


def post(steward: Steward, key: str, path: str, body: Any) -> Any:
    request = urllib.request.Request(
        steward.url + "/api/v2" + path, method="POST", data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with _DIRECT.open(request, timeout=30) as response:
        return json.loads(response.read())


def test_the_sdks_own_real_backend_suite_passes_unchanged(steward: Steward) -> None:
    assert SUITE.is_file(), f"{SUITE} is missing: scripts/python-tests unpacks the SDK's sdist"
    d = steward.data_dir
    operator = create_key(d, "sdk-own", "own-operator", role="operator")
    agent_scopes = ["actions:read", "actions:invoke", "approvals:read", "approvals:request",
                    "impact_limits:read"]
    runtime = create_key(d, "sdk-own", "own-runtime", scopes=[*agent_scopes, "sessions:write"])
    no_session = create_key(d, "sdk-own", "own-no-session", scopes=agent_scopes)
    other = create_key(d, "sdk-own-other", "own-other", role="operator")
    # A read the runtime key may run, a write its tests deny by policy, and an action of
    # another environment that a policy here must not be able to name.
    read = post(steward, operator, "/actions", {
        "name": "own-read", "method": "GET",
        "urlTemplate": steward.fixture_url + "/_fixture/healthz"})
    refund = post(steward, operator, "/actions", {
        "name": "own-refund", "method": "POST", "governed": True,
        "urlTemplate": steward.fixture_url + "/v1/refunds"})
    foreign = post(steward, other, "/actions", {
        "name": "own-foreign", "method": "POST",
        "urlTemplate": steward.fixture_url + "/v1/refunds"})
    env = {
        **os.environ,
        "ANLYON_E2E_BASE_URL": steward.url,
        "ANLYON_E2E_OPERATOR_KEY": operator,
        "ANLYON_E2E_RUNTIME_KEY": runtime,
        "ANLYON_E2E_NO_SESSION_KEY": no_session,
        "ANLYON_E2E_OTHER_OPERATOR_KEY": other,
        "ANLYON_E2E_READ_ACTION": read["data"]["name"],
        "ANLYON_E2E_REFUND_ACTION": refund["data"]["name"],
        "ANLYON_E2E_FOREIGN_ACTION": foreign["data"]["name"],
    }
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider",
         "--rootdir", str(SUITE.parent)],
        env=env, cwd=SUITE.parent, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    summary = ran.stdout.strip().splitlines()[-1] if ran.stdout.strip() else ""
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    # Its pyproject sets an option of a plugin this venv lacks: that warning is the only one.
    assert re.fullmatch(rf"{EXPECTED_TESTS} passed(, 1 warning)? in .*", summary), ran.stdout[-3000:]
    assert Path(SUITE).read_text().count("\ndef test_") == EXPECTED_TESTS
