"""The :class:`~coordinator.store.base.Store` contract, run against SQLite and PostgreSQL alike.

Records are built the way the coordinator builds them: ``record_from_definition``, then the
pure :mod:`coordinator.domain.lifecycle` transitions, each written back with ``compare_and_set``.
A few tests at the end cover what only one side has: replicas migrating one PostgreSQL
database at once, and opening stores by URL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from coordinator.domain import lifecycle
from coordinator.domain.events import QueueEvent
from coordinator.domain.hooks import FireResult, LastFire
from coordinator.domain.lifecycle import TransitionResult
from coordinator.domain.listings import Page, RunCounts
from coordinator.domain.records import TaskRecord, record_from_definition, to_iso
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import (
    ProvisionerRecord,
    QuarantineNote,
    RecentTask,
    TaskQueueRecord,
    TaskQueueSighting,
    WorkerKey,
    WorkerSighting,
)
from coordinator.store import postgres
from coordinator.store.base import Store
from coordinator.store.factory import store_from_url
from coordinator.store.postgres import PostgresStore
from coordinator.store.sqlfiles import migrations
from coordinator.store.sqlite import SQLiteStore
from tests.fixtures.records import (
    HOUR,
    MINUTE,
    NOW,
    TIMING,
    create,
    definition,
    get,
    new_hook,
    new_record,
)

CLAIM = TIMING.claim_timeout_ms

# Code-point order differs from any linguistic order in case, '-', '_' and digits.
MIXED_IDS = ["b", "B", "a-1", "a_1", "A", "0z", "-x", "Z", "_y", "ab"]


async def apply(store: Store, result: TransitionResult) -> TaskRecord:
    """Write a transition's record; the write must win."""
    assert result.changed
    stored = await store.compare_and_set(result.record)
    assert stored is not None
    return stored


def claimed(record: TaskRecord, *, now: int = NOW, worker_id: str = "w") -> TransitionResult:
    """The claim of ``record``'s last run by ``wg/<worker_id>``."""
    return lifecycle.claim(
        record,
        run_id=len(record.runs) - 1,
        worker_group="wg",
        worker_id=worker_id,
        now=now,
        timing=TIMING,
    )


async def claim(store: Store, task_id: str, *, now: int = NOW, worker_id: str = "w") -> TaskRecord:
    return await apply(store, claimed(await get(store, task_id), now=now, worker_id=worker_id))


async def report(store: Store, task_id: str, state: str, *, now: int = NOW) -> TaskRecord:
    record = await get(store, task_id)
    run_id = len(record.runs) - 1
    result = lifecycle.report(
        record, run_id=run_id, state=state, reason=state, now=now, timing=TIMING
    )
    return await apply(store, result)


async def all_pages(store: Store, group: str, limit: int) -> list[Page[TaskRecord, str]]:
    pages = [await store.task_group(group, limit=limit, after=None)]
    while pages[-1].next_after is not None:
        pages.append(await store.task_group(group, limit=limit, after=pages[-1].next_after))
    return pages


# --- insert ---------------------------------------------------------------------------------


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


async def test_concurrent_first_asks_for_a_shared_secret_all_get_the_winner(
    store: Store,
) -> None:
    # as replicas starting together on a new database: each offers its own new secret
    secrets = await asyncio.gather(
        *(store.shared_secret("race", new=f"secret-{n}") for n in range(10))
    )
    assert len(set(secrets)) == 1 and secrets[0] in {f"secret-{n}" for n in range(10)}
    assert await store.shared_secret("race", new="later") == secrets[0]


# --- reads ----------------------------------------------------------------------------------


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


