"""Concurrency keys in the store contract
(:meth:`~coordinator.store.contract.dispatch.DispatchStore.claim_pending` with
``max_per_key``, :meth:`~coordinator.store.contract.controls.QueueControlStore.running_by_key`),
on SQLite and PostgreSQL alike: the keys served in turn and remembered across claims, each
within its limit, also under concurrent claims and across two stores on one PostgreSQL schema.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from coordinator.domain import lifecycle
from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.events import QueueEvent
from coordinator.domain.queue_controls import Limits
from coordinator.domain.records import TaskRecord, record_from_definition
from coordinator.domain.task_queues import TaskQueue
from coordinator.store.base import Store
from coordinator.store.postgres import PostgresStore
from tests.fixtures.records import DAY, NOW, TIMING, apply, claimed, definition, get

QUEUE = TaskQueue("prov", "wt")


def keyed(task_id: str, key: str | None, *, priority: str = "lowest", now: int = NOW) -> TaskRecord:
    body = {**definition(), "priority": priority}
    if key is not None:
        body["concurrencyKey"] = key
    return lifecycle.create(record_from_definition(task_id, body), now=now).record


async def backlogs(store: Store, keys: Sequence[str | None], per_key: int) -> None:
    """``per_key`` pending tasks of each key; all of the first key's visible before the
    second's, and so on (a backlog a claim in visible order would serve first)."""
    now = NOW - len(keys) * per_key
    for key in keys:
        for n in range(per_key):
            assert await store.insert(keyed(f"{key or 'none'}-{n:02d}", key, now=now)) is not None
            now += 1


def claim_all(records: Sequence[TaskRecord]) -> list[tuple[TaskRecord, Sequence[QueueEvent]]]:
    return [(claimed(record).record, ()) for record in records]


async def claim_keyed(
    store: Store,
    *,
    limit: int,
    max_per_key: int,
    pick: Callable[[Mapping[int, int]], Mapping[int, int]] | None = None,
) -> list[TaskRecord]:
    async with store.queue_lock(QUEUE):
        return await store.claim_pending(
            QUEUE, now=NOW, limit=limit, claim=claim_all, pick=pick, max_per_key=max_per_key
        )


def keys_of(records: Sequence[TaskRecord]) -> list[str | None]:
    return [record.concurrency_key for record in records]


async def finish(store: Store, records: Sequence[TaskRecord]) -> None:
    for record in records:
        await apply(
            store,
            lifecycle.report(
                await get(store, record.task_id),
                run_id=0,
                state="completed",
                reason="completed",
                now=NOW,
                timing=TIMING,
            ),
        )


async def test_keys_take_turns_claim_after_claim_whatever_their_backlogs(store: Store) -> None:
    await backlogs(store, ["a", "b", "c"], 10)
    # runs that finish at once: one key's backlog, visible first, still gets only its turn
    order = []
    for _ in range(6):
        [record] = await claim_keyed(store, limit=1, max_per_key=2)
        order.append(record.concurrency_key)
        await finish(store, [record])
    assert order == ["a", "b", "c", "a", "b", "c"]
    # a batch interleaves the keys, in the turn order remembered, each key's earliest first
    batch = await claim_keyed(store, limit=5, max_per_key=2)
    assert keys_of(batch) == ["a", "b", "c", "a", "b"]
    assert [r.task_id for r in batch if r.concurrency_key == "a"] == ["a-02", "a-03"]
    assert await store.running_by_key(QUEUE) == {"a": 2, "b": 2, "c": 1}


async def test_a_key_at_its_limit_is_skipped_until_a_run_of_it_finishes(store: Store) -> None:
    await backlogs(store, ["a", "b"], 5)
    first = await claim_keyed(store, limit=10, max_per_key=2)
    assert Counter(keys_of(first)) == {"a": 2, "b": 2}
    assert await claim_keyed(store, limit=10, max_per_key=2) == []
    await finish(store, [r for r in first if r.concurrency_key == "a"][:1])
    assert keys_of(await claim_keyed(store, limit=10, max_per_key=2)) == ["a"]
    # a higher limit lets more through; the queue's other tasks were never touched
    assert Counter(keys_of(await claim_keyed(store, limit=10, max_per_key=3))) == {"a": 1, "b": 1}
    assert await store.running_by_key(QUEUE) == {"a": 3, "b": 3}
    assert await store.running_by_key(TaskQueue("prov", "other")) == {}


