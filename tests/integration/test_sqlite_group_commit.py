"""Group commit in the SQLite store: calls waiting together share one transaction and one
fsync, each in its own savepoint, and no caller hears of a write before it is committed. The
request path's calls run their statements on the event loop and only their COMMIT on the
store thread; scans run wholly on the store thread.

The connection is held (a call on the store thread that waits on an event) while calls pile
up, so that they are waiting together when it is let go; the connection's statements are
recorded with a trace callback, with the thread each ran on.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest

from coordinator.store import sqlite_group_commit
from coordinator.store.sqlite import SQLiteStore
from coordinator.store.sqlite_group_commit import GroupCommit
from tests.fixtures.records import get, new_record


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "store.db")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def commits(store: SQLiteStore) -> GroupCommit:
    """The scheduler of the open store's connection."""
    assert store._commits is not None
    return store._commits


def record_statements(store: SQLiteStore, *, commit_delay: float = 0) -> list[str]:
    """The statements the store runs from now on; each COMMIT first sleeps ``commit_delay``,
    which widens the window in which a result handed out early would show."""
    statements: list[str] = []

    def trace(statement: str) -> None:
        statements.append(statement)
        if statement == "COMMIT":
            time.sleep(commit_delay)

    commits(store).connection.set_trace_callback(trace)
    return statements


def record_threads(store: SQLiteStore) -> list[tuple[str, str]]:
    """The statements the store runs from now on, each with the name of the thread it ran on
    (comments and whitespace left out of the statement)."""
    ran: list[tuple[str, str]] = []

    def trace(statement: str) -> None:
        text = " ".join(line for line in statement.splitlines() if not line.startswith("--"))
        ran.append((text.split()[0], threading.current_thread().name))

    commits(store).connection.set_trace_callback(trace)
    return ran


