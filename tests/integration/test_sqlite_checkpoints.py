"""The SQLite store's WAL checkpoints on a thread of their own: pages written are copied into the
database file beside the store's connection, and closing the store stops them."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from coordinator.store.sqlite import SQLiteStore
from coordinator.store.sqlite_checkpoints import WalCheckpoints
from devharness.waiting import wait_until
from tests.fixtures.records import new_record


def checkpoints(store: SQLiteStore) -> WalCheckpoints:
    assert store._checkpoints is not None
    return store._checkpoints


def wal_pages(path: Path) -> int:
    """How many pages the WAL file at ``path`` holds, from its size (a 32-byte header, then
    frames of a 24-byte header and a page each)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        page_size: int = conn.execute("PRAGMA page_size").fetchone()[0]
    return (path.with_name(path.name + "-wal").stat().st_size - 32) // (24 + page_size)


async def test_pages_written_are_copied_to_the_database_file_beside_the_store(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    await store.open()
    try:
        await store.insert_many([new_record(f"task-{n}") for n in range(20)])
        # Fewer pages than SQLite's own checkpoint waits for: only the thread copies them.
        assert wal_pages(tmp_path / "store.db") < 1000
        await wait_until(
            lambda: checkpoints(store).backfilled > 0,
            within=10.0,
            what="a checkpoint that copied the inserts' pages",
        )
    finally:
        await store.close()


async def test_closing_the_store_stops_its_checkpoints(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    await store.open()
    thread = checkpoints(store)
    await store.insert_many([new_record("task-0")])
    await store.close()
    assert not thread._thread.is_alive()
    with pytest.raises(sqlite3.ProgrammingError):  # its connection is closed
        thread._conn.execute("SELECT 1")
    assert not (tmp_path / "store.db-wal").exists()
