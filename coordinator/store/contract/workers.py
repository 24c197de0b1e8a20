"""The workers part of the store contract: task queues, provisioners and workers as sightings
create and refresh them, quarantine, a task queue's pending and running runs and their counts,
and the expiry of these records.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from coordinator.domain.listings import Key, Page, RunCounts
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import (
    ProvisionerRecord,
    QuarantineNote,
    TaskQueueRecord,
    TaskQueueSighting,
    WorkerKey,
    WorkerRecord,
    WorkerSighting,
)


class WorkerStore(abc.ABC):
    """Task queues, provisioners and workers."""

    # --- sightings and listings -----------------------------------------------------------

    @abc.abstractmethod
    async def record_sightings(
        self, task_queues: Sequence[TaskQueueSighting], workers: Sequence[WorkerSighting]
    ) -> None:
        """Create or refresh the task queues and workers seen, in one transaction.

        Each queue and worker appears at most once. A new record starts at its sighting
        (``lastDateActive``; a worker's ``firstClaim`` too, and a ``quarantineUntil``
        :data:`~coordinator.domain.workers.NEVER_QUARANTINED` before it); an existing one
        keeps the later ``lastDateActive`` and ``expires`` of the two, and a worker appends the
        sighting's recent tasks to its own, keeping the last
        :data:`~coordinator.domain.workers.RECENT_TASKS`.
        """

    @abc.abstractmethod
    async def task_queue(self, task_queue: TaskQueue, *, now: int) -> TaskQueueRecord | None:
        """The task queue, or ``None`` if unknown or expired (``expires <= now``)."""

    @abc.abstractmethod
    async def task_queues(
        self, *, now: int, limit: int, after: Key | None, provisioner_id: str | None = None
    ) -> Page[TaskQueueRecord, Key]:
        """Unexpired task queues (of one provisioner, if given), by the key
        ``(provisionerId, workerType)``."""

    @abc.abstractmethod
    async def provisioner(self, provisioner_id: str, *, now: int) -> ProvisionerRecord | None:
        """The provisioner of the unexpired task queues of ``provisioner_id``, or ``None``."""

    @abc.abstractmethod
    async def provisioners(
        self, *, now: int, limit: int, after: Key | None
    ) -> Page[ProvisionerRecord, Key]:
        """Provisioners of the unexpired task queues, by the key ``(provisionerId,)``."""

    @abc.abstractmethod
    async def worker(self, key: WorkerKey) -> WorkerRecord | None:
        """The worker, expired or not; ``None`` if unknown."""

    @abc.abstractmethod
    async def workers(
        self,
        task_queue: TaskQueue,
        *,
        now: int,
        quarantined: bool | None,
        limit: int,
        after: Key | None,
    ) -> Page[WorkerRecord, Key]:
        """The task queue's listed workers (unexpired or quarantined), only the quarantined
        or only the others when ``quarantined`` says, by the key ``(workerGroup, workerId)``."""

    # --- quarantine -----------------------------------------------------------------------

    @abc.abstractmethod
    async def quarantine_worker(
        self, key: WorkerKey, *, note: QuarantineNote, expires: int
    ) -> WorkerRecord | None:
        """Quarantine the worker until ``note.quarantine_until`` (a past time lifts it),
        append ``note`` to its details and keep it listed until at least ``expires``; the
        worker as now stored, or ``None`` if unknown (nothing is created)."""

    @abc.abstractmethod
    async def quarantined_workers(self, now: int) -> dict[WorkerKey, int]:
        """``quarantineUntil`` of every worker quarantined at ``now``."""

    # --- a task queue's runs --------------------------------------------------------------

    @abc.abstractmethod
    async def pending_runs(
        self, task_queue: TaskQueue, *, limit: int, after: Key | None
    ) -> Page[TaskRecord, Key]:
        """Tasks of the queue whose last run is pending, by the key ``(visibleAt, taskId)``:
        the oldest claimable first."""

    @abc.abstractmethod
    async def claimed_runs(
        self, task_queue: TaskQueue, *, limit: int, after: Key | None
    ) -> Page[TaskRecord, Key]:
        """Tasks of the queue whose last run is running, by the key ``(started, taskId)``:
        the oldest claim first."""

    @abc.abstractmethod
    async def run_counts(self, provisioner_id: str, worker_type: str, *, now: int) -> RunCounts:
        """Exact pending, delayed (not visible at ``now``) and running counts of one queue."""

    @abc.abstractmethod
    async def run_counts_of(
        self, task_queues: Sequence[TaskQueue], *, now: int
    ) -> dict[TaskQueue, RunCounts]:
        """:meth:`run_counts` of distinct queues in one query; a queue with neither pending
        nor running runs may be absent."""

    # --- expiry ---------------------------------------------------------------------------

    @abc.abstractmethod
    async def delete_expired_workers(self, now: int, limit: int) -> int:
        """Delete up to ``limit`` workers expired and not quarantined at ``now``, and up to
        ``limit`` expired task queues; return how many records were deleted."""
