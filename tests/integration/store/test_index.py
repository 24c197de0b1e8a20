"""The index part of the store contract (:class:`~coordinator.store.contract.index.
IndexStore`), run against SQLite and PostgreSQL alike: the rank rule under concurrent inserts,
the namespaces above an entry, listings by name, expiry, and a completion's entries written
by its compare-and-set exactly when it wins.
"""

from __future__ import annotations

import asyncio
import dataclasses

from coordinator.domain import lifecycle
from coordinator.domain.index import IndexedTask, Namespace, namespace_expiry
from coordinator.domain.records import TaskRecord
from coordinator.store.base import Store
from tests.fixtures.records import HOUR, NOW, TIMING, claim, create, get

DAY = 24 * HOUR


def entry(path: str, task_id: str, rank: int = 0, *, expires: int = NOW + DAY) -> IndexedTask:
    namespace, _, name = path.rpartition(".")
    return IndexedTask(
        namespace=namespace, name=name, rank=rank, task_id=task_id, data={"n": 1}, expires=expires
    )


async def test_the_rank_rule_keeps_the_highest_rank_and_the_later_of_equals(store: Store) -> None:
    first = entry("a.b.c", "T1", 5)
    assert await store.insert_indexed_task(first, now=NOW) == first
    assert await store.insert_indexed_task(entry("a.b.c", "T2", 4), now=NOW) == first
    equal = entry("a.b.c", "T3", 5)
    assert await store.insert_indexed_task(equal, now=NOW) == equal
    # an expired entry yields to any rank
    assert await store.insert_indexed_task(entry("a.b.c", "T4", -1), now=equal.expires) == entry(
        "a.b.c", "T4", -1
    )
    assert await store.get_indexed_tasks([("a.b", "c"), ("a.b", "none")]) == [
        entry("a.b.c", "T4", -1)
    ]


async def test_concurrent_inserts_leave_the_highest_rank(store: Store) -> None:
    racers = [entry("race.x", f"T{rank}", rank) for rank in (3, 9, 1, 7, 9, 2)]
    await asyncio.gather(*(store.insert_indexed_task(r, now=NOW) for r in racers))
    [stored] = await store.get_indexed_tasks([("race", "x")])
    assert stored.rank == 9


async def test_namespaces_above_an_entry_are_listed_and_only_raised(store: Store) -> None:
    await store.insert_indexed_task(entry("p.q.r.leaf", "T1", expires=NOW + 3 * DAY), now=NOW)
    await store.insert_indexed_task(entry("p.q.other", "T2", expires=NOW + DAY), now=NOW)
    until = namespace_expiry(NOW + 3 * DAY)
    assert await store.list_namespaces("", now=NOW, limit=10, after=None) == [
        Namespace(parent="", name="p", expires=until)
    ]
    assert await store.list_namespaces("p.q", now=NOW, limit=10, after=None) == [
        Namespace(parent="p.q", name="r", expires=until)
    ]
    # an outranked insert changes no namespace
    await store.insert_indexed_task(entry("p.q.r.leaf", "T3", -5, expires=NOW + 9 * DAY), now=NOW)
    [p] = await store.list_namespaces("", now=NOW, limit=10, after=None)
    assert p.expires == until
    # nor does a deletion
    assert await store.delete_indexed_task("p.q.r", "leaf")
    assert not await store.delete_indexed_task("p.q.r", "leaf")
    assert await store.list_namespaces("p.q", now=NOW, limit=10, after=None) != []


async def test_listings_page_by_name_and_leave_out_the_expired(store: Store) -> None:
    for name in "edcba":
        await store.insert_indexed_task(entry(f"list.{name}", f"T{name}"), now=NOW)
        await store.insert_indexed_task(entry(f"list.{name}.x", f"T{name}"), now=NOW)
    await store.insert_indexed_task(entry("list.gone", "Tg", expires=NOW - 1), now=NOW)
    page = await store.list_indexed_tasks("list", now=NOW, limit=2, after="b")
    assert [e.name for e in page] == ["c", "d"]
    everything = await store.list_indexed_tasks("list", now=NOW, limit=10, after=None)
    assert [e.name for e in everything] == list("abcde")
    names = await store.list_namespaces("list", now=NOW, limit=10, after="a")
    assert [n.name for n in names] == list("bcde")


