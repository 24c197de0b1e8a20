"""The tasks part of the store contract
(:class:`~coordinator.store.contract.tasks.TaskStore`), run against SQLite and PostgreSQL alike:
inserts, reads, compare-and-set, the resolvers' scans, expiry and task groups.

Records are built the way the coordinator builds them: ``record_from_definition``, then the
pure :mod:`coordinator.domain.lifecycle` transitions, each written back with ``compare_and_set``
(:mod:`tests.fixtures.records`).
"""

from __future__ import annotations

import asyncio
import sqlite3

import asyncpg
import pytest

from coordinator.domain import lifecycle
from coordinator.domain.listings import Page
from coordinator.domain.records import TaskRecord
from coordinator.store.base import Store
from tests.fixtures.records import (
    CLAIM,
    HOUR,
    MINUTE,
    NOW,
    TIMING,
    apply,
    claim,
    claimed,
    create,
    definition,
    get,
    new_record,
    report,
)

MIXED_IDS = ["b", "B", "a-1", "a_1", "A", "0z", "-x", "Z", "_y", "ab"]


async def all_pages(store: Store, group: str, limit: int) -> list[Page[TaskRecord, str]]:
    pages = [await store.task_group(group, limit=limit, after=None)]
    while pages[-1].next_after is not None:
        pages.append(await store.task_group(group, limit=limit, after=pages[-1].next_after))
    return pages


# --- insert -------------------------------------------------------------------------------


async def test_insert_stores_version_1_and_reads_back_the_same_record(store: Store) -> None:
    record = new_record("T")
    assert record.version == 0
    assert record.hint_needed

    stored = await store.insert(record)

    assert stored == record.replace(version=1)
    assert await store.get("T") == stored
    assert (await get(store, "T")).definition == definition()


async def test_insert_writes_the_dependency_edges(store: Store) -> None:
    await create(store, "dep-1")
    await create(store, "dep-2")
    dependent = await create(store, "T", dependencies=("dep-1", "dep-2"))

    assert dependent.state == "unscheduled"
    for required in ("dep-1", "dep-2"):
        page = await store.dependents(required, limit=10, after=None)
        assert page == Page(items=[dependent], next_after=None)
    assert (await store.dependents("T", limit=10, after=None)).items == []


async def test_insert_of_an_existing_id_returns_none_and_writes_nothing(store: Store) -> None:
    original = await create(store, "T", group="g1", dependencies=("dep-1",))
    clash = new_record("T", now=NOW + 1, group="g2", dependencies=("dep-2",))

    assert await store.insert(clash) is None

    assert await store.get("T") == original
    assert (await store.dependents("dep-1", limit=10, after=None)).items == [original]
    assert (await store.dependents("dep-2", limit=10, after=None)).items == []
    assert (await store.task_group("g2", limit=10, after=None)).items == []


async def test_insert_is_atomic_with_its_edges(store: Store) -> None:
    # a repeated dependency violates the edge table's key after the task row is written
    with pytest.raises((sqlite3.IntegrityError, asyncpg.UniqueViolationError)):
        await store.insert(new_record("T", dependencies=("dep", "dep")))

    assert await store.get("T") is None
    assert (await store.dependents("dep", limit=10, after=None)).items == []


async def test_concurrent_inserts_of_one_id_store_exactly_one(store: Store) -> None:
    records = [new_record("T", group=f"g{i}") for i in range(10)]

    results = await asyncio.gather(*(store.insert(record) for record in records))

    winners = [result for result in results if result is not None]
    assert len(winners) == 1
    assert await store.get("T") == winners[0]


async def test_insert_many_inserts_new_records_with_their_edges(store: Store) -> None:
    await create(store, "old")
    records = [new_record("a"), new_record("b", dependencies=("a", "old")), new_record("old")]
    assert await store.insert_many(records) == {"a", "b"}
    assert await get(store, "a") == records[0].replace(version=1)
    assert await get(store, "b") == records[1].replace(version=1)
    page = await store.dependents("a", limit=10, after=None)
    assert [r.task_id for r in page.items] == ["b"]
    page = await store.dependents("old", limit=10, after=None)
    assert [r.task_id for r in page.items] == ["b"]
    assert await store.insert_many([]) == set()


