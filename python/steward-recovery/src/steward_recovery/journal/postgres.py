"""The journal in the application's PostgreSQL database, on the application's own psycopg 3
connection. The table is the Rust ``PostgresJournal``'s (same columns, same encodings).

``begin(..., join=True)`` writes into the transaction the caller has open on that connection,
so the application's own rows and the intent commit together or not at all; every other write
runs in a transaction of the journal's own and refuses to start inside one of the caller's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..operation import Operation
from ..state import LocalState
from .base import (
    COLUMNS,
    MUTABLE,
    Begun,
    KeyConflict,
    NotFound,
    Stale,
    Storage,
    TransactionState,
    decode,
    encode,
)

#: The same DDL as crates/steward-client/src/journal/postgres.rs.
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
    attempt_count     BIGINT NOT NULL,
    version           BIGINT NOT NULL,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    UNIQUE (environment, action, operation_key)
)""",
    """CREATE INDEX IF NOT EXISTS steward_operations_unfinished
    ON steward_operations (state, created_at)""",
)

_SELECT = f"SELECT {', '.join(COLUMNS)} FROM steward_operations"
_INSERT = (
    f"INSERT INTO steward_operations ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join(f'%({c})s' for c in COLUMNS)}) "
    "ON CONFLICT (environment, action, operation_key) DO NOTHING"
)
_UPDATE = (
    f"UPDATE steward_operations SET {', '.join(f'{c} = %({c})s' for c in MUTABLE)} "
    "WHERE id = %(id)s AND version = %(expected)s"
)


class PostgresJournal:
    """A journal on the application's ``psycopg.Connection`` (autocommit or not)."""

    def __init__(self, conn: Any, *, create_schema: bool = True) -> None:
        import psycopg

        self._psycopg = psycopg
        self._conn = conn
        self._lock = threading.RLock()
        if create_schema:
            with self._own() as cur:
                for statement in SCHEMA:
                    cur.execute(statement)

    @property
    def connection(self) -> Any:
        return self._conn

    def _in_transaction(self) -> bool:
        status = self._conn.info.transaction_status
        idle = self._psycopg.pq.TransactionStatus.IDLE
        if status not in (idle, self._psycopg.pq.TransactionStatus.INTRANS):
            raise Storage(f"the connection is not usable ({status.name})")
        return status != idle

    @contextmanager
    def _own(self) -> Iterator[Any]:
        """A transaction of the journal's own, committed on exit (durable on return)."""
        with self._lock:
            if self._in_transaction():
                raise TransactionState(
                    "the connection has an open transaction: commit it before the journal "
                    "writes on its own (or pass join=True to begin)"
                )
            try:
                with self._conn.transaction(), self._conn.cursor() as cur:
                    yield cur
            except self._psycopg.Error as e:
                raise Storage(f"the journal's transaction failed: {e}") from e

    @contextmanager
    def _joined(self) -> Iterator[Any]:
        with self._lock:
            if not self._in_transaction():
                raise TransactionState(
                    "join=True writes into the caller's open transaction, and there is none "
                    "(use `with conn.transaction():` around the application's rows and begin)"
                )
            try:
                with self._conn.cursor() as cur:
                    yield cur
            except self._psycopg.Error as e:
                raise Storage(f"writing into the caller's transaction failed: {e}") from e

    @contextmanager
    def _read(self) -> Iterator[Any]:
        """Inside the caller's transaction when one is open; otherwise in a short one, so a read
        never leaves an implicit transaction open behind the application's back."""
        with self._lock:
            try:
                if self._in_transaction():
                    with self._conn.cursor() as cur:
                        yield cur
                else:
                    with self._conn.transaction(), self._conn.cursor() as cur:
                        yield cur
            except self._psycopg.Error as e:
                raise Storage(f"reading operations failed: {e}") from e

    @staticmethod
    def _rows(cur: Any, where: str, args: Any = None) -> list[Operation]:
        cur.execute(f"{_SELECT} {where}", args)
        return [decode(tuple(r)) for r in cur.fetchall()]

    def begin(self, intended: Operation, *, join: bool = False) -> Begun:
        assert intended.state is LocalState.INTENDED, f"begin records intents only ({intended.id})"
        with self._joined() if join else self._own() as cur:
            cur.execute(_INSERT, encode(intended))
            if cur.rowcount == 1:
                return Begun(intended, created=True)
            existing = self._rows(
                cur,
                "WHERE environment = %s AND action = %s AND operation_key = %s",
                (intended.environment, intended.action, intended.operation_key),
            )
        assert existing, f"{intended.operation_key}: the insert conflicted and no row is there"
        if existing[0].input_fingerprint != intended.input_fingerprint:
            raise KeyConflict(intended.action, intended.operation_key, existing[0].id)
        return Begun(existing[0], created=False)

    def save(self, op: Operation) -> Operation:
        saved = op.evolve(version=op.version + 1, updated_at=op.updated_at)
        with self._own() as cur:
            row = encode(saved)
            row["expected"] = op.version
            cur.execute(_UPDATE, row)
            if cur.rowcount != 1:
                cur.execute("SELECT version FROM steward_operations WHERE id = %s", (op.id,))
                raise Stale(op.id, op.version) if cur.fetchone() else NotFound(op.id)
        return saved

    def get(self, id: str) -> Operation | None:
        with self._read() as cur:
            found = self._rows(cur, "WHERE id = %s", (id,))
        return found[0] if found else None

    def unfinished(self) -> list[Operation]:
        with self._read() as cur:
            return self._rows(cur, "WHERE state <> 'continued' ORDER BY created_at, id")

    def all(self) -> list[Operation]:
        with self._read() as cur:
            return self._rows(cur, "ORDER BY created_at, id")
