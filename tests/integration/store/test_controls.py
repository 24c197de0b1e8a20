"""The task-queue controls part of the store contract
(:class:`~coordinator.store.contract.controls.QueueControlStore`): a queue's defaults on both
drivers, and PostgreSQL's claim lock, held across replicas and released however its holder
ends.
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from coordinator.domain.queue_controls import Limits, Pause, QueueDefaults
from coordinator.domain.task_queues import TaskQueue
from coordinator.store import postgres
from coordinator.store.base import Store
from coordinator.store.postgres import PostgresStore


async def test_defaults_set_only_what_they_name_beside_pause_and_limits(store: Store) -> None:
    queue, other = TaskQueue("prov", "defaults"), TaskQueue("prov", "untouched")
    set_all = frozenset({"claimTimeout", "completedTTL", "failedTTL"})
    made = await store.default_task_queue(
        queue,
        QueueDefaults(claim_timeout_s=60, completed_ttl_s=3600, failed_ttl_s=86_400),
        named=set_all,
    )
    assert made.defaults == QueueDefaults(
        claim_timeout_s=60, completed_ttl_s=3600, failed_ttl_s=86_400
    )
    assert not made.restricted  # defaults neither pause nor limit claims
    await store.limit_task_queue(queue, Limits(max_running=3), named=frozenset({"maxRunning"}))
    paused = await store.pause_task_queue(queue, Pause(since=1, reason="r"))
    assert paused.defaults.completed_ttl_s == 3600 and paused.limits.max_running == 3
    # a default not named keeps its value; one named as None goes back to the coordinator's
    changed = await store.default_task_queue(
        queue, QueueDefaults(completed_ttl_s=None), named=frozenset({"completedTTL"})
    )
    assert changed.defaults == QueueDefaults(claim_timeout_s=60, failed_ttl_s=86_400)
    assert (await store.queue_controls_of(queue)).defaults == changed.defaults
    assert (await store.queue_controls_of(other)).defaults == QueueDefaults()
    # the reload lists a queue with defaults only, and forgets it once it has none
    await store.pause_task_queue(queue, None)
    await store.limit_task_queue(queue, Limits(), named=frozenset({"maxRunning"}))
    assert [c.task_queue for c in await store.queue_controls()] == [queue]
    await store.default_task_queue(queue, QueueDefaults(), named=set_all)
    assert await store.queue_controls() == []


async def _advisory_locks(url: str, queue: TaskQueue) -> int:
    """Sessions holding ``queue``'s claim lock (its two keys: other tests on the server take
    advisory locks of their own meanwhile)."""
    conn = await asyncpg.connect(url)
    try:
        held = await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2"
            " AND classid::bigint = $1 AND objid::bigint = $2",
            postgres._QUEUE_LOCK_SPACE,
            postgres._queue_lock_key(queue) & 0xFFFFFFFF,
        )
        return int(held)
    finally:
        await conn.close()


async def test_a_queue_lock_is_released_however_its_holder_ends(
    postgres_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pool does not reset released connections (no pg_advisory_unlock_all): a lock whose
    # holder failed, or was cancelled while waiting for it, must not stay with a pooled session.
    queue = TaskQueue("prov", f"lock-{uuid.uuid4().hex[:8]}")
    one, two = (PostgresStore(postgres_schema_url, max_size=1) for _ in range(2))
    await one.open()
    await two.open()
    try:
        with pytest.raises(RuntimeError):
            async with one.queue_lock(queue):
                raise RuntimeError("the body failed")
        assert await _advisory_locks(postgres_schema_url, queue) == 0

        async def take(store: PostgresStore) -> None:
            async with store.queue_lock(queue):
                pass

        async with one.queue_lock(queue):
            assert await _advisory_locks(postgres_schema_url, queue) == 1  # the count sees it
            waiting = asyncio.create_task(take(two))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # held across replicas
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        async with asyncio.timeout(5):
            await take(two)
            await take(one)
        assert await _advisory_locks(postgres_schema_url, queue) == 0

        # an unlock that fails leaves the lock with its session, which is then closed
        failing = postgres._positional("SELECT CAST(:space AS INTEGER) / 0 + CAST(:key AS INTEGER)")
        with monkeypatch.context() as patch:
            patch.setitem(postgres._Q, "unlock_task_queue", failing)
            with pytest.raises(asyncpg.DivisionByZeroError):
                await take(one)
        assert await _advisory_locks(postgres_schema_url, queue) == 0
        async with asyncio.timeout(5):
            await take(two)
    finally:
        await one.close()
        await two.close()
