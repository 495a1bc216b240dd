"""One suite for both Python journals (SQLite on stdlib sqlite3, PostgreSQL on psycopg 3), the
checks of the Rust journal conformance suite (crates/steward-client/src/journal/conformance.rs),
plus what only the Python journals offer: joining the application's own transaction."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from recovery_support import fresh_database
from steward_recovery import (
    InvocationStatus,
    KeyConflict,
    LocalState,
    NotFound,
    Operation,
    PostgresJournal,
    SqliteJournal,
    Stale,
    Storage,
    TransactionState,
)

CONCURRENT_BEGINS = 16
_counter = iter(range(1, 1_000_000))


def sample(key: str, input: object) -> Operation:
    n = next(_counter)
    return Operation.intended("test", "refund", key, input, id=f"op_conformance{n:08d}",
                              now=1_000 + n)


class Backend:
    """Fresh journals of one kind, each on a connection of its own to one database."""

    def __init__(self, name: str, connect: Callable[[], object], make: Callable[[object], object]):
        self.name, self._connect, self._make = name, connect, make

    def connection(self) -> object:
        return self._connect()

    def journal(self, conn: object | None = None) -> object:
        return self._make(conn if conn is not None else self._connect())


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        path = tmp_path / "app.db"
        yield Backend("sqlite", lambda: sqlite3.connect(path, timeout=5.0, check_same_thread=False),
                      SqliteJournal)
        return
    with fresh_database() as url:
        conns: list[psycopg.Connection] = []

        def connect() -> psycopg.Connection:
            conns.append(psycopg.connect(url))
            return conns[-1]

        yield Backend("postgres", connect, PostgresJournal)
        for c in conns:
            c.close()


def test_begin_is_idempotent_per_key_and_input(backend: Backend) -> None:
    journal = backend.journal()
    first = sample("order-1", {"amount": 5, "pi": "pi_1"})
    assert journal.begin(first).created
    again = journal.begin(sample("order-1", {"pi": "pi_1", "amount": 5}))
    assert not again.created and again.operation == first
    with pytest.raises(KeyConflict) as conflict:
        journal.begin(sample("order-1", {"amount": 6, "pi": "pi_1"}))
    assert conflict.value.existing == first.id
    assert journal.all() == [first]


def test_keys_are_scoped_to_environment_and_action(backend: Backend) -> None:
    journal = backend.journal()
    a = sample("order-1", {"amount": 5})
    b = sample("order-1", {"amount": 5}).evolve(action="notify")
    c = sample("order-1", {"amount": 5}).evolve(environment="live")
    assert all(journal.begin(op).created for op in (a, b, c))
    assert len(journal.all()) == 3


def test_save_compares_and_sets_the_version(backend: Backend) -> None:
    journal = backend.journal()
    op = sample("order-2", {"amount": 5})
    journal.begin(op)
    submitted = op.evolve(state=LocalState.SUBMITTED, attempt_count=1)
    saved = journal.save(submitted)
    assert saved.version == 1 and journal.get(op.id) == saved
    with pytest.raises(Stale):
        journal.save(submitted.evolve(state=LocalState.FAILED))
    assert journal.get(op.id) == saved
    missing = sample("nowhere", {})
    with pytest.raises(NotFound):
        journal.save(missing)
    assert journal.get(missing.id) is None


def test_every_field_round_trips(backend: Backend) -> None:
    journal = backend.journal()
    op = sample("order-3", {"amount": 5, "nested": {"a": [1, 2]}}).evolve(retry_of="inv_prior")
    journal.begin(op)
    op = op.evolve(
        state=LocalState.UNKNOWN, invocation_id="inv_1", effect_id="eff_1", approval_id="apr_1",
        server_status=InvocationStatus.UNKNOWN,
        server_record={"id": "inv_1", "status": "unknown"}, result={"note": "ünïcode"},
        last_error="why", assignee="reconciliation-queue", attempt_count=3, updated_at=99_999,
    )
    saved = journal.save(op)
    assert saved == op.evolve(version=1, updated_at=99_999)
    assert journal.get(op.id) == saved


def test_unfinished_excludes_only_continued_oldest_first(backend: Backend) -> None:
    journal = backend.journal()
    ids = []
    for i, state in enumerate(LocalState):
        op = sample(f"order-state-{i}", {"i": i})
        journal.begin(op)
        journal.save(op.evolve(state=state))
        if state is not LocalState.CONTINUED:
            ids.append(op.id)
    assert [o.id for o in journal.unfinished()] == ids
    assert len(journal.all()) == len(LocalState)


def test_concurrent_begins_of_one_key_make_one_operation(backend: Backend) -> None:
    journals = [backend.journal() for _ in range(CONCURRENT_BEGINS)]
    ids: list[str] = []
    barrier = threading.Barrier(CONCURRENT_BEGINS)

    def begin(journal: object) -> None:
        barrier.wait()
        ids.append(journal.begin(sample("order-race", {"amount": 7})).operation.id)

    threads = [threading.Thread(target=begin, args=(j,)) for j in journals]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == CONCURRENT_BEGINS and len(set(ids)) == 1, ids
    assert len(journals[0].all()) == 1


def _app_table(conn: object) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS app_orders (order_id TEXT PRIMARY KEY)")
    conn.commit()


def test_begin_joins_the_applications_transaction_and_rolls_back_with_it(backend: Backend) -> None:
    conn = backend.connection()
    journal = backend.journal(conn)
    _app_table(conn)
    other = backend.journal()  # another connection: sees only what is committed
    reader = other.connection
    # Committed together.
    conn.execute("INSERT INTO app_orders (order_id) VALUES ('o-1')")
    kept = journal.begin(sample("refund:o-1", {"amount": 1}), join=True).operation
    conn.commit()
    assert other.get(kept.id) == kept
    assert reader.execute("SELECT count(*) FROM app_orders WHERE order_id = 'o-1'").fetchone()[0] == 1
    reader.commit()
    # Rolled back together: neither the row nor the intent exists anywhere.
    conn.execute("INSERT INTO app_orders (order_id) VALUES ('o-2')")
    dropped = journal.begin(sample("refund:o-2", {"amount": 2}), join=True).operation
    conn.rollback()
    assert other.get(dropped.id) is None and journal.get(dropped.id) is None
    assert reader.execute("SELECT count(*) FROM app_orders WHERE order_id = 'o-2'").fetchone()[0] == 0
    reader.commit()
    assert [o.id for o in other.all()] == [kept.id]


def test_the_journal_never_commits_the_applications_open_transaction(backend: Backend) -> None:
    conn = backend.connection()
    journal = backend.journal(conn)
    _app_table(conn)
    conn.execute("INSERT INTO app_orders (order_id) VALUES ('o-3')")
    with pytest.raises(TransactionState):
        journal.begin(sample("refund:o-3", {"amount": 3}))
    op = journal.begin(sample("refund:o-3", {"amount": 3}), join=True).operation
    # Saving (what run does before it sends) refuses while the intent is uncommitted.
    with pytest.raises(TransactionState):
        journal.save(op.evolve(state=LocalState.SUBMITTED))
    conn.rollback()
    with pytest.raises(TransactionState):
        journal.begin(sample("refund:o-4", {"amount": 4}), join=True)
    assert journal.all() == []


@pytest.mark.parametrize("rust_file,python_module", [
    ("sqlite.rs", "steward_recovery.journal.sqlite"),
    ("postgres.rs", "steward_recovery.journal.postgres"),
])
def test_the_python_tables_are_the_rust_journals_tables(rust_file: str, python_module: str) -> None:
    """One table for both languages: a Rust tool reads a Python journal (steward chaos does)."""
    import importlib
    import re

    from conftest import REPO

    source = (REPO / "crates" / "steward-client" / "src" / "journal" / rust_file).read_text()
    rust = re.search(r'const SCHEMA: &str = "(.*?)";', source, re.S).group(1)
    python = ";".join(importlib.import_module(python_module).SCHEMA)

    def normal(ddl: str) -> list[str]:
        return [" ".join(s.split()) for s in ddl.split(";") if s.strip()]

    assert normal(python) == normal(rust)


def test_a_failing_database_is_a_storage_error(backend: Backend) -> None:
    conn = backend.connection()
    journal = backend.journal(conn)
    op = sample("order-gone", {"amount": 1})
    journal.begin(op)
    conn.close()
    for call in (lambda: journal.get(op.id), lambda: journal.save(op), journal.unfinished,
                 lambda: journal.begin(sample("order-gone-2", {"amount": 1}))):
        with pytest.raises(Storage):
            call()
