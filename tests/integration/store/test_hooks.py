"""The hooks part of the store contract
(:class:`~coordinator.store.contract.hooks.HookStore`), run against SQLite and PostgreSQL
alike: hooks written once and changed by compare-and-set, and their last fires.
"""

from __future__ import annotations

import asyncio
import dataclasses

from coordinator.domain.hooks import FireResult, LastFire
from coordinator.store.base import Store
from tests.fixtures.records import (
    MINUTE,
    NOW,
    new_hook,
)


async def test_hooks_are_written_once_and_changed_by_compare_and_set(store: Store) -> None:
    hook = new_hook("a/b", next_due=NOW)
    assert await store.insert_hook(hook)
    assert not await store.insert_hook(dataclasses.replace(hook, metadata={"other": 1}))
    assert await store.get_hook("g", "a/b") == hook
    moved = await store.compare_and_set_hook(dataclasses.replace(hook, next_due=NOW + MINUTE))
    assert moved is not None and moved.version == 2
    assert await store.compare_and_set_hook(dataclasses.replace(hook, next_due=NOW)) is None
    assert await store.get_hook("g", "a/b") == moved
    racers = [dataclasses.replace(moved, next_due=NOW + i) for i in range(5)]
    won = await asyncio.gather(*(store.compare_and_set_hook(h) for h in racers))
    assert sum(result is not None for result in won) == 1

    await store.insert_hook(new_hook("c", next_due=None))
    await store.insert_hook(new_hook("x", next_due=NOW - MINUTE, group="other"))
    assert [h.hook_id for h in await store.hooks_in_group("g")] == ["a/b", "c"]
    assert await store.hook_groups() == ["g", "other"]
    assert [h.hook_id for h in await store.due_hooks(NOW + MINUTE, 10)] == ["x", "a/b"]
    assert [h.hook_id for h in await store.due_hooks(NOW + MINUTE, 1)] == ["x"]


async def test_last_fires_are_one_per_task_id_newest_first_expire_and_go_with_their_hook(
    store: Store,
) -> None:
    await store.insert_hook(new_hook("h", next_due=None))

    def fire(task_id: str, at: int, result: FireResult = "success") -> LastFire:
        return LastFire(
            hook_group_id="g",
            hook_id="h",
            fired_by="schedule",
            task_id=task_id,
            task_create_time=at,
            result=result,
            error="" if result == "success" else "refused",
        )

    assert await store.insert_last_fire(fire("t1", NOW))
    assert not await store.insert_last_fire(fire("t1", NOW + 5, "error"))  # a repeat
    assert await store.insert_last_fire(fire("t2", NOW + 1, "error"))
    assert await store.insert_last_fire(fire("t3", NOW + 1))
    first = await store.last_fires("g", "h", limit=2, before=None)
    assert [f.task_id for f in first] == ["t3", "t2"]
    rest = await store.last_fires("g", "h", limit=2, before=(NOW + 1, "t2"))
    assert rest == [fire("t1", NOW)]
    assert await store.expire_last_fires(NOW + 1, 10) == 1  # t1, created before
    assert [f.task_id for f in await store.last_fires("g", "h", limit=5, before=None)] == [
        "t3",
        "t2",
    ]
    assert await store.expire_last_fires(NOW + 2, 1) == 1  # at most the limit
    assert len(await store.last_fires("g", "h", limit=5, before=None)) == 1

    assert await store.delete_hook("g", "h")
    assert not await store.delete_hook("g", "h")
    assert await store.get_hook("g", "h") is None
    assert await store.last_fires("g", "h", limit=5, before=None) == []
