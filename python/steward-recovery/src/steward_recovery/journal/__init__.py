"""Journals in the application's own database: :class:`SqliteJournal` (stdlib ``sqlite3``) and
:class:`PostgresJournal` (psycopg 3, imported only when used)."""

from .base import (
    Begun,
    Corrupt,
    Journal,
    JournalError,
    KeyConflict,
    NotFound,
    Stale,
    Storage,
    TransactionState,
)
from .sqlite import SqliteJournal


def __getattr__(name: str):  # PostgresJournal without importing psycopg for SQLite users
    if name == "PostgresJournal":
        from .postgres import PostgresJournal

        return PostgresJournal
    raise AttributeError(name)


__all__ = [
    "Begun", "Corrupt", "Journal", "JournalError", "KeyConflict", "NotFound",
    "PostgresJournal", "SqliteJournal", "Stale", "Storage", "TransactionState",
]
