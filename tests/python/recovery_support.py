"""Helpers for the steward-recovery tests (test_recovery_*.py): a PostgreSQL database per test
run, created on the local server and dropped afterwards, the way the store's conformance suite
does it (STEWARD_TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/postgres)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

TEST_DATABASE_URL_DEFAULT = "postgres://postgres@127.0.0.1:5432/postgres"


def admin_url() -> str:
    return os.environ.get("STEWARD_TEST_DATABASE_URL", TEST_DATABASE_URL_DEFAULT)


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new database's connection string; the database is dropped on exit. An unreachable
    PostgreSQL fails the test: it is never skipped."""
    name = f"steward_pyrec_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    params = conninfo_to_dict(admin_url())
    params["dbname"] = name
    try:
        yield make_conninfo(**params)
    finally:
        with psycopg.connect(admin_url(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