# --- compare-and-set ------------------------------------------------------------------------


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
    tasks = [await create(store, f"T{i}") for i in range(8)]
    batches = [
        [claimed(r, worker_id=f"w{w}").record for r in (tasks[w % 8 :] + tasks[: w % 8])]
        for w in range(6)
    ]

    results = await asyncio.gather(*(store.compare_and_set_many(b) for b in batches))

    winners = [r for batch in results for r in batch if r is not None]
    assert sorted(r.task_id for r in winners) == sorted(r.task_id for r in tasks)
    for winner in winners:
        assert await store.get(winner.task_id) == winner


# --- confirm_hints --------------------------------------------------------------------------


async def test_confirm_hint_clears_the_hint_without_bumping_the_version(store: Store) -> None:
    created = await create(store, "T")
    assert await store.hints_due(NOW + 1, 10) == ["T"]

    await store.confirm_hints([("T", 1)])  # no such run
    assert await store.get("T") == created

    await store.confirm_hints([("T", 0)])
    assert await store.get("T") == created.replace(hint_needed=False)
    assert await store.hints_due(NOW + 1, 10) == []
    # a writer that read version 1 before the confirmation still wins its compare-and-set
    assert (await claim(store, "T")).version == 2

    await store.confirm_hints([("missing", 0)])
    assert await store.get("missing") is None


async def test_confirm_hint_ignores_a_run_that_is_no_longer_the_last(store: Store) -> None:
    await create(store, "T")
    claimed = await claim(store, "T")
    expired = await apply(
        store,
        lifecycle.expire_claim(claimed, taken_until=NOW + CLAIM, now=NOW + CLAIM, timing=TIMING),
    )
    assert [run.state for run in expired.runs] == ["exception", "pending"]
    assert expired.hint_needed

    await store.confirm_hints([("T", 0)])
    assert await store.get("T") == expired

    await store.confirm_hints([("T", 1)])
    assert await store.get("T") == expired.replace(hint_needed=False)


async def test_confirm_hints_confirms_a_batch_in_one_call(store: Store) -> None:
    for task_id in ("a", "b", "c"):
        await create(store, task_id)
    await store.confirm_hints([])
    assert sorted(await store.hints_due(NOW + 1, 10)) == ["a", "b", "c"]

    await store.confirm_hints([("a", 0), ("missing", 0), ("c", 0), ("b", 5)])
    assert await store.hints_due(NOW + 1, 10) == ["b"]


# --- resolver scans -------------------------------------------------------------------------


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


async def test_hints_due_lists_unconfirmed_hints_asked_for_before_the_time(store: Store) -> None:
    await create(store, "a", now=NOW)
    await create(store, "b", now=NOW + 5)
    waiting = await create(store, "waiting", dependencies=("a",))
    await create(store, "claimed", now=NOW)
    await claim(store, "claimed")

    assert await store.hints_due(NOW, 10) == []
    assert await store.hints_due(NOW + 1, 10) == ["a"]
    assert await store.hints_due(NOW + 6, 10) == ["a", "b"]
    assert await store.hints_due(NOW + 6, 1) == ["a"]

    await store.confirm_hints([("a", 0)])
    assert await store.hints_due(NOW + 6, 10) == ["b"]
    await claim(store, "b", now=NOW + 6)
    assert await store.hints_due(NOW + 6, 10) == []

    await apply(store, lifecycle.schedule(waiting, now=NOW + 7))
    assert await store.hints_due(NOW + 7, 10) == []
    assert await store.hints_due(NOW + 8, 10) == ["waiting"]


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


# --- listings and counts --------------------------------------------------------------------


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


async def test_run_counts_counts_pending_and_running_last_runs_of_one_queue(
    store: Store,
) -> None:
    for task_id in ("p1", "p2", "r1", "c1"):
        await create(store, task_id)
    await create(store, "u1", dependencies=("p1",))
    await create(store, "elsewhere", worker_type="other")
    await claim(store, "r1")
    await claim(store, "c1")
    await report(store, "c1", "completed")

    counts = await store.run_counts("prov", "wt", now=NOW)
    assert counts == RunCounts(pending=2, delayed=0, running=1)
    other = await store.run_counts("prov", "other", now=NOW)
    assert other == RunCounts(pending=1, delayed=0, running=0)
    none = await store.run_counts("prov", "none", now=NOW)
    assert none == RunCounts(pending=0, delayed=0, running=0)