async def test_tasks_without_a_key_are_one_more_key_never_limited(store: Store) -> None:
    await backlogs(store, [None, "a"], 4)
    batch = await claim_keyed(store, limit=10, max_per_key=1)
    assert keys_of(batch) == [None, "a", None, None, None]
    assert await store.running_by_key(QUEUE) == {"a": 1}


async def test_a_higher_priority_goes_first_and_keys_take_turns_within_it(store: Store) -> None:
    for task_id, key, priority in [
        ("a-low", "a", "lowest"),
        ("b-high-1", "b", "high"),
        ("b-high-2", "b", "high"),
        ("c-high", "c", "high"),
    ]:
        assert await store.insert(keyed(task_id, key, priority=priority)) is not None
    batch = await claim_keyed(store, limit=3, max_per_key=5)
    assert [r.task_id for r in batch] == ["b-high-1", "c-high", "b-high-2"]


async def test_weighted_claims_keep_keys_within_their_limit(store: Store) -> None:
    for key in ("a", "b"):
        for n in range(10):
            priority = "highest" if n % 2 else "lowest"
            assert await store.insert(keyed(f"{key}{n}", key, priority=priority)) is not None
    weights = ClaimWeights.parse({"highest": 1, "lowest": 1})
    rng = random.Random(7)
    priorities: Counter[str] = Counter()
    for _ in range(3):
        batch = await claim_keyed(
            store,
            limit=4,
            max_per_key=2,
            pick=lambda claimable: weights.quotas(claimable, limit=4, rng=rng),
        )
        assert Counter(keys_of(batch)) == {"a": 2, "b": 2}
        priorities.update(record.priority for record in batch)
        await finish(store, batch)
    assert priorities.keys() == {"highest", "lowest"}  # the draw reached both levels


async def test_concurrent_keyed_claims_never_exceed_a_key_s_limit(store: Store) -> None:
    await backlogs(store, ["a", "b", "c"], 8)
    batches = await asyncio.gather(*(claim_keyed(store, limit=2, max_per_key=2) for _ in range(12)))
    claimed_ids = [r.task_id for batch in batches for r in batch]
    assert len(claimed_ids) == len(set(claimed_ids)) == 6
    assert await store.running_by_key(QUEUE) == {"a": 2, "b": 2, "c": 2}


async def test_two_stores_on_one_postgres_schema_never_exceed_a_key_s_limit(
    postgres_schema_url: str,
) -> None:
    # replicas: each its own pool, sharing the schema and the queue's lock
    one, two = PostgresStore(postgres_schema_url), PostgresStore(postgres_schema_url)
    await one.open()
    await two.open()
    try:
        await backlogs(one, ["a", "b", "c"], 8)
        for _ in range(3):
            batches = await asyncio.gather(
                *(claim_keyed(store, limit=3, max_per_key=2) for store in [one, two] * 4)
            )
            running = await one.running_by_key(QUEUE)
            assert all(count <= 2 for count in running.values()), running
            claimed_ids = [r.task_id for batch in batches for r in batch]
            assert len(claimed_ids) == len(set(claimed_ids))
            await finish(one, [r for batch in batches for r in batch])
        assert await one.running_by_key(QUEUE) == {}
    finally:
        await one.close()
        await two.close()


async def test_limits_store_max_running_per_key_and_turns_expire_with_their_tasks(
    store: Store,
) -> None:
    limited = await store.limit_task_queue(
        QUEUE, Limits(max_running_per_key=3), named=frozenset({"maxRunningPerKey"})
    )
    assert limited.limits == Limits(max_running_per_key=3) and limited.restricted
    assert [c.limits for c in await store.queue_controls()] == [Limits(max_running_per_key=3)]
    # another limit set leaves it; naming it with None lifts it
    both = await store.limit_task_queue(
        QUEUE, Limits(max_running=9), named=frozenset({"maxRunning"})
    )
    assert both.limits == Limits(max_running=9, max_running_per_key=3)
    lifted = await store.limit_task_queue(
        QUEUE, Limits(), named=frozenset({"maxRunning", "maxRunningPerKey"})
    )
    assert lifted.limits == Limits() and await store.queue_controls() == []

    await backlogs(store, ["a", "b"], 2)
    assert keys_of(await claim_keyed(store, limit=1, max_per_key=5)) == ["a"]
    await store.delete_expired(NOW + 2 * DAY, 100)  # the tasks and the turns of their keys
    await backlogs(store, ["a", "b"], 2)
    # "a" was served last, but its turn expired with its task: by name again
    assert keys_of(await claim_keyed(store, limit=1, max_per_key=5)) == ["a"]
