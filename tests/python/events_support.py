"""Helpers for the event stream and webhook tests: a Steward server of their own that can be
SIGKILLed and restarted on the same data directory, and a stream reader on a thread."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anlyon

from conftest import LOOPBACK, Proc, child_env, create_key, steward_bin

WAIT_S = 10.0


class Server:
    """`steward serve` on a data directory that outlives the process."""

    def __init__(self, data_dir: Path, logs: Path, args: list[str] | None = None,
                 database: str | None = None, name: str = "server") -> None:
        self.data_dir = data_dir
        self.logs = logs
        self.database = database
        self.name = name
        self.args = (args or []) + (["--database", database] if database else [])
        self.proc: Proc | None = None
        self.url = ""
        self.starts = 0

    def start(self) -> str:
        self.starts += 1
        self.proc = Proc(
            "steward serve",
            [str(steward_bin()), "serve", "--data", str(self.data_dir), "--listen", f"{LOOPBACK}:0",
             "--allow-insecure-destinations", "--reconcile-interval-ms", "0", *self.args],
            self.logs / f"{self.name}-{self.starts}.log",
        )
        self.url = self.proc.wait_ready()
        return self.url

    def sigkill(self) -> None:
        """SIGKILL: no shutdown, no flush, nothing sealed or delivered on the way out."""
        assert self.proc is not None
        os.kill(self.proc.popen.pid, signal.SIGKILL)
        self.proc.popen.wait(timeout=WAIT_S)
        self.proc.stop()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def key(self, env: str, name: str, *, role: str | None = None,
            scopes: list[str] | None = None) -> str:
        if self.database is None:
            return create_key(self.data_dir, env, name, role=role, scopes=scopes)
        args = [str(steward_bin()), "keys", "create", "--data", str(self.data_dir),
                "--database", self.database, "--env", env, "--name", name]
        args += ["--role", role] if role else []
        args += ["--scopes", ",".join(scopes)] if scopes else []
        done = subprocess.run(args, capture_output=True, env=child_env(), timeout=60,
                              stdin=subprocess.DEVNULL, check=True)
        return done.stdout.decode().strip()

    def client(self, key: str) -> anlyon.Client:
        return anlyon.Client(api_key=key, base_url=self.url)

    def log(self) -> str:
        assert self.proc is not None
        return self.proc.log_tail(20000)


@contextmanager
def server(tmp: Path, args: list[str] | None = None) -> Iterator[Server]:
    data = tmp / "data"
    data.mkdir()
    s = Server(data, tmp, args)
    s.start()
    try:
        yield s
    finally:
        s.stop()


class Reader:
    """Iterates `client.stream()` on a daemon thread into a queue (the SDK's iterator blocks)."""

    def __init__(self, client: anlyon.Client, cursor: str | None = None) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        self.error: BaseException | None = None
        self._client = client
        self._cursor = cursor
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._client.stream(cursor=self._cursor):
                self.events.put(event)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread
            self.error = error

    def take(self, count: int, timeout: float = WAIT_S) -> list[Any]:
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"got {len(out)} of {count} events: {out} (error: {self.error})")
            try:
                out.append(self.events.get(timeout=remaining))
            except queue.Empty:
                continue
        return out

    def quiet(self, seconds: float) -> list[Any]:
        """Whatever arrives within `seconds` (to show that nothing more does)."""
        time.sleep(seconds)
        out = []
        while not self.events.empty():
            out.append(self.events.get())
        return out

    def close(self) -> None:
        self._client.close()
