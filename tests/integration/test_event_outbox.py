"""The event outbox of the store (docs/events.md), against SQLite and PostgreSQL alike: events
are written in the transaction of the change that causes them, only when it is written, and
:meth:`Store.publish_outbox` hands them out in order, deleting only what was confirmed,
retrying what the broker refused (its task's later messages waiting behind it) and parking
what it refused every time."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from coordinator.domain import lifecycle
from coordinator.domain.artifacts import Artifact
from coordinator.domain.events import (
    HOOK_EXCHANGES,
    REFUSALS_BEFORE_PARKING,
    RETRY_BACKOFF_MS,
    BrokerReply,
    OutboxEntry,
    QueueEvent,
    group_event,
    hook_event,
    task_events,
)
from coordinator.domain.records import TaskRecord, to_iso
from coordinator.store.base import Store
from coordinator.store.factory import store_from_url
from tests.fixtures.records import HOUR, NOW, TIMING, create, get, new_hook, new_record


def event(key: str, n: int) -> QueueEvent:
    return QueueEvent(
        exchange="task-pending",
        key=key,
        routing_key=f"primary.{key}.{n}._._.p.w.s.g._",
        cc=("route.a.b",),
        body={"n": n, "text": "héllo ✓"},
    )


def confirm(entries: Sequence[OutboxEntry]) -> BrokerReply:
    return BrokerReply(confirmed=frozenset(e.id for e in entries))


async def drain(store: Store, *, limit: int = 100, now: int = NOW) -> list[OutboxEntry]:
    """Every entry due at ``now``, handed out and confirmed."""
    seen: list[OutboxEntry] = []

    async def publish(entries: Sequence[OutboxEntry]) -> BrokerReply:
        seen.extend(entries)
        return confirm(entries)

    while (await store.publish_outbox(limit, publish, now=now)).published:
        pass
    return seen


async def test_insert_writes_the_events_of_an_inserted_task_only(store: Store) -> None:
    record = new_record("t1")
    assert await store.insert(record, events=[event("t1", 0), event("t1", 1)]) is not None
    # the same id again is refused, and so are its events
    assert await store.insert(record, events=[event("t1", 2)]) is None
    assert await store.outbox_depth() == 2
    entries = await drain(store)
    assert [e.event for e in entries] == [event("t1", 0), event("t1", 1)]
    assert await store.outbox_depth() == 0


async def test_no_events_no_outbox_rows(store: Store) -> None:
    await store.insert(new_record("t1"))
    await store.insert_many([new_record("t2")])
    assert await store.outbox_depth() == 0
    assert await drain(store) == []


async def test_compare_and_set_writes_events_only_when_it_wins(store: Store) -> None:
    stored = await store.insert(new_record("t1"))
    assert stored is not None
    claimed = lifecycle.claim(
        stored, run_id=0, worker_group="wg", worker_id="w", now=NOW, timing=TIMING
    ).record
    assert await store.compare_and_set(claimed, events=[event("t1", 1)]) is not None
    # the same version again loses, and writes nothing
    assert await store.compare_and_set(claimed, events=[event("t1", 2)]) is None
    assert [e.event.body["n"] for e in await drain(store)] == [1]


async def test_batches_write_the_events_of_the_records_written(store: Store) -> None:
    inserted = await store.insert_many(
        [new_record("a"), new_record("b")],
        events={"a": [event("a", 0)], "b": [event("b", 0)], "zz": [event("zz", 0)]},
    )
    assert inserted == {"a", "b"}
    a, b = await get(store, "a"), await get(store, "b")
    claim_a = lifecycle.claim(a, run_id=0, worker_group="g", worker_id="w", now=NOW, timing=TIMING)
    claim_b = lifecycle.claim(b, run_id=0, worker_group="g", worker_id="w", now=NOW, timing=TIMING)
    stale_b = claim_b.record.replace(version=b.version + 5)  # loses its compare-and-set
    written = await store.compare_and_set_many(
        [claim_a.record, stale_b], events={"a": [event("a", 1)], "b": [event("b", 1)]}
    )
    assert written[0] is not None and written[1] is None
    assert [(e.event.key, e.event.body["n"]) for e in await drain(store)] == [
        ("a", 0),
        ("b", 0),
        ("a", 1),
    ]


async def test_only_what_the_broker_confirmed_is_deleted(store: Store) -> None:
    for n in range(5):
        assert await store.insert(new_record(f"t{n}"), events=[event(f"t{n}", n)])
    handed: list[list[int]] = []

    async def confirm_two(entries: Sequence[OutboxEntry]) -> BrokerReply:
        handed.append([e.event.body["n"] for e in entries])
        return BrokerReply(confirmed=frozenset({entries[0].id, entries[2].id}))

    assert (await store.publish_outbox(10, confirm_two, now=NOW)).published == 2
    assert (await store.publish_outbox(10, confirm_two, now=NOW)).published == 2

    async def broker_down(entries: Sequence[OutboxEntry]) -> BrokerReply:
        return BrokerReply()

    assert (await store.publish_outbox(10, broker_down, now=NOW)).published == 0
    assert handed == [[0, 1, 2, 3, 4], [1, 3, 4]]
    assert [e.event.body["n"] for e in await drain(store)] == [3]


async def test_a_refused_message_is_retried_later_its_tasks_next_waiting_behind_it(
    store: Store,
) -> None:
    assert await store.insert(new_record("a"), events=[event("a", 0), event("a", 1)])
    assert await store.insert(new_record("b"), events=[event("b", 2)])

    async def refuse_a0(entries: Sequence[OutboxEntry]) -> BrokerReply:
        first = entries[0]
        assert first.event.body["n"] == 0
        return BrokerReply(
            confirmed=frozenset(e.id for e in entries[1:]), refused={first.id: "nack"}
        )

    # a0 refused; a1 confirmed, but kept to go out again after a0; b2 confirmed
    assert (await store.publish_outbox(10, refuse_a0, now=NOW)).published == 1
    assert await store.outbox_depth() == 2
    # during the backoff neither of a's messages is handed out, b's later ones are
    assert await store.insert(new_record("c"), events=[event("c", 3)])
    assert [e.event.body["n"] for e in await drain(store, now=NOW + 1)] == [3]
    # after it, in their order, a0 with its refusal counted
    later = await drain(store, now=NOW + RETRY_BACKOFF_MS)
    assert [(e.event.body["n"], e.attempts) for e in later] == [(0, 1), (1, 0)]


async def test_a_message_refused_every_time_is_parked(store: Store) -> None:
    assert await store.insert(new_record("a"), events=[event("a", 0), event("a", 1)])

    async def refuse_first(entries: Sequence[OutboxEntry]) -> BrokerReply:
        return BrokerReply(refused={entries[0].id: "too big"})

    now = NOW
    parked: list[tuple[OutboxEntry, str]] = []
    for _ in range(REFUSALS_BEFORE_PARKING):
        done = await store.publish_outbox(10, refuse_first, now=now)
        assert done.published == 0
        parked += done.parked
        now += 3_600_000  # past any backoff
    assert [(e.event.body["n"], reason) for e, reason in parked] == [(0, "too big")]
    # the outbox goes on with the task's next message
    assert [e.event.body["n"] for e in await drain(store, now=now)] == [1]
    assert await store.outbox_depth() == 0


async def test_the_events_of_a_task_life_come_out_in_order(store: Store) -> None:
    record = new_record("t1")
    assert await store.insert(record, events=task_events(None, record))
    stored = await get(store, "t1")
    claimed = lifecycle.claim(
        stored, run_id=0, worker_group="wg", worker_id="w", now=NOW, timing=TIMING
    ).record
    assert await store.compare_and_set(claimed, events=task_events(stored, claimed))
    stored = await get(store, "t1")
    done = lifecycle.report(
        stored, run_id=0, state="completed", reason="completed", now=NOW, timing=TIMING
    ).record
    assert await store.compare_and_set(done, events=task_events(stored, done))
    assert [e.event.exchange for e in await drain(store, limit=1)] == [
        "task-defined",
        "task-pending",
        "task-running",
        "task-completed",
    ]


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_replicas_take_turns_on_the_outbox(store: Store, store_url: str) -> None:
    """While one replica publishes a batch, another gets nothing (SKIP LOCKED), so no event
    is published twice by two replicas in the normal case, and the order holds."""
    for n in range(3):
        assert await store.insert(new_record(f"t{n}"), events=[event(f"t{n}", n)])
    other = store_from_url(store_url)
    await other.open()
    try:
        inside = asyncio.Event()
        release = asyncio.Event()

        async def slow(entries: Sequence[OutboxEntry]) -> BrokerReply:
            inside.set()
            await release.wait()
            return confirm(entries)

        async def never(entries: Sequence[OutboxEntry]) -> BrokerReply:
            raise AssertionError("the other replica must not get the batch")

        first = asyncio.ensure_future(store.publish_outbox(10, slow, now=NOW))
        await inside.wait()
        assert (await other.publish_outbox(10, never, now=NOW)).published == 0
        release.set()
        assert (await first).published == 3
        assert await other.outbox_depth() == 0
    finally:
        await other.close()


async def test_artifacts_write_their_events_with_them(store: Store) -> None:
    assert await store.insert(new_record("t1"))
    artifact = Artifact(
        task_id="t1",
        run_id=0,
        name="public/x",
        storage_type="error",
        content_type="application/json",
        expires=NOW + 1000,
        details={"reason": "file-missing-on-worker", "message": "m"},
        created=NOW,
    )
    assert await store.insert_artifact(artifact, events=[event("t1", 1)]) is None
    # a repeat is not inserted, and writes nothing; its replacement writes its own
    assert await store.insert_artifact(artifact, events=[event("t1", 2)]) is not None
    await store.replace_artifact(artifact, events=[event("t1", 3)])
    assert [e.event.body["n"] for e in await drain(store)] == [1, 3]


def _complete(record: TaskRecord, *, run_id: int = 0) -> TaskRecord:
    claimed = lifecycle.claim(
        record, run_id=run_id, worker_group="wg", worker_id="w", now=NOW, timing=TIMING
    ).record
    done = lifecycle.report(
        claimed, run_id=run_id, state="completed", reason="completed", now=NOW, timing=TIMING
    )
    assert done.resolved
    return done.record.replace(version=record.version)


async def test_the_last_resolution_of_a_group_writes_task_group_resolved_once(
    store: Store,
) -> None:
    """The resolving writes of a group's tasks, all at once (concurrent transactions on
    PostgreSQL): exactly one finds no unresolved task left and writes task-group-resolved,
    after its own message, with the group as getTaskGroup answers it."""
    records = [await create(store, f"r{n}") for n in range(12)]
    await store.seal_task_group("group", now=NOW + 5)
    written = await asyncio.gather(
        *(
            store.compare_and_set(_complete(r), events=[event(r.task_id, 1)], resolving=True)
            for r in records
        )
    )
    assert all(written)
    entries = await drain(store)
    resolved = [e for e in entries if e.exchange == "task-group-resolved"]
    assert len(resolved) == 1 and entries[-1] == resolved[0]
    group = await store.get_task_group("group")
    assert group is not None
    expected = group_event("task-group-resolved", group)
    assert resolved[0].event == expected
    assert resolved[0].event.body["sealed"] == to_iso(NOW + 5)


async def test_a_resolution_with_others_left_writes_no_group_message(store: Store) -> None:
    first, second, third = [await create(store, f"r{n}") for n in range(3)]
    assert await store.compare_and_set(_complete(first), events=[event("r0", 1)], resolving=True)
    # a batch resolving the rest writes it once, after the batch's own messages
    written = await store.compare_and_set_many(
        [_complete(second), _complete(third)],
        events={"r1": [event("r1", 1)], "r2": [event("r2", 1)]},
        resolving={"r1", "r2"},
    )
    assert all(written)
    assert [(e.exchange, e.key) for e in await drain(store)] == [
        ("task-pending", "r0"),
        ("task-pending", "r1"),
        ("task-pending", "r2"),
        ("task-group-resolved", "group"),
    ]


async def test_a_rerun_reopens_its_group_which_resolves_again(store: Store) -> None:
    """A resolved group whose task is rerun has an unresolved task again: no message until
    the rerun resolves, then task-group-resolved once more."""
    first, second = [await create(store, f"r{n}") for n in range(2)]
    assert await store.compare_and_set(_complete(first), events=[event("r0", 1)], resolving=True)
    done = await store.compare_and_set(_complete(second), events=[event("r1", 1)], resolving=True)
    assert done is not None
    rerun = lifecycle.rerun(done, now=NOW).record.replace(version=done.version)
    reopened = await store.compare_and_set(rerun, events=[event("r1", 2)])
    assert reopened is not None
    assert [(e.exchange, e.key) for e in await drain(store)] == [
        ("task-pending", "r0"),
        ("task-pending", "r1"),
        ("task-group-resolved", "group"),
        ("task-pending", "r1"),
    ]
    again = _complete(reopened, run_id=1)
    assert await store.compare_and_set(again, events=[event("r1", 3)], resolving=True)
    assert [(e.exchange, e.key) for e in await drain(store)] == [
        ("task-pending", "r1"),
        ("task-group-resolved", "group"),
    ]


async def test_an_unresolved_task_that_expires_leaves_its_group_to_the_others(
    store: Store,
) -> None:
    """Expiry deletes an unresolved task: the group resolves with the last task left."""
    await create(store, "early", expires=NOW + 2 * HOUR)
    late = await create(store, "late")
    assert await store.delete_expired(NOW + 2 * HOUR, 100) == 1
    assert await store.compare_and_set(_complete(late), events=[event("late", 1)], resolving=True)
    assert [(e.exchange, e.key) for e in await drain(store)] == [
        ("task-pending", "late"),
        ("task-group-resolved", "group"),
    ]


@pytest.mark.parametrize("left", [1, 5])
async def test_sqlite_counts_each_groups_unresolved_tasks_afresh_when_it_opens(
    tmp_path: Path, left: int
) -> None:
    """A group's count of its unresolved tasks left wrong in the file (by a release that did
    not keep it, run in between) is counted again when the store opens: the group resolves
    with its last task, not before it and not never."""
    path = tmp_path / "store.db"
    store = store_from_url(f"sqlite://{path}")
    await store.open()
    first, second = [await create(store, f"r{n}") for n in range(2)]
    await store.close()
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE task_groups SET unresolved = ?", (left,))
    store = store_from_url(f"sqlite://{path}")
    await store.open()
    try:
        assert await store.compare_and_set(
            _complete(first), events=[event("r0", 1)], resolving=True
        )
        assert await store.compare_and_set(
            _complete(second), events=[event("r1", 1)], resolving=True
        )
        assert [(e.exchange, e.key) for e in await drain(store)] == [
            ("task-pending", "r0"),
            ("task-pending", "r1"),
            ("task-group-resolved", "group"),
        ]
    finally:
        await store.close()


async def test_concurrent_resolving_batches_write_each_group_resolved_once_after_its_tasks(
    store: Store,
) -> None:
    """Batches each resolving tasks of two groups, all at once: of the last resolutions of
    each group exactly one writes its task-group-resolved, after every message of its tasks."""
    records = [
        await create(store, f"{group}-{n}", group=group) for group in ("ga", "gb") for n in range(8)
    ]
    batches = [records[n::4] for n in range(4)]  # each batch: two tasks of each group
    written = await asyncio.gather(
        *(
            store.compare_and_set_many(
                [_complete(r) for r in batch],
                events={r.task_id: [event(r.task_id, 1)] for r in batch},
                resolving={r.task_id for r in batch},
            )
            for batch in batches
        )
    )
    assert all(all(batch) for batch in written)
    entries = await drain(store)
    for group in ("ga", "gb"):
        resolved = [
            n
            for n, e in enumerate(entries)
            if (e.exchange, e.key) == ("task-group-resolved", group)
        ]
        own = [n for n, e in enumerate(entries) if e.key.startswith(f"{group}-")]
        assert len(resolved) == 1 and len(own) == 8
        assert max(own) < resolved[0]


async def test_a_seal_writes_task_group_sealed_in_its_transaction(store: Store) -> None:
    await create(store, "r0")
    assert await store.seal_task_group("unknown", now=NOW, announce=True) is None
    sealed = await store.seal_task_group("group", now=NOW + 1, announce=True)
    again = await store.seal_task_group("group", now=NOW + 2, announce=True)
    assert sealed is not None and again == sealed  # every call announces, as Taskcluster's
    assert await store.seal_task_group("group", now=NOW + 3) == sealed  # publishing off
    expected = group_event("task-group-sealed", sealed)
    assert [e.event for e in await drain(store)] == [expected, expected]


async def test_hook_writes_write_their_events_only_when_they_write(store: Store) -> None:
    hook = new_hook("a/b", next_due=None)
    created, updated, deleted = (hook_event(name, "g", "a/b") for name in HOOK_EXCHANGES)
    assert await store.insert_hook(hook, events=[created])
    assert not await store.insert_hook(hook, events=[created])
    stored = await store.compare_and_set_hook(hook, events=[updated])
    assert stored is not None
    assert await store.compare_and_set_hook(hook, events=[updated]) is None  # stale version
    assert await store.delete_hook("g", "a/b", events=[deleted])
    assert not await store.delete_hook("g", "a/b", events=[deleted])
    assert [e.event for e in await drain(store)] == [created, updated, deleted]


async def test_a_batch_closes_with_its_summary_only_when_every_record_was_written(
    store: Store,
) -> None:
    """compare_and_set_many's ``closing`` (task-group-priority-changed) goes out after the
    batch's own messages, in its transaction, when the batch wrote every record."""
    a, b = await create(store, "a"), await create(store, "b")
    counted: list[int] = []

    def closing(count: int) -> list[QueueEvent]:
        counted.append(count)
        return [event("group", count)]

    claim_a = lifecycle.claim(a, run_id=0, worker_group="g", worker_id="w", now=NOW, timing=TIMING)
    claim_b = lifecycle.claim(b, run_id=0, worker_group="g", worker_id="w", now=NOW, timing=TIMING)
    stale_b = claim_b.record.replace(version=b.version + 5)
    written = await store.compare_and_set_many(
        [claim_a.record, stale_b],
        events={"a": [event("a", 1)], "b": [event("b", 1)]},
        closing=closing,
    )
    assert written[0] is not None and written[1] is None and counted == []
    written = await store.compare_and_set_many(
        [claim_b.record], events={"b": [event("b", 1)]}, closing=closing
    )
    assert written[0] is not None and counted == [1]
    assert [(e.key, e.event.body["n"]) for e in await drain(store)] == [
        ("a", 1),
        ("b", 1),
        ("group", 1),
    ]