async def test_concurrent_insert_many_of_the_same_ids_in_other_orders_store_each_once(
    store: Store,
) -> None:
    # producers retrying one batch of four groups, each in its own order (rotated,
    # reversed): a new row's unique key makes a second inserter wait for the first, so two
    # batches taking the tasks in other orders could deadlock; on PostgreSQL each locks its
    # groups' rows first, in group id order, so they take turns instead
    for round_ in range(6):
        records = [new_record(f"R{round_}T{i:02}", group=f"R{round_}G{i % 4}") for i in range(48)]
        orders = [records[w * 8 :] + records[: w * 8] for w in range(6)]
        orders += [order[::-1] for order in orders]

        results = await asyncio.gather(*(store.insert_many(order) for order in orders))

        inserted = [task_id for result in results for task_id in result]
        assert sorted(inserted) == sorted(r.task_id for r in records)


async def test_insert_many_of_existing_ids_writes_nothing(store: Store) -> None:
    first = await create(store, "x")
    again = new_record("x", group="another", dependencies=("y",))
    assert await store.insert_many([again]) == set()
    assert await get(store, "x") == first
    assert (await store.dependents("y", limit=10, after=None)).items == []


async def test_insert_many_and_compare_and_set_many_keep_text_that_needs_escaping(
    store: Store,
) -> None:
    # PostgreSQL takes a batch's rows as one JSON text, the definition a string inside it
    awkward = 'quote " backslash \\ \\u0041 newline \n tab \t é 漢 🎉 \u2028 end'
    record = new_record("esc")
    record = record.replace(
        definition={
            **record.definition,
            "payload": {"text": awkward, awkward: [awkward], "big": 2**70, "float": 0.1},
        }
    )
    assert await store.insert_many([record]) == {"esc"}
    stored = await get(store, "esc")
    assert stored == record.replace(version=1)
    taken = lifecycle.claim(
        stored, run_id=0, worker_group="wg", worker_id=awkward, now=NOW, timing=TIMING
    ).record
    assert await store.compare_and_set_many([taken]) == [taken.replace(version=2)]
    assert await get(store, "esc") == taken.replace(version=2)


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_a_tasks_traceparent_is_kept_by_every_read_and_write(store: Store) -> None:
    one = new_record("one").replace(traceparent=TRACEPARENT)
    assert await store.insert(one) == one.replace(version=1)
    many = new_record("many", dependencies=("one",)).replace(traceparent=TRACEPARENT)
    assert await store.insert_many([many, new_record("untraced")]) == {"many", "untraced"}

    assert (await get(store, "one")).traceparent == TRACEPARENT
    assert (await get(store, "untraced")).traceparent is None
    assert {
        task_id: record.traceparent
        for task_id, record in (await store.get_many(["one", "many", "untraced"])).items()
    } == {"one": TRACEPARENT, "many": TRACEPARENT, "untraced": None}
    dependents = await store.dependents("one", limit=10, after=None)
    assert [record.traceparent for record in dependents.items] == [TRACEPARENT]
    # compare-and-set writes the status only: the traceparent stays
    running = await claim(store, "one")
    assert running.traceparent == TRACEPARENT
    assert await get(store, "one") == running


# --- reads --------------------------------------------------------------------------------


async def test_get_many_and_states_leave_out_missing_ids(store: Store) -> None:
    pending = await create(store, "pending")
    await create(store, "unscheduled", dependencies=("pending",))
    running = await create(store, "running")
    running = await claim(store, "running")
    await create(store, "completed")
    await claim(store, "completed")
    await report(store, "completed", "completed")

    assert await store.get("missing") is None
    assert await store.get_many(["pending", "missing", "running", "pending"]) == {
        "pending": pending,
        "running": running,
    }
    assert await store.get_many(["missing"]) == {}
    assert await store.get_many([]) == {}
    assert await store.states(["pending", "unscheduled", "running", "completed", "missing"]) == {
        "pending": "pending",
        "unscheduled": "unscheduled",
        "running": "running",
        "completed": "completed",
    }
    assert await store.states([]) == {}


