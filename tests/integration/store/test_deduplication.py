"""The deduplication part of the store contract
(:class:`~coordinator.store.contract.deduplication.DeduplicationStore`), run against SQLite and
PostgreSQL alike: a free key claimed with its task, a held key naming its holder and writing
nothing, a key moved only from the holder the caller read, a claim undone with a task that was
not inserted, keys per task queue, concurrent claims of which exactly one wins, and a key's row
expiring with its holder.
"""

from __future__ import annotations

import asyncio

from coordinator.store.base import Store
from coordinator.store.contract.deduplication import KeyedInsert
from tests.fixtures.records import DAY, HOUR, NOW, create, get, new_record

KEY = "nightly report ~ 2026-11-29"


async def test_a_free_key_is_claimed_with_its_task_and_a_held_one_names_its_holder(
    store: Store,
) -> None:
    first = await store.insert_keyed(new_record("a"), KEY, holder=None)
    assert first == KeyedInsert(claimed=True, stored=new_record("a").replace(version=1))
    assert (await get(store, "a")).version == 1

    second = await store.insert_keyed(new_record("b"), KEY, holder=None)
    assert second == KeyedInsert(claimed=False, holder="a")
    assert await store.get("b") is None
    # its own id: the key is held by the very task
    assert await store.insert_keyed(new_record("a"), KEY, holder=None) == KeyedInsert(
        claimed=False, holder="a"
    )
    # the same key in another task queue is another key
    other_queue = await store.insert_keyed(new_record("c", worker_type="wt2"), KEY, holder=None)
    assert other_queue.claimed and other_queue.stored is not None


async def test_a_key_moves_only_from_the_holder_the_caller_read(store: Store) -> None:
    await store.insert_keyed(new_record("a"), KEY, holder=None)
    stale = await store.insert_keyed(new_record("b"), KEY, holder="x")
    assert stale == KeyedInsert(claimed=False, holder="a")
    assert await store.get("b") is None
    moved = await store.insert_keyed(new_record("b"), KEY, holder="a")
    assert moved.claimed and moved.stored is not None
    assert await store.insert_keyed(new_record("c"), KEY, holder="a") == KeyedInsert(
        claimed=False, holder="b"
    )


async def test_a_claim_is_undone_when_its_task_is_not_inserted(store: Store) -> None:
    await create(store, "taken")
    refused = await store.insert_keyed(new_record("taken"), KEY, holder=None)
    assert refused == KeyedInsert(claimed=True)
    # nothing was written: the key is still free
    claimed = await store.insert_keyed(new_record("d"), KEY, holder=None)
    assert claimed.claimed and claimed.stored is not None


async def test_of_concurrent_claims_of_one_key_exactly_one_wins(store: Store) -> None:
    outcomes = await asyncio.gather(
        *(store.insert_keyed(new_record(f"t{i}"), KEY, holder=None) for i in range(20))
    )
    winners = [o.stored.task_id for o in outcomes if o.stored is not None]
    assert len(winners) == 1
    assert all(o.holder == winners[0] for o in outcomes if not o.claimed)
    stored = await store.get_many([f"t{i}" for i in range(20)])
    assert list(stored) == winners


async def test_a_keys_row_expires_with_its_holder(store: Store) -> None:
    await store.insert_keyed(new_record("old", expires=NOW + DAY), KEY, holder=None)
    await store.delete_expired(NOW + DAY - 1, 100)
    assert not (await store.insert_keyed(new_record("new"), KEY, holder=None)).claimed
    assert await store.delete_expired(NOW + DAY + HOUR, 100) == 1
    fresh = await store.insert_keyed(new_record("new"), KEY, holder=None)
    assert fresh.claimed and fresh.stored is not None
