"""The journal in the application's SQLite database (stdlib ``sqlite3``), on the application's
own connection: WAL with ``synchronous=FULL``, so a committed transaction is fsync'd before it
returns. The table and its encodings are the Rust ``SqliteJournal``'s."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..operation import Operation
from ..state import LocalState
from .base import (
    COLUMNS,
    MUTABLE,
    Begun,
    JournalError,
    KeyConflict,
    NotFound,
    Stale,
    Storage,
    TransactionState,
    decode,
    encode,
)

#: How long a writer waits for another connection's lock, in milliseconds (the Rust journal's).
BUSY_TIMEOUT_MS = 5_000

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS steward_operations (
    id                TEXT PRIMARY KEY,
    environment       TEXT NOT NULL,
    action            TEXT NOT NULL,
    operation_key     TEXT NOT NULL,
    input             TEXT NOT NULL,
    input_fingerprint TEXT NOT NULL,
    idempotency_key   TEXT NOT NULL,
    retry_of          TEXT,
    state             TEXT NOT NULL,
    invocation_id     TEXT,
    effect_id         TEXT,
    approval_id       TEXT,
    server_status     TEXT,
    server_record     TEXT,
    result            TEXT,
    last_error        TEXT,
    assignee          TEXT,
    attempt_count     INTEGER NOT NULL,
    version           INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    UNIQUE (environment, action, operation_key)
)""",
    """CREATE INDEX IF NOT EXISTS steward_operations_unfinished
    ON steward_operations (state, created_at)""",
)

_SELECT = f"SELECT {', '.join(COLUMNS)} FROM steward_operations"
_INSERT = (
    f"INSERT INTO steward_operations ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join(':' + c for c in COLUMNS)})"
)
_UPDATE = (
    f"UPDATE steward_operations SET {', '.join(f'{c} = :{c}' for c in MUTABLE)} "
    "WHERE id = :id AND version = :expected"
)


class SqliteJournal:
    """A journal on the application's ``sqlite3.Connection``. Other tables of the application
    live in the same file; this one is ``steward_operations``.

    ``begin(..., join=True)`` writes into the caller's open transaction (the application's own
    rows and the intent commit together, or neither does); every other write runs in a
    transaction of the journal's own (``BEGIN IMMEDIATE`` ... ``COMMIT``) and refuses to start
    while the caller holds one open.
    """

    def __init__(self, conn: sqlite3.Connection, *, wal: bool = True) -> None:
        if conn.in_transaction:
            raise TransactionState("open the journal outside a transaction (it sets pragmas)")
        self._conn = conn
        self._lock = threading.RLock()
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if wal:
            (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            if str(mode).lower() != "wal":
                raise JournalError(f"enabling WAL: the database stays in {mode} mode")
        conn.execute("PRAGMA synchronous=FULL")
        with self._own():
            for statement in SCHEMA:
                conn.execute(statement)

    @classmethod
    def open(cls, path: str | Path) -> SqliteJournal:
        """Opens (and if needed creates) a journal in its own connection to ``path``."""
        return cls(sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000))

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def _in_transaction(self) -> bool:
        try:
            return self._conn.in_transaction
        except sqlite3.Error as e:
            raise Storage(f"the connection is not usable: {e}") from e

    @contextmanager
    def _own(self) -> Iterator[sqlite3.Connection]:
        """A write transaction of the journal's own, committed (and fsync'd) on exit."""
        with self._lock:
            if self._in_transaction():
                raise TransactionState(
                    "the connection has an open transaction: commit it before the journal "
                    "writes on its own (or pass join=True to begin)"
                )
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                except BaseException:
                    self._conn.rollback()
                    raise
                self._conn.commit()
            except sqlite3.Error as e:
                raise Storage(f"the journal's transaction failed: {e}") from e

    @contextmanager
    def _joined(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if not self._in_transaction():
                raise TransactionState(
                    "join=True writes into the caller's open transaction, and there is none "
                    "(execute BEGIN, or write the application's rows first)"
                )
            try:
                yield self._conn
            except sqlite3.Error as e:
                raise Storage(f"writing into the caller's transaction failed: {e}") from e

    def _select(self, where: str = "", args: dict | tuple = ()) -> list[Operation]:
        with self._lock:
            try:
                rows = self._conn.execute(f"{_SELECT} {where}", args).fetchall()
            except sqlite3.Error as e:
                raise Storage(f"reading operations failed: {e}") from e
        return [decode(tuple(r)) for r in rows]

    def begin(self, intended: Operation, *, join: bool = False) -> Begun:
        assert intended.state is LocalState.INTENDED, f"begin records intents only ({intended.id})"
        with self._joined() if join else self._own() as conn:
            existing = self._select(
                "WHERE environment = ? AND action = ? AND operation_key = ?",
                (intended.environment, intended.action, intended.operation_key),
            )
            if existing:
                if existing[0].input_fingerprint != intended.input_fingerprint:
                    raise KeyConflict(intended.action, intended.operation_key, existing[0].id)
                return Begun(existing[0], created=False)
            conn.execute(_INSERT, encode(intended))
        return Begun(intended, created=True)

    def save(self, op: Operation) -> Operation:
        saved = op.evolve(version=op.version + 1, updated_at=op.updated_at)
        with self._own() as conn:
            row = encode(saved)
            row["expected"] = op.version
            changed = conn.execute(_UPDATE, row).rowcount
            if changed != 1:
                found = conn.execute(
                    "SELECT version FROM steward_operations WHERE id = ?", (op.id,)
                ).fetchone()
                raise Stale(op.id, op.version) if found else NotFound(op.id)
        return saved

    def get(self, id: str) -> Operation | None:
        found = self._select("WHERE id = ?", (id,))
        return found[0] if found else None

    def unfinished(self) -> list[Operation]:
        return self._select("WHERE state <> 'continued' ORDER BY created_at, id")

    def all(self) -> list[Operation]:
        return self._select("ORDER BY created_at, id")
