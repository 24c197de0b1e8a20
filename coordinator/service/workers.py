"""WorkerService: the task queues and workers the coordinator has seen, quarantine, and the
reads of task queues, provisioners, worker types, workers and a queue's pending and claimed runs.

**Sightings never cost a request a store round trip.** createTask, claimTask, claimWork (each
poll and each claim) and reclaimTask only note what they saw in an in-memory buffer, one entry
per task queue and per worker; :meth:`WorkerService.flush` writes the whole buffer in one store
call, run about every second by the sightings flusher
(:mod:`coordinator.resolvers.sightings_flusher`), and first by every read here, so a replica
reads its own sightings. As Taskcluster does, a sighting that claimed nothing is written at most
once per :data:`SEEN_INTERVAL` per queue or worker and process, so ``lastDateActive`` may lag by
that much; a claim is always written, since it adds to the worker's ``recentTasks``. A failed
write puts its batch back for the next one.

**Quarantine is checked without a store read.** claimTask and claimWork ask
:meth:`WorkerService.quarantined_until`, answered from a per-process copy of the quarantined
workers that the quarantine refresher (:mod:`coordinator.resolvers.quarantine_refresher`)
reloads about every second, so replicas agree within a second, and that quarantineWorker
updates at once on the replica that served it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TypeVar

from coordinator.domain.errors import Conflict, NotFound
from coordinator.domain.listings import Key, Page, ResolvedCounts, RunCounts
from coordinator.domain.records import TaskRecord, to_iso
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import (
    SEEN_EXPIRY,
    UNSPECIFIED,
    ProvisionerRecord,
    QuarantineNote,
    RecentTask,
    TaskQueueRecord,
    TaskQueueSighting,
    WorkerKey,
    WorkerRecord,
    WorkerSighting,
)
from coordinator.service.clock import Clock, wall_clock
from coordinator.store.base import Store

log = logging.getLogger(__name__)

SEEN_INTERVAL = 30 * 60_000
"""At most how often (ms) a sighting that claimed nothing is written for one task queue or
worker by one process (Taskcluster's ``updateFrequency``)."""

K = TypeVar("K", TaskQueue, WorkerKey)
S = TypeVar("S", TaskQueueSighting, WorkerSighting)


def _add(buffer: dict[K, S], key: K, sighting: S, *, older: bool = False) -> None:
    """Merge ``sighting`` into the buffer's entry for ``key``; ``older`` when it precedes what
    the buffer holds (a batch put back after a failed write)."""
    present = buffer.get(key)
    if present is None:
        buffer[key] = sighting
    elif older:
        buffer[key] = sighting.merged(present)
    else:
        buffer[key] = present.merged(sighting)


def _task_queue_order(task_queue: TaskQueue) -> tuple[str, str]:
    return (task_queue.provisioner_id, task_queue.worker_type)


def _worker_order(key: WorkerKey) -> tuple[str, str, str, str]:
    return (*_task_queue_order(key.task_queue), key.worker_group, key.worker_id)


class WorkerService:
    """Task-queue and worker records of one coordinator process.

    :param clock: epoch-milliseconds clock; tests inject their own.
    """

    def __init__(self, *, store: Store, clock: Clock = wall_clock) -> None:
        self._store = store
        self.clock = clock
        self._task_queues: dict[TaskQueue, TaskQueueSighting] = {}
        self._workers: dict[WorkerKey, WorkerSighting] = {}
        self._written: dict[TaskQueue | WorkerKey, int] = {}
        """When this process last buffered a sighting of each queue and worker."""
        self._forgotten = clock()
        self._flushing = asyncio.Lock()
        self._quarantined: dict[WorkerKey, int] = {}
        # A reload and a quarantineWorker of this process never interleave, so a reload that
        # read the store just before a quarantine was written cannot undo it here.
        self._quarantining = asyncio.Lock()

    # --- sightings (in memory) ------------------------------------------------------------

    def task_created(self, record: TaskRecord) -> None:
        """createTask: the task's queue is seen, listed at least until the task's deadline."""
        now = self.clock()
        task_queue = TaskQueue(record.provisioner_id, record.worker_type)
        self._see_task_queue(task_queue, now=now, expires=max(now + SEEN_EXPIRY, record.deadline))

    def worker_seen(self, key: WorkerKey) -> None:
        """The worker asked for work (a claimWork poll)."""
        self._see_worker(key, ())

    def run_held(self, record: TaskRecord, run_id: int, *, claimed: bool) -> None:
        """The worker of run ``run_id`` of ``record`` claimed it (``claimed``: it joins the
        worker's recent tasks) or reclaimed it."""
        run = record.runs[run_id]
        assert run.worker_group is not None and run.worker_id is not None  # a held run
        key = WorkerKey(
            task_queue=TaskQueue(record.provisioner_id, record.worker_type),
            worker_group=run.worker_group,
            worker_id=run.worker_id,
        )
        self._see_worker(
            key, (RecentTask(task_id=record.task_id, run_id=run_id),) if claimed else ()
        )

    def _see_worker(self, key: WorkerKey, claimed: tuple[RecentTask, ...]) -> None:
        now = self.clock()
        expires = now + SEEN_EXPIRY
        self._see_task_queue(key.task_queue, now=now, expires=expires)
        if self._due(key, now) or claimed:
            sighting = WorkerSighting(key=key, seen=now, expires=expires, recent_tasks=claimed)
            _add(self._workers, key, sighting)

    def _see_task_queue(self, task_queue: TaskQueue, *, now: int, expires: int) -> None:
        if self._due(task_queue, now):
            _add(
                self._task_queues,
                task_queue,
                TaskQueueSighting(task_queue=task_queue, seen=now, expires=expires),
            )

    def _due(self, key: TaskQueue | WorkerKey, now: int) -> bool:
        """Whether a sighting of ``key`` that claimed nothing is to be written now (and if so,
        the next one only after :data:`SEEN_INTERVAL`)."""
        written = self._written.get(key)
        if written is not None and now - written < SEEN_INTERVAL:
            return False
        self._written[key] = now
        return True

    async def flush(self) -> int:
        """Write the buffered sightings in one store call; how many records it wrote."""
        async with self._flushing:
            now = self.clock()
            if now - self._forgotten >= SEEN_INTERVAL:
                self._forgotten = now
                self._written = {k: t for k, t in self._written.items() if now - t < SEEN_INTERVAL}
            task_queues, self._task_queues = self._task_queues, {}
            workers, self._workers = self._workers, {}
            try:
                # In one order on every replica, so that two replicas writing the same rows
                # at once take their row locks in the same order and cannot deadlock.
                await self._store.record_sightings(
                    [
                        task_queues[task_queue]
                        for task_queue in sorted(task_queues, key=_task_queue_order)
                    ],
                    [workers[key] for key in sorted(workers, key=_worker_order)],
                )
            except BaseException:
                for task_queue, task_queue_sighting in task_queues.items():
                    _add(self._task_queues, task_queue, task_queue_sighting, older=True)
                for key, worker_sighting in workers.items():
                    _add(self._workers, key, worker_sighting, older=True)
                raise
            return len(task_queues) + len(workers)

    # --- quarantine -----------------------------------------------------------------------

    def quarantined_until(self, key: WorkerKey) -> int | None:
        """Until when the worker is quarantined, or ``None`` (from this process's copy)."""
        until = self._quarantined.get(key)
        return until if until is not None and until > self.clock() else None

    def refuse_quarantined(self, key: WorkerKey) -> None:
        """:raises Conflict: the worker is quarantined (claimTask)."""
        until = self.quarantined_until(key)
        if until is not None:
            raise Conflict(
                f"worker {key} is quarantined until {to_iso(until)}: it may not claim tasks"
            )

    async def refresh_quarantines(self) -> int:
        """Reload the quarantined workers from the store; how many changed since the last
        reload (were quarantined, or released)."""
        async with self._quarantining:
            found = await self._store.quarantined_workers(self.clock())
            before, self._quarantined = self._quarantined, found
        return sum(found.get(key) != before.get(key) for key in found.keys() | before.keys())

    async def quarantine(
        self, key: WorkerKey, *, until: int, info: str | None, client_id: str
    ) -> WorkerRecord:
        """quarantineWorker: no claims by the worker until ``until`` (a past time lifts it).

        :raises NotFound: no such worker (it must have been seen or declared).
        """
        await self.flush()  # a worker seen a moment ago exists
        now = self.clock()
        note = QuarantineNote(
            client_id=client_id, updated_at=now, quarantine_until=until, info=info or UNSPECIFIED
        )
        async with self._quarantining:
            found = await self._store.quarantine_worker(key, note=note, expires=now + SEEN_EXPIRY)
            if found is None:
                raise NotFound(f"worker {key} does not exist")
            if found.quarantined(now):
                self._quarantined[key] = until
            else:
                self._quarantined.pop(key, None)
        log.info(
            "worker quarantine set provisionerId=%s workerType=%s workerGroup=%s workerId=%s "
            "quarantineUntil=%s clientId=%s",
            key.task_queue.provisioner_id,
            key.task_queue.worker_type,
            key.worker_group,
            key.worker_id,
            to_iso(until),
            client_id,
        )
        return found

    # --- declareWorker --------------------------------------------------------------------

    async def declare(self, key: WorkerKey, *, expires: int | None) -> WorkerRecord:
        """declareWorker: see the worker and its queue now, listed until at least ``expires``
        (a day from now when not given)."""
        now = self.clock()
        until = now + SEEN_EXPIRY if expires is None else expires
        await self._store.record_sightings(
            [TaskQueueSighting(task_queue=key.task_queue, seen=now, expires=until)],
            [WorkerSighting(key=key, seen=now, expires=until)],
        )
        await self.flush()
        found = await self._store.worker(key)
        if found is None:  # deleted as expired in between: declared with a past expiry
            raise NotFound(f"worker {key} expired as it was declared")
        return found

    # --- reads ----------------------------------------------------------------------------

    async def task_queue(self, task_queue: TaskQueue) -> TaskQueueRecord:
        """getTaskQueue, getWorkerType. :raises NotFound: unknown or expired."""
        await self.flush()
        found = await self._store.task_queue(task_queue, now=self.clock())
        if found is None:
            raise NotFound(f"task queue {task_queue} not found (never seen, or expired)")
        return found

    async def task_queues(
        self, *, limit: int, after: Key | None, provisioner_id: str | None = None
    ) -> Page[TaskQueueRecord, Key]:
        """listTaskQueues; listWorkerTypes with ``provisioner_id``."""
        await self.flush()
        return await self._store.task_queues(
            now=self.clock(), limit=limit, after=after, provisioner_id=provisioner_id
        )

    async def provisioner(self, provisioner_id: str) -> ProvisionerRecord:
        """getProvisioner. :raises NotFound: no unexpired task queue of the provisioner."""
        await self.flush()
        found = await self._store.provisioner(provisioner_id, now=self.clock())
        if found is None:
            raise NotFound(f"provisioner {provisioner_id} not found (no task queue of it seen)")
        return found

    async def provisioners(self, *, limit: int, after: Key | None) -> Page[ProvisionerRecord, Key]:
        await self.flush()
        return await self._store.provisioners(now=self.clock(), limit=limit, after=after)

    async def worker(self, key: WorkerKey) -> WorkerRecord:
        """getWorker. :raises NotFound: unknown, expired (and not quarantined), or its task
        queue is unknown or expired."""
        await self.flush()
        now = self.clock()
        found = await self._store.worker(key)
        if (
            found is None
            or not found.listed(now)
            or await self._store.task_queue(key.task_queue, now=now) is None
        ):
            raise NotFound(f"worker {key} not found (never seen, or expired)")
        return found

    async def workers(
        self, task_queue: TaskQueue, *, quarantined: bool | None, limit: int, after: Key | None
    ) -> Page[WorkerRecord, Key]:
        """listWorkers: ``quarantined`` true or false keeps only those, ``None`` both."""
        await self.flush()
        return await self._store.workers(
            task_queue, now=self.clock(), quarantined=quarantined, limit=limit, after=after
        )

    async def pending_runs(
        self, task_queue: TaskQueue, *, limit: int, after: Key | None
    ) -> Page[TaskRecord, Key]:
        """listPendingTasks: the queue's pending runs, the oldest claimable first."""
        return await self._store.pending_runs(task_queue, limit=limit, after=after)

    async def claimed_runs(
        self, task_queue: TaskQueue, *, limit: int, after: Key | None
    ) -> Page[TaskRecord, Key]:
        """listClaimedTasks: the queue's running runs, the oldest claim first."""
        return await self._store.claimed_runs(task_queue, limit=limit, after=after)

    async def run_counts(self, task_queues: Sequence[TaskQueue]) -> list[RunCounts]:
        """Exact counts of each of ``task_queues`` (distinct), in order, in one store query."""
        found = await self._store.run_counts_of(task_queues, now=self.clock())
        none = RunCounts(pending=0, delayed=0, running=0)
        return [found.get(task_queue, none) for task_queue in task_queues]

    async def resolved_counts(
        self, task_queues: Sequence[TaskQueue], *, within_s: int
    ) -> tuple[int, list[ResolvedCounts]]:
        """When the last ``within_s`` seconds began on this coordinator's clock, and the tasks
        of each of ``task_queues`` (distinct) resolved since then, in order, in one store
        query."""
        since = self.clock() - within_s * 1000
        found = await self._store.resolved_counts_of(task_queues, since=since)
        return since, [found.get(task_queue, ResolvedCounts()) for task_queue in task_queues]

    # --- the worker sweeper ---------------------------------------------------------------

    async def delete_expired(self, limit: int) -> int:
        """Delete expired workers (unless quarantined) and task queues; how many."""
        return await self._store.delete_expired_workers(self.clock(), limit)