async def test_run_counts_tell_delayed_runs_from_pending_ones_by_now(store: Store) -> None:
    await create(store, "now")
    await create(store, "later", not_before=NOW + MINUTE)
    assert await store.run_counts("prov", "wt", now=NOW) == RunCounts(
        pending=1, delayed=1, running=0
    )
    assert await store.run_counts("prov", "wt", now=NOW + MINUTE) == RunCounts(
        pending=2, delayed=0, running=0
    )


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


async def test_insert_many_of_existing_ids_writes_nothing(store: Store) -> None:
    first = await create(store, "x")
    again = new_record("x", group="another", dependencies=("y",))
    assert await store.insert_many([again]) == set()
    assert await get(store, "x") == first
    assert (await store.dependents("y", limit=10, after=None)).items == []


# --- migrations and reopening ---------------------------------------------------------------


async def test_migrate_after_open_applies_nothing(store: Store) -> None:
    assert await store.migrate() == []
    assert await store.migrate() == []
    assert await store.insert(new_record("T")) is not None


async def test_reopening_the_database_keeps_the_data(store: Store, store_url: str) -> None:
    await create(store, "dep")
    await create(store, "T", dependencies=("dep",))
    claimed = await claim(store, "dep")
    await store.close()

    reopened = store_from_url(store_url)
    await reopened.open()
    try:
        assert await reopened.migrate() == []
        assert await reopened.get("dep") == claimed
        dependents = await reopened.dependents("dep", limit=10, after=None)
        assert [record.task_id for record in dependents.items] == ["T"]
        reclaimed = lifecycle.reclaim(claimed, run_id=0, now=NOW + 1, timing=TIMING)
        assert await reopened.compare_and_set(reclaimed.record) is not None
    finally:
        await reopened.close()


# --- PostgreSQL replicas --------------------------------------------------------------------


async def test_replicas_opening_at_once_apply_each_migration_once(
    postgres_schema_url: str,
) -> None:
    replicas = [PostgresStore(postgres_schema_url, min_size=1, max_size=1) for _ in range(6)]

    await asyncio.gather(*(replica.open() for replica in replicas))
    try:
        conn = await asyncpg.connect(postgres_schema_url)
        try:
            versions = [row[0] for row in await conn.fetch("SELECT version FROM schema_migrations")]
        finally:
            await conn.close()
        assert versions == [migration.version for migration in migrations("postgres")]
        assert await replicas[0].insert(new_record("T")) is not None
        assert await replicas[-1].get("T") is not None
    finally:
        await asyncio.gather(*(replica.close() for replica in replicas))