async def test_runs_of_reads_each_named_run_and_leaves_out_missing_ones(store: Store) -> None:
    await create(store, "running")
    running = await claim(store, "running")
    await create(store, "cancelled")
    await claim(store, "cancelled")
    cancelled = await apply(store, lifecycle.cancel(await get(store, "cancelled"), now=NOW))
    await create(store, "pending")

    found = await store.runs_of(
        [("running", 0), ("cancelled", 0), ("pending", 0), ("running", 1), ("missing", 0)]
    )

    assert found == {
        ("running", 0): running.runs[0],
        ("cancelled", 0): cancelled.runs[0],
        ("pending", 0): (await get(store, "pending")).runs[0],
    }
    assert (found[("cancelled", 0)].state, found[("cancelled", 0)].reason_resolved) == (
        "exception",
        "canceled",
    )
    assert found[("running", 0)].state == "running"
    assert await store.runs_of([]) == {}


# --- compare-and-set ----------------------------------------------------------------------


async def test_compare_and_set_bumps_the_version_and_stores_the_status(store: Store) -> None:
    result = claimed(await create(store, "T"))

    stored = await store.compare_and_set(result.record)

    assert stored == result.record.replace(version=2)
    assert await store.get("T") == stored
    assert stored.runs[0].state == "running"
    assert stored.taken_until == NOW + CLAIM
    assert not stored.hint_needed
    reclaimed = await apply(
        store, lifecycle.reclaim(stored, run_id=0, now=NOW + MINUTE, timing=TIMING)
    )
    assert reclaimed.version == 3
    assert await store.get("T") == reclaimed


async def test_compare_and_set_with_a_stale_version_writes_nothing(store: Store) -> None:
    created = await create(store, "T")
    winner = await claim(store, "T", worker_id="first")

    stale = lifecycle.cancel(created, now=NOW).record
    assert await store.compare_and_set(stale) is None
    ahead = winner.replace(version=winner.version + 1, retries_left=0)
    assert await store.compare_and_set(ahead) is None

    assert await store.get("T") == winner


async def test_compare_and_set_of_a_missing_task_returns_none(store: Store) -> None:
    never_stored = new_record("ghost").replace(version=1)
    assert await store.compare_and_set(never_stored) is None
    assert await store.get("ghost") is None

    deleted = await create(store, "gone", expires=NOW)
    assert await store.delete_expired(NOW, 10) == 1
    assert await store.compare_and_set(lifecycle.cancel(deleted, now=NOW).record) is None
    assert await store.get("gone") is None


async def test_concurrent_compare_and_set_has_exactly_one_winner(store: Store) -> None:
    created = await create(store, "T")
    claims = [claimed(created, worker_id=f"w{i}") for i in range(20)]

    results = await asyncio.gather(*(store.compare_and_set(o.record) for o in claims))

    winners = [result for result in results if result is not None]
    assert len(winners) == 1
    assert winners[0].version == 2
    assert await store.get("T") == winners[0]


async def test_compare_and_set_many_writes_each_record_on_its_own_version(store: Store) -> None:
    tasks = [await create(store, task_id) for task_id in ("A", "B", "C")]
    await claim(store, "B", worker_id="first")  # B's read below is now stale
    claims = [claimed(r) for r in tasks]
    ghost = new_record("ghost").replace(version=1)

    results = await store.compare_and_set_many([*(o.record for o in claims), ghost])

    assert results[0] == claims[0].record.replace(version=2)
    assert results[1] is None and results[3] is None
    assert results[2] == claims[2].record.replace(version=2)
    assert await store.get("A") == results[0] and await store.get("C") == results[2]
    assert (await store.get("B")).runs[0].worker_id == "first"  # type: ignore[union-attr]
    assert await store.compare_and_set_many([]) == []


