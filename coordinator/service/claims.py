"""ClaimPolicy and CreatePolicy: the one operation each way work enters and leaves the queue.

Every claim, whatever the route (claimTask after an Azure hint, claimRuns for a batch of
hints, claimWork's long poll under either dispatch), passes the same three steps here, in this
order: the worker must not be quarantined (:meth:`WorkerService.refuse_quarantined`), the task
queue's pause and limits must let the claim through (the gate,
:meth:`QueueControlService.claiming`), and the worker is then seen holding the run (its
sighting, :meth:`WorkerService.run_held`). Reclaims add the sighting only; the watches of
running runs (watchRuns) none. Every create
(createTask, createTasks, a hook's fire) likewise records its task queue's sighting here. So a
rule that applies to every claim or every create (a concurrency key, a cancellation, a
deduplication key) is added in one place, and no route can bypass it.

Scopes are not checked here: they are the API's (a hook's fire checks its hook's scopes before
calling :meth:`CreatePolicy.create_task`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.errors import DomainError
from coordinator.domain.records import Run, TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import WorkerKey
from coordinator.service.dispatch import WorkDispatch
from coordinator.service.queue_controls import QueueControlService
from coordinator.service.tasks import Permit, TaskService
from coordinator.service.workers import WorkerService


class ClaimPolicy:
    """Claims and reclaims of runs, for one coordinator process.

    :param dispatch: claimWork's long poll under the configured dispatch.
    :param controls: the gate of paused and limited task queues.
    :param workers: the quarantined workers, and the sightings of those that claim.
    """

    def __init__(
        self,
        *,
        service: TaskService,
        dispatch: WorkDispatch,
        controls: QueueControlService,
        workers: WorkerService,
    ) -> None:
        self._service = service
        self._dispatch = dispatch
        self._controls = controls
        self._workers = workers

    async def claim_task(
        self, task_id: str, run_id: int, *, worker_group: str, worker_id: str, read: TaskRecord
    ) -> TaskRecord:
        """claimTask (``read``: the task as just read, which tells its queue).

        :raises Conflict: the worker is quarantined.
        :raises Throttled: the queue lets no claim through now.
        """
        self._workers.refuse_quarantined(_worker(read, worker_group, worker_id))
        claimed = await self._controls.claim_task(
            task_id, run_id, worker_group=worker_group, worker_id=worker_id, read=read
        )
        self._workers.run_held(claimed, run_id, claimed=True)
        return claimed

    async def claim_runs(
        self,
        runs: Sequence[tuple[str, int]],
        *,
        worker_group: str,
        worker_id: str,
        permit: Permit,
    ) -> list[TaskRecord | DomainError]:
        """claimRuns: :meth:`claim_task` for each ``(taskId, runId)``, each refused on its own
        (``permit``: the caller's right to claim the run as stored)."""

        def permitted(record: TaskRecord, run_id: int) -> None:
            permit(record, run_id)
            self._workers.refuse_quarantined(_worker(record, worker_group, worker_id))

        results = await self._controls.claim_runs(
            runs, worker_group=worker_group, worker_id=worker_id, permit=permitted
        )
        self._held(runs, results, claimed=True)
        return results

    async def claim_work(
        self,
        task_queue: TaskQueue,
        *,
        worker_group: str,
        worker_id: str,
        count: int,
        weights: ClaimWeights | None = None,
        disconnected: Callable[[], bool],
    ) -> list[TaskRecord]:
        """claimWork's long poll for up to ``count`` runs. A quarantined worker gets nothing,
        at the end of the poll, as Taskcluster answers it; the worker is seen either way.
        ``weights``: the worker's, which store dispatch claims by (strictly by priority
        without).

        :param disconnected: true once the client went away; the poll then stops.
        """
        worker = WorkerKey(task_queue=task_queue, worker_group=worker_group, worker_id=worker_id)
        self._workers.worker_seen(worker)
        claimed = await self._dispatch.claim_work(
            task_queue,
            worker_group=worker_group,
            worker_id=worker_id,
            count=count,
            weights=weights,
            disconnected=disconnected,
            quarantined=lambda: self._workers.quarantined_until(worker) is not None,
        )
        for record in claimed:
            self._workers.run_held(record, len(record.runs) - 1, claimed=True)
        return claimed

    async def reclaim(self, task_id: str, run_id: int) -> TaskRecord:
        """reclaimTask."""
        record = await self._service.reclaim(task_id, run_id)
        self._workers.run_held(record, run_id, claimed=False)
        return record

    async def reclaim_runs(
        self, runs: Sequence[tuple[str, int]], *, permit: Permit
    ) -> list[TaskRecord | DomainError]:
        """reclaimRuns: :meth:`reclaim` for each ``(taskId, runId)``, each refused on its own."""
        results = await self._service.reclaim_runs(runs, permit=permit)
        self._held(runs, results, claimed=False)
        return results

    async def watch_runs(
        self,
        runs: Sequence[tuple[str, int]],
        *,
        permit: Permit,
        disconnected: Callable[[], bool],
    ) -> list[tuple[str, int, Run | DomainError]]:
        """watchRuns: the runs of ``runs`` no longer running or refused, as soon as there is
        one, within the long poll (:meth:`TaskService.watch_runs`)."""
        return await self._service.watch_runs(
            runs, permit=permit, timeout_s=self._dispatch.long_poll_s, disconnected=disconnected
        )

    def _held(
        self,
        runs: Sequence[tuple[str, int]],
        results: Sequence[TaskRecord | DomainError],
        *,
        claimed: bool,
    ) -> None:
        for (_, run_id), result in zip(runs, results, strict=True):
            if isinstance(result, TaskRecord):
                self._workers.run_held(result, run_id, claimed=claimed)


class CreatePolicy:
    """Creates of tasks, for one coordinator process: whoever creates them (a producer's
    createTask or createTasks, a hook's fire), the task queue is seen."""

    def __init__(self, *, service: TaskService, workers: WorkerService) -> None:
        self._service = service
        self._workers = workers

    async def create_task(
        self, task_id: str, body: Mapping[str, Any], *, traceparent: str | None = None
    ) -> TaskRecord:
        """createTask (see :meth:`TaskService.create_task`)."""
        record = await self._service.create_task(task_id, body, traceparent=traceparent)
        self._workers.task_created(record)
        return record

    async def create_tasks(
        self, items: Sequence[tuple[str, Mapping[str, Any]]], *, traceparent: str | None = None
    ) -> list[TaskRecord | DomainError]:
        """createTasks (see :meth:`TaskService.create_tasks`): each item created or refused on
        its own."""
        outcomes = await self._service.create_tasks(items, traceparent=traceparent)
        for outcome in outcomes:
            if isinstance(outcome, TaskRecord):
                self._workers.task_created(outcome)
        return outcomes


def _worker(record: TaskRecord, worker_group: str, worker_id: str) -> WorkerKey:
    """The worker ``worker_group/worker_id`` of the task queue of ``record``."""
    return WorkerKey(
        task_queue=TaskQueue(record.provisioner_id, record.worker_type),
        worker_group=worker_group,
        worker_id=worker_id,
    )
