"""A SQLite database another process keeps locked past the busy timeout is an outage: the API
answers 503 with ``Retry-After`` and the store named, ``/__heartbeat__`` says so too, the
background actors skip their passes without a traceback, and the log has one line when the
outage begins and one when it ends. (A PostgreSQL restart: tests/e2e/test_store_outage.py.)

The lock is a real one: a second connection to the file holds ``BEGIN EXCLUSIVE``. The busy
timeout is shortened so that each refused call waits 0.2 s, not 10.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import slugid

from coordinator.resolvers.runner import Actor, Runner
from coordinator.store import sqlite as sqlite_store
from coordinator.store.sqlite import SQLiteStore
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.coordinator import StartCoordinator

OUTAGE_LOGGER = "coordinator.store.outages"


@pytest.fixture(autouse=True)
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_MS", 200)


@pytest.fixture
def captured(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO)
    return caplog


def outage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == OUTAGE_LOGGER]


def assert_one_outage_and_no_traceback(caplog: pytest.LogCaptureFixture, store: str) -> None:
    lines = outage_lines(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith(
        f"store unavailable, calls answered 503 until it is back store={store}"
    )
    assert "database is locked" in lines[0]
    assert lines[1].startswith(f"store available again store={store} ")
    assert [
        r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR
    ] == []


@pytest.fixture
def lock(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """A connection of "another process" to the coordinator's file, to take its write lock
    with; the lock, if still held, goes with it at the end."""
    conn = sqlite3.connect(tmp_path / "coordinator.db", isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


async def answer(
    session: aiohttp.ClientSession, method: str, url: str, body: Any = None
) -> tuple[int, str | None, Any]:
    """Status, ``Retry-After`` and JSON body of one request."""
    async with session.request(method, url, json=body) as response:
        return response.status, response.headers.get("Retry-After"), await response.json()


async def test_a_locked_database_is_a_503_with_the_store_named_until_it_is_free(
    start_coordinator: StartCoordinator,
    lock: sqlite3.Connection,
    captured: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    c = await start_coordinator()
    store = f"sqlite://{tmp_path / 'coordinator.db'}"
    existing = await c.create()

    lock.execute("BEGIN EXCLUSIVE")
    created = await answer(c.session, "PUT", c.api + f"/task/{slugid.nice()}", task_definition())
    status = await answer(c.session, "GET", c.api + f"/task/{existing}/status")
    heartbeat = await answer(c.session, "GET", c.url + "/__heartbeat__")
    lock.execute("COMMIT")

    message = f"the store {store} is unavailable: OperationalError: database is locked"
    for code, retry_after, body in (created, status, heartbeat):
        assert (code, retry_after, body["code"]) == (503, "2", "ServiceUnavailable"), body
        assert body["message"] == f"{message}; retry later"

    async def heartbeat_ok() -> bool:
        return (await answer(c.session, "GET", c.url + "/__heartbeat__"))[0] == 200

    await wait_until(heartbeat_ok, within=10, what="the heartbeat once the lock is gone")
    assert (await c.call("GET", f"/task/{existing}/status")).status == 200
    await c.create()
    assert_one_outage_and_no_traceback(captured, store)


async def test_the_background_actors_skip_passes_while_the_store_is_locked(
    lock: sqlite3.Connection, captured: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "coordinator.db")
    await store.open()
    passes: list[int] = []

    async def probe() -> int:
        return len(await store.past_deadlines(0, 10))

    runner = Runner(
        [Actor(name="probe", run_once=probe, interval=0.01)],
        on_pass=lambda name, count: passes.append(count),
    )
    try:
        lock.execute("BEGIN EXCLUSIVE")
        runner.start()
        await wait_until(lambda: len(passes) >= 3, within=10, what="three passes while locked")
        lock.execute("COMMIT")
        done = len(passes)
        await wait_until(lambda: len(passes) > done + 1, within=10, what="passes once free")
    finally:
        await runner.stop()
        await store.close()

    assert_one_outage_and_no_traceback(captured, f"sqlite://{tmp_path / 'coordinator.db'}")
    assert "background pass failed" not in captured.text
