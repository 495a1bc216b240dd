"""Session fixtures for the official-SDK conformance suite.

Starts a real `steward fixture` (the Stripe-shaped provider) and a real `steward serve` on
127.0.0.1 with fresh state, creates keys with `steward keys create`, and hands the tests
`anlyon.Client` instances pointed at Steward. Nothing here talks to anything but loopback.
"""

from __future__ import annotations

import json
import os
import queue
import secrets as pysecrets
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anlyon
import pytest

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
LOOPBACK = "127.0.0.1"
# The id of the fixture's integration in every test server's catalog (connections.*).
FIXTURE_INTEGRATION = "fixture-payments"
# The fixture's OAuth provider as a sign-in integration of every test server's catalog, and the
# vault secret each environment that connects it keeps the client secret in.
OAUTH_INTEGRATION = "fixture-oauth"
OAUTH_CLIENT_SECRET_NAME = "FIXTURE_OAUTH_CLIENT_SECRET"

# One credential per session. The leak check looks for these exact strings.
STRIPE_SECRET_NAME = "STRIPE_TEST_KEY"
STRIPE_SECRET_VALUE = "sk_test_" + pysecrets.token_hex(16)

# Loopback must never go through a proxy, for the SDK (httpx), urllib or Steward (reqwest).
for _var in ("NO_PROXY", "no_proxy"):
    _existing = os.environ.get(_var, "")
    os.environ[_var] = ",".join(p for p in (_existing, LOOPBACK, "localhost") if p)
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def steward_bin() -> Path:
    path = Path(os.environ.get("STEWARD_BIN") or REPO / "target" / "debug" / "steward")
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.exit(
            f"steward binary not found at {path}; run `cargo build -p steward` or set STEWARD_BIN",
            returncode=2,
        )
    return path