async def _advisory_locks(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"))
    finally:
        await conn.close()


async def test_a_queue_lock_is_released_however_its_holder_ends(
    postgres_schema_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pool does not reset released connections (no pg_advisory_unlock_all): a lock whose
    # holder failed, or was cancelled while waiting for it, must not stay with a pooled session.
    queue = TaskQueue("prov", "wt")
    one, two = (PostgresStore(postgres_schema_url, max_size=1) for _ in range(2))
    await one.open()
    await two.open()
    try:
        with pytest.raises(RuntimeError):
            async with one.queue_lock(queue):
                raise RuntimeError("the body failed")
        assert await _advisory_locks(postgres_schema_url) == 0

        async def take(store: PostgresStore) -> None:
            async with store.queue_lock(queue):
                pass

        async with one.queue_lock(queue):
            waiting = asyncio.create_task(take(two))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # held across replicas
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        async with asyncio.timeout(5):
            await take(two)
            await take(one)
        assert await _advisory_locks(postgres_schema_url) == 0

        # an unlock that fails leaves the lock with its session, which is then closed
        failing = postgres._positional("SELECT CAST(:space AS INTEGER) / 0 + CAST(:key AS INTEGER)")
        with monkeypatch.context() as patch:
            patch.setitem(postgres._Q, "unlock_task_queue", failing)
            with pytest.raises(asyncpg.DivisionByZeroError):
                await take(one)
        assert await _advisory_locks(postgres_schema_url) == 0
        async with asyncio.timeout(5):
            await take(two)
    finally:
        await one.close()
        await two.close()


# --- opening stores by URL ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "file"),
    [
        ("sqlite:///{tmp}/abs.db", "abs.db"),
        ("sqlite:////{tmp}/four-slashes.db", "four-slashes.db"),
        ("sqlite:///./relative/rel.db", "relative/rel.db"),
    ],
)
async def test_store_from_url_opens_sqlite_files(
    url: str, file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = store_from_url(url.format(tmp=str(tmp_path).lstrip("/")))
    await store.open()
    try:
        assert await store.insert(new_record("T")) is not None
    finally:
        await store.close()

    same_file = SQLiteStore(tmp_path / file)
    await same_file.open()
    try:
        assert await same_file.get("T") is not None
    finally:
        await same_file.close()


@pytest.mark.parametrize(
    "url",
    [
        "mysql://localhost/db",
        "sqlite://host/x.db",
        "sqlite:///x.db?mode=ro",
        "sqlite://",
        "sqlite:///",
        "/tmp/x.db",
        "",
    ],
)
def test_store_from_url_rejects_other_urls(url: str) -> None:
    with pytest.raises(ValueError, match="store URL"):
        store_from_url(url)


# --- task queues and workers ----------------------------------------------------------------

DAY = 24 * HOUR
TASK_QUEUE = TaskQueue("prov", "wt")


def worker_key(worker_id: str = "w", task_queue: TaskQueue = TASK_QUEUE) -> WorkerKey:
    return WorkerKey(task_queue=task_queue, worker_group="wg", worker_id=worker_id)


def seen(
    worker_id: str = "w",
    *,
    at: int = NOW,
    claimed: range = range(0),
    task_queue: TaskQueue = TASK_QUEUE,
) -> tuple[TaskQueueSighting, WorkerSighting]:
    """A worker's sighting at ``at`` (with its queue's) that claimed tasks ``t<n>``."""
    runs = tuple(RecentTask(task_id=f"t{n}", run_id=0) for n in claimed)
    return (
        TaskQueueSighting(task_queue=task_queue, seen=at, expires=at + DAY),
        WorkerSighting(
            key=worker_key(worker_id, task_queue), seen=at, expires=at + DAY, recent_tasks=runs
        ),
    )


async def test_sightings_create_then_refresh_task_queues_and_workers(store: Store) -> None:
    task_queue_seen, worker_seen = seen(claimed=range(15))
    await store.record_sightings([task_queue_seen], [worker_seen])
    # An earlier sighting arriving late moves nothing back; recent tasks keep the last 20.
    late_task_queue, late_worker = seen(at=NOW - HOUR, claimed=range(15, 25))
    await store.record_sightings([late_task_queue], [late_worker])

    assert await store.task_queue(TASK_QUEUE, now=NOW) == TaskQueueRecord(
        task_queue=TASK_QUEUE, expires=NOW + DAY, last_date_active=NOW
    )
    assert await store.task_queue(TASK_QUEUE, now=NOW + DAY) is None  # expired
    worker = await store.worker(worker_key())
    assert worker is not None
    assert (worker.first_claim, worker.last_date_active, worker.expires) == (NOW, NOW, NOW + DAY)
    assert [run.task_id for run in worker.recent_tasks] == [f"t{n}" for n in range(5, 25)]
    assert not worker.quarantined(NOW) and worker.quarantine_details == ()
    assert await store.worker(worker_key("unknown")) is None


async def test_task_queues_provisioners_and_workers_page_by_their_keys(store: Store) -> None:
    task_queues = [TaskQueue(p, wt) for p in ("a", "a-b", "b") for wt in ("x", "y")]
    sightings = [seen(f"w{n}", task_queue=task_queue) for n, task_queue in enumerate(task_queues)]
    more_workers = [seen(f"v{n}")[1] for n in range(3)]
    await store.record_sightings(
        [task_queue_seen for task_queue_seen, _ in sightings],
        [worker_seen for _, worker_seen in sightings] + more_workers,
    )

    async def every_page(read: Any) -> list[Any]:
        pages = [await read(None)]
        while pages[-1].next_after is not None:
            pages.append(await read(pages[-1].next_after))
        assert all(len(page.items) <= 2 for page in pages)
        return [item for page in pages for item in page.items]

    listed = await every_page(lambda after: store.task_queues(now=NOW, limit=2, after=after))
    assert [found.task_queue for found in listed] == task_queues
    of_a = await every_page(
        lambda after: store.task_queues(now=NOW, limit=1, after=after, provisioner_id="a")
    )
    assert [str(found.task_queue) for found in of_a] == ["a/x", "a/y"]
    provisioners = await every_page(lambda after: store.provisioners(now=NOW, limit=2, after=after))
    assert [found.provisioner_id for found in provisioners] == ["a", "a-b", "b"]
    assert await store.provisioner("a-b", now=NOW) == ProvisionerRecord(
        provisioner_id="a-b", expires=NOW + DAY, last_date_active=NOW
    )
    assert await store.provisioner("a-b", now=NOW + DAY) is None
    assert await store.provisioners(now=NOW + DAY, limit=2, after=None) == Page(
        items=[], next_after=None
    )
    in_a_x = await every_page(
        lambda after: store.workers(
            TaskQueue("a", "x"), now=NOW, quarantined=None, limit=2, after=after
        )
    )
    assert [found.key.worker_id for found in in_a_x] == ["w0"]
    in_prov_wt = await every_page(
        lambda after: store.workers(TASK_QUEUE, now=NOW, quarantined=None, limit=2, after=after)
    )
    assert [found.key.worker_id for found in in_prov_wt] == ["v0", "v1", "v2"]


async def test_quarantine_keeps_a_worker_listed_and_is_recorded(store: Store) -> None:
    await store.record_sightings([seen()[0]], [seen("q")[1], seen("free")[1]])
    note = QuarantineNote(
        client_id="admin", updated_at=NOW, quarantine_until=NOW + 3 * DAY, info="broken disk"
    )
    assert await store.quarantine_worker(worker_key("nobody"), note=note, expires=NOW) is None

    quarantined = await store.quarantine_worker(worker_key("q"), note=note, expires=NOW + 2 * DAY)
    assert quarantined is not None
    assert (quarantined.quarantine_until, quarantined.expires) == (NOW + 3 * DAY, NOW + 2 * DAY)
    assert quarantined.quarantine_details == (note,)
    assert await store.quarantined_workers(NOW) == {worker_key("q"): NOW + 3 * DAY}

    async def listed(now: int, quarantined: bool | None = None) -> list[str]:
        page = await store.workers(
            TASK_QUEUE, now=now, quarantined=quarantined, limit=10, after=None
        )
        return [found.key.worker_id for found in page.items]

    assert await listed(NOW) == ["free", "q"]
    assert await listed(NOW, True) == ["q"]
    assert await listed(NOW, False) == ["free"]
    # Expired, but quarantined: still listed, and the sweeper leaves it.
    later = NOW + 2 * DAY + HOUR
    assert await listed(later) == ["q"]
    assert await store.delete_expired_workers(later, 10) == 2  # "free", and the task queue
    assert await store.worker(worker_key("free")) is None

    lifted = QuarantineNote(client_id="admin", updated_at=NOW + 1, quarantine_until=NOW, info="")
    released = await store.quarantine_worker(worker_key("q"), note=lifted, expires=NOW)
    assert released is not None and released.quarantine_details == (note, lifted)
    assert await store.quarantined_workers(NOW) == {}
    assert await listed(later) == []
    assert await store.delete_expired_workers(later, 10) == 1


async def test_pending_and_claimed_runs_page_oldest_first(store: Store) -> None:
    for offset, task_id in enumerate(["c", "a", "d", "b"]):
        await create(store, task_id, now=NOW + offset)
    await create(store, "later", not_before=NOW + HOUR)
    await create(store, "elsewhere", worker_type="other")
    await claim(store, "d", now=NOW + 10)
    await claim(store, "c", now=NOW + 20)

    async def every_page(read: Any) -> list[str]:
        pages = [await read(None)]
        while pages[-1].next_after is not None:
            pages.append(await read(pages[-1].next_after))
        return [record.task_id for page in pages for record in page.items]

    pending = await every_page(lambda after: store.pending_runs(TASK_QUEUE, limit=1, after=after))
    assert pending == ["a", "b", "later"]
    claimed = await every_page(lambda after: store.claimed_runs(TASK_QUEUE, limit=1, after=after))
    assert claimed == ["d", "c"]
    empty = await store.pending_runs(TaskQueue("prov", "none"), limit=5, after=None)
    assert empty == Page(items=[], next_after=None)


async def test_run_counts_of_counts_many_queues_in_one_call(store: Store) -> None:
    await create(store, "p1")
    await create(store, "p2", not_before=NOW + MINUTE)
    await create(store, "r1")
    await claim(store, "r1")
    await create(store, "o1", worker_type="other")
    unknown = TaskQueue("prov", "none")

    counts = await store.run_counts_of([TASK_QUEUE, TaskQueue("prov", "other"), unknown], now=NOW)
    assert counts[TASK_QUEUE] == RunCounts(pending=1, delayed=1, running=1)
    assert counts[TaskQueue("prov", "other")] == RunCounts(pending=1, delayed=0, running=0)
    assert unknown not in counts
    assert await store.run_counts_of([], now=NOW) == {}


# --- hooks ------------------------------------------------------------------------------------


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


# --- store dispatch ---------------------------------------------------------------------------

QUEUE = TaskQueue("prov", "wt")


def prioritised(task_id: str, priority: str, *, now: int = NOW, **fields: Any) -> TaskRecord:
    """A new pending record of ``priority`` (and any other definition ``fields``)."""
    body = {**definition(), "priority": priority, **fields}
    return lifecycle.create(record_from_definition(task_id, body), now=now).record


def claiming(
    seen: list[str], *, take: int = 32, now: int = NOW
) -> Callable[[Sequence[TaskRecord]], list[tuple[TaskRecord, Sequence[QueueEvent]]]]:
    """A ``claim`` for :meth:`Store.claim_pending` that notes the ids handed over, in order,
    and claims the first ``take`` of them."""

    def claim(records: Sequence[TaskRecord]) -> list[tuple[TaskRecord, Sequence[QueueEvent]]]:
        seen.extend(record.task_id for record in records)
        return [(claimed(record, now=now).record, ()) for record in records[:take]]

    return claim


async def test_claim_pending_hands_out_the_highest_priority_then_the_earliest_visible(
    store: Store,
) -> None:
    for record in [
        prioritised("low-early", "lowest", now=NOW - 3),
        prioritised("high-late", "high", now=NOW - 1),
        prioritised("high-early", "high", now=NOW - 2),
        prioritised("delayed", "highest", notBefore=to_iso(NOW + MINUTE)),
        prioritised("elsewhere", "highest", workerType="other", taskQueueId="prov/other"),
    ]:
        assert await store.insert(record) is not None
    seen: list[str] = []

    claimed = await store.claim_pending(QUEUE, now=NOW, limit=10, claim=claiming(seen, take=2))

    assert seen == ["high-early", "high-late", "low-early"]
    assert [record.task_id for record in claimed] == ["high-early", "high-late"]
    for record in claimed:
        assert (record.state, record.version) == ("running", 2)
        assert await store.get(record.task_id) == record
    assert (await get(store, "low-early")).state == "pending"
    # the delayed run once visible; the claimed ones never again
    seen.clear()
    await store.claim_pending(QUEUE, now=NOW + MINUTE, limit=10, claim=claiming(seen, take=0))
    assert seen == ["delayed", "low-early"]


async def test_claim_pending_writes_only_what_claim_returns_and_up_to_the_limit(
    store: Store,
) -> None:
    for index in range(5):
        await create(store, f"t{index}", now=NOW - 10 + index)
    seen: list[str] = []

    assert await store.claim_pending(QUEUE, now=NOW, limit=3, claim=claiming(seen, take=0)) == []
    assert seen == ["t0", "t1", "t2"]
    assert {(await get(store, f"t{i}")).version for i in range(5)} == {1}
    assert await store.claim_pending(QUEUE, now=NOW, limit=0, claim=claiming(seen)) == []
    # nothing claimable (an empty queue, a run past its deadline): claim is not called
    seen.clear()
    assert await store.claim_pending(TaskQueue("prov", "none"), now=NOW, limit=3,
                                     claim=claiming(seen)) == []  # fmt: skip
    await store.claim_pending(QUEUE, now=NOW + HOUR, limit=5, claim=claiming(seen))
    assert seen == []


async def test_claim_pending_follows_the_retry_priority_of_automatic_retries(store: Store) -> None:
    retried = prioritised("retried", "lowest", retryPriority="highest", now=NOW - 5)
    assert await store.insert(retried) is not None
    await store.insert(prioritised("medium", "medium", now=NOW - 4))
    seen: list[str] = []
    await store.claim_pending(QUEUE, now=NOW, limit=1, claim=claiming(seen))
    assert seen == ["medium"]  # run 0 of "retried" has the task's lowest priority

    running = await claim(store, "retried")
    expired = lifecycle.expire_claim(
        running, taken_until=NOW + CLAIM, now=NOW + CLAIM, timing=TIMING
    )
    await apply(store, expired)
    await store.insert(prioritised("medium-2", "medium", now=NOW - 3))
    seen.clear()
    await store.claim_pending(QUEUE, now=NOW + CLAIM, limit=5, claim=claiming(seen, take=0))
    assert seen == ["retried", "medium-2"]


async def test_claim_pending_writes_the_events_with_the_claims(store: Store) -> None:
    await create(store, "t")
    event = QueueEvent(exchange="task-running", key="t", routing_key="r", cc=(), body={})

    def claim(records: Sequence[TaskRecord]) -> list[tuple[TaskRecord, Sequence[QueueEvent]]]:
        return [(record, [event]) for record, _ in claiming([])(records)]

    assert len(await store.claim_pending(QUEUE, now=NOW, limit=1, claim=claim)) == 1
    assert await store.outbox_depth() == 1


async def test_fifty_concurrent_claim_pending_calls_each_get_their_own_run(store: Store) -> None:
    records = [new_record(f"t{index:02d}", now=NOW - 100 + index) for index in range(50)]
    assert len(await store.insert_many(records)) == 50

    answers = await asyncio.gather(
        *(store.claim_pending(QUEUE, now=NOW, limit=1, claim=claiming([])) for _ in range(50))
    )

    # PostgreSQL: each caller skips the rows the others hold (SKIP LOCKED), so none comes back
    # empty-handed while runs are left; SQLite: one caller at a time
    assert [len(answer) for answer in answers] == [1] * 50
    assert sorted(answer[0].task_id for answer in answers) == sorted(r.task_id for r in records)
    assert {(await get(store, r.task_id)).state for r in records} == {"running"}