async def test_expiry_deletes_expired_entries_and_namespaces_in_batches(store: Store) -> None:
    for i in range(3):
        await store.insert_indexed_task(entry(f"old{i}.x", f"T{i}", expires=NOW), now=NOW)
    await store.insert_indexed_task(entry("kept.x", "K", expires=NOW + 5 * DAY), now=NOW)
    later = namespace_expiry(NOW) + 1
    assert await store.expire_index(later, 2) == 4  # two entries and two namespaces
    assert await store.expire_index(later, 10) == 2
    assert await store.expire_index(later, 10) == 0
    assert [e.task_id for e in await store.get_indexed_tasks([("kept", "x")])] == ["K"]
    assert [n.name for n in await store.list_namespaces("", now=later, limit=10, after=None)] == [
        "kept"
    ]


async def test_a_completion_writes_its_entries_only_when_its_compare_and_set_wins(
    store: Store,
) -> None:
    await create(store, "T")
    running = await claim(store, "T")
    done = lifecycle.report(
        running, run_id=0, state="completed", reason="completed", now=NOW + 1, timing=TIMING
    )
    index = [entry("done.one", "T"), entry("done.two", "T", 3)]
    lost = dataclasses.replace(done.record, version=running.version + 7)
    assert await store.compare_and_set(lost, resolving=True, index=index) is None
    assert await store.get_indexed_tasks([("done", "one")]) == []

    assert await store.compare_and_set(done.record, resolving=True, index=index) is not None
    found = await store.get_indexed_tasks([("done", "one"), ("done", "two")])
    assert sorted(found, key=lambda e: e.name) == index
    assert (await get(store, "T")).state == "completed"


async def test_a_batch_indexes_the_completions_it_wins_only(store: Store) -> None:
    records = []
    for task_id in ("A", "B"):
        await create(store, task_id)
        running = await claim(store, task_id)
        done = lifecycle.report(
            running, run_id=0, state="completed", reason="completed", now=NOW + 1, timing=TIMING
        )
        records.append(done.record)
    stale = dataclasses.replace(records[1], version=records[1].version + 3)
    stored = await store.compare_and_set_many(
        [records[0], stale],
        resolving={"A", "B"},
        index={"A": [entry("batch.a", "A")], "B": [entry("batch.b", "B")]},
    )
    assert [r is not None for r in stored] == [True, False]
    found = await store.get_indexed_tasks([("batch", "a"), ("batch", "b")])
    assert [e.task_id for e in found] == ["A"]


async def test_concurrent_batches_indexing_under_the_same_paths_all_commit(store: Store) -> None:
    # each batch completes its own tasks, but indexes them under paths the others use too,
    # each in its own order: the store must lock the entries' and namespaces' rows in one
    # order, or two batches deadlock and PostgreSQL aborts one of them
    paths = [f"shared.n{j}.leaf" for j in range(12)]
    keys = [(f"shared.n{j}", "leaf") for j in range(12)]
    for round_ in range(6):
        batches = []
        for w in range(6):
            records: list[TaskRecord] = []
            index: dict[str, list[IndexedTask]] = {}
            for i in range(12):
                task_id = f"R{round_}W{w}T{i:02}"
                await create(store, task_id)
                running = await claim(store, task_id)
                records.append(
                    lifecycle.report(
                        running,
                        run_id=0,
                        state="completed",
                        reason="completed",
                        now=NOW + 1,
                        timing=TIMING,
                    ).record
                )
                order = paths[w * 2 :] + paths[: w * 2]
                index[task_id] = [
                    entry(
                        order[::-1][i] if w % 2 else order[i],
                        task_id,
                        expires=NOW + DAY * (round_ + w + 2),
                    )
                ]
            batches.append((records, index))

        results = await asyncio.gather(
            *(
                store.compare_and_set_many(
                    records, resolving={r.task_id for r in records}, index=index
                )
                for records, index in batches
            )
        )

        assert all(r is not None for batch in results for r in batch)
        found = await store.get_indexed_tasks(keys)
        assert sorted((e.namespace, e.name) for e in found) == sorted(keys)