@pytest.fixture(autouse=True)
def groups_bounded_by_count_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the count bounds the groups of these tests: a loaded machine can take the time
    bound (a few milliseconds) over a handful of calls, which then commit twice."""
    monkeypatch.setattr(sqlite_group_commit, "GROUP_MAX_SECONDS", 60.0)


async def together(store: SQLiteStore, *calls: Awaitable[Any]) -> list[Any]:
    """Run the calls so that all of them wait for the connection at once; their outcomes,
    errors included, in order."""
    gate = threading.Event()
    holder = asyncio.ensure_future(store._run_alone(lambda conn: gate.wait()))
    await asyncio.sleep(0)  # the holder takes the connection to the store thread
    tasks = [asyncio.ensure_future(call) for call in calls]
    await asyncio.sleep(0)  # each task runs up to its store call, which queues it
    assert len(commits(store).waiting) == len(tasks)
    gate.set()
    await holder
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_calls_waiting_together_share_one_commit_and_each_get_their_own_result(
    store: SQLiteStore,
) -> None:
    existing = await store.insert(new_record("old"))
    assert existing is not None
    statements = record_statements(store)

    results = await together(
        store,
        *(store.insert(new_record(f"t{i}")) for i in range(5)),
        store.insert(new_record("old")),
        store.get("old"),
        store.compare_and_set(existing.replace(version=7)),
        store.states(["t0", "missing"]),
    )

    assert [result.task_id for result in results[:5]] == [f"t{i}" for i in range(5)]
    assert results[5:] == [None, existing, None, {"t0": "pending"}]
    assert statements.count("BEGIN IMMEDIATE") == 1
    assert statements.count("COMMIT") == 1
    assert statements.count("SAVEPOINT call") == 9


async def test_a_failing_call_rolls_back_only_itself_and_gets_its_own_error(
    store: SQLiteStore,
) -> None:
    statements = record_statements(store)

    def write_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE scratch (x)")
        raise ValueError("after a write")

    # a repeated dependency violates the edge table's key after the task row is written
    results = await together(
        store,
        store.insert(new_record("a")),
        store.insert(new_record("bad", dependencies=("dep", "dep"))),
        store._run(write_then_fail),
        store.insert(new_record("b")),
    )
    commits = statements.count("COMMIT")

    assert isinstance(results[1], sqlite3.IntegrityError)
    assert isinstance(results[2], ValueError)
    assert [result.task_id for result in (results[0], results[3])] == ["a", "b"]
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await store._run(lambda conn: conn.execute("SELECT * FROM scratch").fetchall())
    assert (await get(store, "a")).task_id == "a"
    assert (await get(store, "b")).task_id == "b"
    assert await store.get("bad") is None
    assert (await store.dependents("dep", limit=10, after=None)).items == []
    assert commits == 1


async def test_a_call_whose_error_ends_the_transaction_leaves_the_others_to_commit(
    store: SQLiteStore,
) -> None:
    # SQLite rolls the whole transaction back on some errors (a full disk, an I/O error)
    def fail_like_a_full_disk(conn: sqlite3.Connection) -> None:
        conn.execute("ROLLBACK")
        raise sqlite3.OperationalError("database or disk is full")

    results = await together(
        store,
        store.insert(new_record("a")),
        store._run(fail_like_a_full_disk),
        store.insert(new_record("b")),
    )

    assert isinstance(results[1], sqlite3.OperationalError)
    assert (await get(store, "a")).task_id == "a"
    assert (await get(store, "b")).task_id == "b"


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "batched"])
async def test_a_caller_hears_of_its_write_only_once_it_is_committed(
    store: SQLiteStore, tmp_path: Path, batched: bool
) -> None:
    record_statements(store, commit_delay=0.05)
    reader = sqlite3.connect(tmp_path / "store.db")

    async def insert_then_look(task_id: str) -> bool:
        assert await store.insert(new_record(task_id)) is not None
        query = "SELECT 1 FROM tasks WHERE task_id = ?"
        return reader.execute(query, (task_id,)).fetchone() is not None

    try:
        if batched:
            seen = await together(store, *(insert_then_look(f"t{i}") for i in range(5)))
        else:
            seen = [await insert_then_look("t")]
    finally:
        reader.close()

    assert seen == [True] * len(seen)


async def test_a_lone_failing_call_leaves_nothing_behind(store: SQLiteStore) -> None:
    statements = record_statements(store)

    # the task row is written before the repeated edge violates the edge table's key
    with pytest.raises(sqlite3.IntegrityError):
        await store.insert(new_record("bad", dependencies=("dep", "dep")))

    assert await store.get("bad") is None
    assert statements.count("BEGIN IMMEDIATE") == statements.count("COMMIT") == 2
    assert statements.count("ROLLBACK TO call") == 1


async def test_a_group_commit_is_bounded(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_group_commit, "GROUP_MAX_CALLS", 4)
    statements = record_statements(store)

    results = await together(store, *(store.insert(new_record(f"t{i}")) for i in range(10)))

    assert [result.task_id for result in results] == [f"t{i}" for i in range(10)]
    assert statements.count("COMMIT") == 3


async def test_the_request_path_runs_its_statements_on_the_event_loop_and_commits_off_it(
    store: SQLiteStore,
) -> None:
    existing = await store.insert(new_record("old"))
    assert existing is not None
    loop_thread = threading.current_thread().name
    ran = record_threads(store)

    await store.insert(new_record("t"))
    written = list(ran)
    ran.clear()
    assert await store.get("t") is not None
    read = list(ran)

    assert [verb for verb, _ in written] == [
        "BEGIN",
        "SAVEPOINT",
        "INSERT",
        "INSERT",
        "UPDATE",  # the group's count of unresolved tasks
        "RELEASE",
        "COMMIT",
    ]
    assert {thread for verb, thread in written if verb != "COMMIT"} == {loop_thread}
    assert written[-1][1].startswith("sqlite-store")
    # a transaction that wrote nothing commits where it ran: no fsync to wait for
    assert [verb for verb, _ in read] == ["BEGIN", "SAVEPOINT", "SELECT", "RELEASE", "COMMIT"]
    assert {thread for _, thread in read} == {loop_thread}


async def test_scans_run_on_the_store_thread_and_the_event_loop_goes_on_meanwhile(
    store: SQLiteStore,
) -> None:
    assert await store.insert(new_record("t")) is not None
    ran = record_threads(store)
    gate = threading.Event()

    def slow_scan(conn: sqlite3.Connection) -> int:
        gate.wait(timeout=10)
        return int(conn.execute("SELECT count(*) FROM tasks").fetchone()[0])

    scan = asyncio.ensure_future(store._run_scan(slow_scan))
    await asyncio.sleep(0)
    waiting = asyncio.ensure_future(store.get("t"))
    await asyncio.sleep(0)
    # here only because the loop runs while the scan holds the connection (the gate is shut)
    assert not scan.done() and not waiting.done()
    gate.set()

    assert await scan == 1
    assert (await waiting) is not None
    assert all(thread.startswith("sqlite-store") for _, thread in ran[:5])
    # the store thread may wait for another process's write lock, for its BEGIN only
    assert [verb for verb, _ in ran[:5]] == ["PRAGMA", "BEGIN", "PRAGMA", "SELECT", "COMMIT"]


async def test_another_process_holding_the_write_lock_does_not_stall_the_event_loop(
    store: SQLiteStore, tmp_path: Path
) -> None:
    """The event publisher's process deleting what the broker confirmed holds the file's
    write lock: a write waits for it on the store thread, the event loop goes on, and the write
    lands once the lock is free."""
    other = sqlite3.connect(tmp_path / "store.db", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    try:
        write = asyncio.ensure_future(store.insert(new_record("t")))
        ticks = 0
        while ticks < 20:  # the loop runs while the write waits for the lock
            await asyncio.sleep(0.001)
            ticks += 1
        assert not write.done()
    finally:
        other.execute("COMMIT")
        other.close()
    assert await write is not None
    assert (await get(store, "t")).task_id == "t"