def child_env() -> dict[str, str]:
    """The environment for steward processes: no inherited STEWARD_* settings, quiet but useful logs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
    env.setdefault("RUST_LOG", "info")
    env["RUST_BACKTRACE"] = "1"
    return env


class Proc:
    """A steward child process whose stdout ready line is read with a bounded wait."""

    def __init__(self, name: str, args: list[str], log_path: Path,
                 extra_env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.popen = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env={**child_env(), **(extra_env or {})},
            start_new_session=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            self._lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
        self._lines.put(None)

    def wait_ready(self, prefix: str = "listening on ") -> str:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise RuntimeError(
                    f"{self.name} printed no ready line within {READY_TIMEOUT_S:.0f}s\n{self.log_tail()}"
                )
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                code = self.popen.wait(timeout=STOP_TIMEOUT_S)
                raise RuntimeError(f"{self.name} exited ({code}) before it was ready\n{self.log_tail()}")
            if line.startswith(prefix):
                url = line[len(prefix):].strip().rstrip("/")
                if not url.startswith(f"http://{LOOPBACK}:"):
                    self.stop()
                    raise RuntimeError(f"{self.name} is not on loopback: {line!r}")
                return url

    def log_tail(self, chars: int = 4000) -> str:
        self._log.flush()
        try:
            return self.log_path.read_text("utf-8", "replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, a bounded wait, then SIGKILL. Only this process is signalled."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=STOP_TIMEOUT_S)
        self._reader.join(timeout=STOP_TIMEOUT_S)
        self._log.close()


@dataclass
class Recorded:
    method: str
    url: str
    status: int
    headers: dict[str, str]
    body: str


@dataclass
class Steward:
    url: str
    fixture_url: str
    data_dir: Path
    server_log: Path
    keys: dict[str, str]
    recorded: list[Recorded] = field(default_factory=list)
    # Every secret value put during the run; the leak check looks for each one.
    secret_values: list[str] = field(default_factory=lambda: [STRIPE_SECRET_VALUE])
    clients: list[anlyon.Client] = field(default_factory=list)

    def client(self, key: str, **kwargs: Any) -> anlyon.Client:
        """An SDK client pointed at Steward that also records every response it receives."""
        client = anlyon.Client(api_key=key, base_url=self.url, **kwargs)
        # Observation only: an httpx response hook on the SDK's own transport, so the leak check
        # sees every body the SDK received. The SDK's behaviour is unchanged.
        client._http._client.event_hooks["response"].append(self._record)
        self.clients.append(client)
        return client

    def _record(self, response: Any) -> None:
        response.read()
        self.recorded.append(
            Recorded(
                method=response.request.method,
                url=str(response.request.url),
                status=response.status_code,
                headers={k.lower(): v for k, v in response.headers.items()},
                body=response.text,
            )
        )

    @property
    def fixture_host(self) -> str:
        """The fixture's `host:port`, as an `allowedHosts` entry names it (an entry without a
        port allows only the scheme's default port, 80 or 443)."""
        return urllib.parse.urlsplit(self.fixture_url).netloc

    def last_response(self) -> Recorded:
        return self.recorded[-1]

    # -- the fixture's control API (plain urllib: it is not part of the Anlyon contract) --------

    def _fixture(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.fixture_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        with _DIRECT.open(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def fixture_writes(self) -> int:
        """Refunds the provider actually committed (not HTTP 200s seen by anyone)."""
        return int(self._fixture("GET", "/_fixture/writes")["total"])

    def fixture_write_list(self) -> list[dict[str, Any]]:
        return self._fixture("GET", "/_fixture/writes")["writes"]

    def set_fault(self, mode: str, *, count: int = 1, ms: int = 0) -> None:
        state = self._fixture("POST", "/_fixture/faults", {"mode": mode, "count": count, "ms": ms})
        assert state["mode"] == mode, state

    def clear_faults(self) -> None:
        self._fixture("POST", "/_fixture/faults", {"mode": "none", "count": 0})

    def revoke_provider_key(self, key: str) -> None:
        """The provider stops accepting `key` (its key check answers 401)."""
        self._fixture("POST", "/_fixture/revoked-keys", {"key": key})

    def set_key_check_fault(self, mode: str, *, count: int = 1, ms: int = 0) -> None:
        """The next `count` key checks answer 500 (`error`) or wait `ms` first (`hold`)."""
        self._fixture("POST", "/_fixture/key-check-fault", {"mode": mode, "count": count, "ms": ms})


def create_key(data_dir: Path, env: str, name: str, *, role: str | None = None,
               scopes: list[str] | None = None, database: str | None = None) -> str:
    args = [str(steward_bin()), "keys", "create", "--data", str(data_dir), "--env", env, "--name", name]
    if database:
        args += ["--database", database]
    if role:
        args += ["--role", role]
    if scopes:
        args += ["--scopes", ",".join(scopes)]
    done = subprocess.run(args, capture_output=True, env=child_env(), timeout=CLI_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"steward keys create failed ({done.returncode}): {done.stderr.decode()}")
    key = done.stdout.decode().strip()
    assert key and "\n" not in key, f"keys create printed more than the key: {done.stdout!r}"
    return key


@pytest.fixture(scope="session")
def steward() -> Any:
    # Fault tests assert on `unknown` lists; the background reconciler would settle them
    # underneath. Tests of the reconciler start their own server with it on.
    with running_steward(["--reconcile-interval-ms", "0"]) as state:
        yield state


@contextmanager
def running_steward(serve_args: list[str], database: str | None = None,
                    server_env: dict[str, str] | None = None) -> Iterator[Steward]:
    """A fresh fixture and server (`steward serve` with `serve_args`) with the suite's keys;
    both processes are stopped on exit. With `database`, the server and the keys use that
    PostgreSQL database instead of the embedded store; `server_env` is added to the server's
    environment (a test-only switch such as `STEWARD_FAIL_WRITES_WHILE_FILE`)."""
    binary = str(steward_bin())
    with tempfile.TemporaryDirectory(prefix="steward-sdk-") as tmp:
        tmp_path = Path(tmp)
        data_dir = tmp_path / "data"
        data_dir.mkdir()
        procs: list[Proc] = []
        try:
            fixture = Proc(
                "steward fixture",
                [binary, "fixture", "--listen", f"{LOOPBACK}:0"],
                tmp_path / "fixture.stderr.log",
            )
            procs.append(fixture)
            fixture_url = fixture.wait_ready()
            # The fixture as a connectable integration (connections.*): its key check is
            # `GET /v1/account`, and a connected key may go to the fixture only.
            integrations = tmp_path / "integrations.json"
            base = fixture_url.rstrip("/")
            integrations.write_text(json.dumps({"integrations": [{
                "id": FIXTURE_INTEGRATION, "name": "Fixture payments", "authKind": "api_key",
                "allowedHosts": [urllib.parse.urlsplit(fixture_url).netloc],
                "keyCheck": {"url": base + "/v1/account"},
            }, {
                "id": OAUTH_INTEGRATION, "name": "Fixture sign-in", "authKind": "oauth",
                "allowedHosts": [urllib.parse.urlsplit(fixture_url).netloc],
                "oauth": {"authorizeUrl": base + "/oauth/authorize",
                          "tokenUrl": base + "/oauth/token", "revokeUrl": base + "/oauth/revoke",
                          "scopes": ["writes"], "clientId": "fixture-client",
                          "clientSecretName": OAUTH_CLIENT_SECRET_NAME},
            }]}))
            server = Proc(
                "steward serve",
                [binary, "serve", "--data", str(data_dir), "--listen", f"{LOOPBACK}:0",
                 "--allow-insecure-destinations", "--integrations", str(integrations), *serve_args,
                 *(["--database", database] if database else [])],
                tmp_path / "server.stderr.log",
                extra_env=server_env,
            )
            procs.append(server)
            url = server.wait_ready()
            keys = {
                "operator": create_key(data_dir, "sdk-main", "sdk-operator", role="operator", database=database),
                "agent": create_key(data_dir, "sdk-main", "sdk-agent", database=database),
                "readonly": create_key(data_dir, "sdk-main", "sdk-readonly", scopes=["actions:read"], database=database),
                "other_operator": create_key(data_dir, "sdk-other", "sdk-other-operator", role="operator", database=database),
            }
            state = Steward(url=url, fixture_url=fixture_url, data_dir=data_dir,
                            server_log=server.log_path, keys=keys)
            yield state
            for client in state.clients:
                client.close()
        finally:
            for proc in reversed(procs):
                proc.stop()


@pytest.fixture(scope="session")
def operator(steward: Steward) -> anlyon.Client:
    return steward.client(steward.keys["operator"])


@pytest.fixture(scope="session")
def agent(steward: Steward) -> anlyon.Client:
    return steward.client(steward.keys["agent"])


@pytest.fixture(scope="session")
def readonly(steward: Steward) -> anlyon.Client:
    return steward.client(steward.keys["readonly"])


@pytest.fixture(scope="session")
def other_operator(steward: Steward) -> anlyon.Client:
    return steward.client(steward.keys["other_operator"])


@pytest.fixture(scope="session")
def stripe_secret(steward: Steward, operator: anlyon.Client) -> str:
    """The adapter's credential, vaulted through the SDK, allowed only to the fixture."""
    operator.secrets.put(
        STRIPE_SECRET_NAME,
        value=STRIPE_SECRET_VALUE,
        description="fixture test key",
        allowed_hosts=[steward.fixture_host],
    )
    return STRIPE_SECRET_NAME


@pytest.fixture(scope="session")
def refund_action(steward: Steward, operator: anlyon.Client, stripe_secret: str) -> dict[str, Any]:
    """The `stripe.refund` adapter action every invoke test uses."""
    created = operator.actions.create(
        name="refund-payment",
        description="Refund a payment through the fixture",
        adapter={
            "type": "stripe.refund",
            "config": {"account": "acct_1", "mode": "test", "currency": "usd",
                       "baseUrl": steward.fixture_url},
            "credentialSecret": stripe_secret,
        },
    )
    return created.data


@pytest.fixture
def faults(steward: Steward) -> Any:
    """Arms fixture faults for one test and always disarms them afterwards."""
    steward.clear_faults()
    yield steward
    steward.clear_faults()
