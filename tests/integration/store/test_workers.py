"""The workers part of the store contract
(:class:`~coordinator.store.contract.workers.WorkerStore`), run against SQLite and PostgreSQL
alike: sightings, listings by key, quarantine, a task queue's runs and their counts.
"""

from __future__ import annotations

from typing import Any

from coordinator.domain.listings import Page, RunCounts
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
from coordinator.store.base import Store
from tests.fixtures.records import (
    DAY,
    HOUR,
    MINUTE,
    NOW,
    claim,
    create,
    report,
)

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