async def test_concurrent_compare_and_set_many_have_one_winner_per_task(store: Store) -> None:
    # each batch names the tasks in its own order (rotated, reversed): PostgreSQL locks a
    # batch's rows one by one, so the store must take them in one order, or two batches
    # each holding a row the other wants deadlock and one of them fails outright
    for round_ in range(10):
        tasks = [await create(store, f"R{round_}T{i:02}") for i in range(48)]
        orders = [tasks[w * 8 :] + tasks[: w * 8] for w in range(6)]
        orders += [order[::-1] for order in orders]
        batches = [
            [claimed(r, worker_id=f"w{w}").record for r in order] for w, order in enumerate(orders)
        ]

        results = await asyncio.gather(*(store.compare_and_set_many(b) for b in batches))

        winners = [r for batch in results for r in batch if r is not None]
        assert sorted(r.task_id for r in winners) == sorted(r.task_id for r in tasks)
        for winner in winners:
            assert await store.get(winner.task_id) == winner


# --- resolver scans and expiry ------------------------------------------------------------


async def test_expired_claims_lists_running_runs_due_at_or_before_now(store: Store) -> None:
    for task_id in ("a", "b", "c", "pending"):
        await create(store, task_id)
    await claim(store, "a", now=NOW)
    b = await claim(store, "b", now=NOW + 10)
    await claim(store, "c", now=NOW + 20)
    due_a, due_b, due_c = NOW + CLAIM, NOW + 10 + CLAIM, NOW + 20 + CLAIM

    assert await store.expired_claims(due_a - 1, 10) == []
    assert await store.expired_claims(due_a, 10) == [("a", due_a)]
    assert await store.expired_claims(due_c, 10) == [("a", due_a), ("b", due_b), ("c", due_c)]
    assert await store.expired_claims(due_c, 2) == [("a", due_a), ("b", due_b)]

    reclaimed = await apply(store, lifecycle.reclaim(b, run_id=0, now=due_a, timing=TIMING))
    assert reclaimed.taken_until == due_a + CLAIM
    assert await store.expired_claims(due_c, 10) == [("a", due_a), ("c", due_c)]

    a = await get(store, "a")
    await apply(store, lifecycle.expire_claim(a, taken_until=due_a, now=due_a, timing=TIMING))
    await report(store, "c", "completed", now=due_a)
    assert await store.expired_claims(NOW + HOUR, 10) == [("b", due_a + CLAIM)]


async def test_past_deadlines_lists_unresolved_tasks_due_at_or_before_now(store: Store) -> None:
    d1, d2, d3 = NOW + HOUR, NOW + 2 * HOUR, NOW + 3 * HOUR
    await create(store, "unscheduled", dependencies=("x",), deadline=d1)
    await create(store, "pending", deadline=d2)
    await create(store, "running", deadline=d3)
    await claim(store, "running")
    await create(store, "completed", deadline=d1)
    await claim(store, "completed")
    await report(store, "completed", "completed")

    assert await store.past_deadlines(d1 - 1, 10) == []
    assert await store.past_deadlines(d1, 10) == ["unscheduled"]
    assert await store.past_deadlines(d3, 10) == ["unscheduled", "pending", "running"]
    assert await store.past_deadlines(d3, 2) == ["unscheduled", "pending"]

    unscheduled = await get(store, "unscheduled")
    await apply(store, lifecycle.exceed_deadline(unscheduled, now=d1))
    assert await store.past_deadlines(d3, 10) == ["pending", "running"]


