"""The task inbox part of the store contract (:class:`~coordinator.store.contract.inbox.
InboxStore`), run against SQLite and PostgreSQL: rows handed over oldest first and in
batches, those taken deleted and those refused kept with their reasons, an ingester that
fails leaving its rows pending, two ingesters never handed the same row, rejected rows paged
and deleted (pending ones never), and the commit of an insert waking the listener. SQLite's
inbox is always empty.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest

from coordinator.store.base import Store
from coordinator.store.contract.inbox import InboxRow
from coordinator.store.postgres import PostgresStore
from devharness.waiting import wait_until


class Refused(Exception):
    """The ingester failing mid-batch."""


@pytest.fixture
async def producer(store_url: str) -> AsyncIterator[asyncpg.Connection | None]:
    """A producer's connection to the store's database; ``None`` for SQLite."""
    if not store_url.startswith("postgres"):
        yield None
        return
    conn = await asyncpg.connect(store_url)
    try:
        yield conn
    finally:
        await conn.close()


async def insert(producer: asyncpg.Connection, *task_ids: str) -> None:
    async with producer.transaction():
        for task_id in task_ids:
            await producer.execute(
                "INSERT INTO task_inbox (task_id, client_id, definition) VALUES ($1, $2, $3)",
                task_id,
                f"client-{task_id}",
                f'{{"for": "{task_id}"}}',
            )


async def taking_all(rows: Sequence[InboxRow]) -> list[str | None]:
    return [None for _ in rows]


async def test_sqlite_s_inbox_is_empty(store: Store, producer: asyncpg.Connection | None) -> None:
    if producer is not None:
        pytest.skip("PostgreSQL has an inbox")
    assert await store.ingest_inbox(10, taking_all) == 0
    assert await store.rejected_inbox_rows(limit=10, after=None) == []
    assert await store.count_rejected_inbox_rows() == 0
    assert not await store.delete_inbox_row(1)
    await store.listen_inbox(lambda: None)


@pytest.fixture
async def pg(store: Store, producer: asyncpg.Connection | None) -> asyncpg.Connection:
    if producer is None:
        pytest.skip("SQLite has no inbox")
    assert isinstance(store, PostgresStore)
    return producer


async def test_rows_are_taken_oldest_first_and_refused_ones_kept_with_their_reason(
    store: Store, pg: asyncpg.Connection
) -> None:
    await insert(pg, "a", "b", "c")
    handed: list[InboxRow] = []

    async def ingest(rows: Sequence[InboxRow]) -> list[str | None]:
        handed.extend(rows)
        return [None, "b is bad"][: len(rows)]

    assert await store.ingest_inbox(2, ingest) == 2
    assert [(r.task_id, r.client_id, r.definition, r.reason) for r in handed] == [
        ("a", "client-a", '{"for": "a"}', None),
        ("b", "client-b", '{"for": "b"}', None),
    ]
    assert handed[0].id < handed[1].id and handed[0].created > 0
    rejected = await store.rejected_inbox_rows(limit=10, after=None)
    assert [(r.id, r.task_id, r.reason) for r in rejected] == [(handed[1].id, "b", "b is bad")]
    assert await store.count_rejected_inbox_rows() == 1

    handed.clear()
    assert await store.ingest_inbox(2, taking_all) == 1  # only c is pending: b is not again
    assert await store.ingest_inbox(2, taking_all) == 0
    left = await pg.fetch("SELECT task_id, state FROM task_inbox ORDER BY id")
    assert [(row["task_id"], row["state"]) for row in left] == [("b", "rejected")]


async def test_an_ingester_that_fails_leaves_its_rows_pending(
    store: Store, pg: asyncpg.Connection
) -> None:
    await insert(pg, "a", "b")

    async def failing(rows: Sequence[InboxRow]) -> list[str | None]:
        raise Refused

    with pytest.raises(Refused):
        await store.ingest_inbox(10, failing)
    handed: list[str] = []

    async def ingest(rows: Sequence[InboxRow]) -> list[str | None]:
        handed.extend(row.task_id for row in rows)
        return [None for _ in rows]

    assert await store.ingest_inbox(10, ingest) == 2
    assert handed == ["a", "b"]


async def test_two_ingesters_are_never_handed_the_same_row(
    store: Store, pg: asyncpg.Connection, store_url: str
) -> None:
    await insert(pg, "a", "b", "c", "d")
    other = PostgresStore(store_url)
    await other.open()
    try:
        holding = asyncio.Event()
        release = asyncio.Event()
        first: list[str] = []

        async def slow(rows: Sequence[InboxRow]) -> list[str | None]:
            first.extend(row.task_id for row in rows)
            holding.set()
            await release.wait()
            return [None for _ in rows]

        slow_pass = asyncio.create_task(store.ingest_inbox(2, slow))
        await asyncio.wait_for(holding.wait(), 10)
        second: list[str] = []

        async def quick(rows: Sequence[InboxRow]) -> list[str | None]:
            second.extend(row.task_id for row in rows)
            return [None for _ in rows]

        assert await other.ingest_inbox(10, quick) == 2
        release.set()
        assert await slow_pass == 2
        assert (first, second) == (["a", "b"], ["c", "d"])
    finally:
        await other.close()


async def test_rejected_rows_are_paged_by_id_and_only_they_are_deleted(
    store: Store, pg: asyncpg.Connection
) -> None:
    await insert(pg, "a", "b", "c")

    async def refusing(rows: Sequence[InboxRow]) -> list[str | None]:
        return [f"no {row.task_id}" for row in rows]

    assert await store.ingest_inbox(10, refusing) == 3
    await insert(pg, "pending")
    page = await store.rejected_inbox_rows(limit=2, after=None)
    assert [row.task_id for row in page] == ["a", "b"]
    rest = await store.rejected_inbox_rows(limit=2, after=page[-1].id)
    assert [row.task_id for row in rest] == ["c"]
    pending_id = await pg.fetchval("SELECT id FROM task_inbox WHERE task_id = 'pending'")
    assert not await store.delete_inbox_row(pending_id)
    assert await store.delete_inbox_row(page[0].id)
    assert not await store.delete_inbox_row(page[0].id)
    assert [row.task_id for row in await store.rejected_inbox_rows(limit=10, after=None)] == [
        "b",
        "c",
    ]
    assert await store.count_rejected_inbox_rows() == 2
    assert await pg.fetchval("SELECT count(*) FROM task_inbox WHERE state = 'pending'") == 1


async def test_a_committed_insert_wakes_the_listener(store: Store, pg: asyncpg.Connection) -> None:
    woken: list[None] = []
    await store.listen_inbox(lambda: woken.append(None))
    async with pg.transaction():
        await pg.execute(
            "INSERT INTO task_inbox (task_id, client_id, definition) VALUES ('x', 'c', '{}')"
        )
    await wait_until(lambda: bool(woken), within=10, what="the listener woken")