async def test_tasks_to_notify_lists_resolved_tasks_until_notified(store: Store) -> None:
    for task_id in ("completed", "failed", "pending", "alone"):
        await create(store, task_id)
    # each has a dependent (the flag is only kept for tasks that have some), but "alone"
    await create(store, "dependent", dependencies=("completed", "failed", "pending"))
    await claim(store, "alone")
    stored = await report(store, "alone", "completed")
    assert not stored.notify_dependents, "nobody depends on it: no dependency pass needed"
    await claim(store, "completed")
    await report(store, "completed", "completed")
    await claim(store, "failed")
    await report(store, "failed", "failed")

    assert sorted(await store.tasks_to_notify(10)) == ["completed", "failed"]
    assert len(await store.tasks_to_notify(1)) == 1

    completed = await get(store, "completed")
    await apply(store, lifecycle.dependents_notified(completed, examined_version=completed.version))
    assert await store.tasks_to_notify(10) == ["failed"]

    pending = await get(store, "pending")
    await apply(store, lifecycle.cancel(pending, now=NOW))
    assert sorted(await store.tasks_to_notify(10)) == ["failed", "pending"]


async def test_delete_expired_deletes_tasks_and_edges_up_to_the_limit(store: Store) -> None:
    expires = NOW + 2 * HOUR
    await create(store, "base", expires=expires + 2)
    await create(store, "e1", expires=expires)
    await create(store, "e2", expires=expires + 1, dependencies=("base",))
    await create(store, "keep", expires=expires + 2, dependencies=("e1",))

    assert await store.delete_expired(expires - 1, 10) == 0
    assert await store.delete_expired(expires + 1, 1) == 1
    assert await store.get("e1") is None
    assert await store.get("e2") is not None
    assert await store.delete_expired(expires + 1, 10) == 1
    assert await store.delete_expired(expires + 1, 10) == 0

    assert set(await store.get_many(["base", "e1", "e2", "keep"])) == {"base", "keep"}
    # the edge e1 -> keep went with e1, although keep is still there
    assert (await store.dependents("e1", limit=10, after=None)).items == []
    # the edge base -> e2 went with e2: a new task with that id does not inherit it
    await create(store, "e2")
    assert (await store.dependents("base", limit=10, after=None)).items == []


async def test_concurrent_sweeps_delete_each_expired_task_once(store: Store) -> None:
    for i in range(12):
        await create(store, f"t{i:02}", expires=NOW + HOUR + i)

    counts = await asyncio.gather(*(store.delete_expired(NOW + 2 * HOUR, 5) for _ in range(4)))

    assert all(count <= 5 for count in counts)
    assert sum(counts) + await store.delete_expired(NOW + 2 * HOUR, 100) == 12
    assert await store.get_many([f"t{i:02}" for i in range(12)]) == {}


# --- task groups and dependents -----------------------------------------------------------


async def test_task_group_pages_through_every_task_in_task_id_order(store: Store) -> None:
    expected = [await create(store, task_id, group="g") for task_id in sorted(MIXED_IDS)]
    for task_id in ("a-0", "Y", "c"):
        await create(store, task_id, group="other")

    pages = await all_pages(store, "g", limit=3)

    assert [len(page.items) for page in pages] == [3, 3, 3, 1]
    assert [page.next_after for page in pages] == [
        expected[2].task_id,
        expected[5].task_id,
        expected[8].task_id,
        None,
    ]
    assert [record for page in pages for record in page.items] == expected

    exact = await all_pages(store, "g", limit=5)
    assert [len(page.items) for page in exact] == [5, 5]
    assert exact[-1].next_after is None

    assert await store.task_group("empty", limit=3, after=None) == Page(items=[], next_after=None)


async def test_dependents_pages_through_every_dependent_in_task_id_order(store: Store) -> None:
    await create(store, "root")
    await create(store, "other-root")
    expected = [
        await create(store, task_id, dependencies=("root",)) for task_id in sorted(MIXED_IDS)
    ]
    await create(store, "elsewhere", dependencies=("other-root",))

    records: list[TaskRecord] = []
    sizes = []
    after = None
    while True:
        page = await store.dependents("root", limit=4, after=after)
        records += page.items
        sizes.append(len(page.items))
        if page.next_after is None:
            break
        assert page.next_after == page.items[-1].task_id
        after = page.next_after

    assert sizes == [4, 4, 2]
    assert records == expected
    assert await store.dependents("nothing", limit=4, after=None) == Page(items=[], next_after=None)
