"""WorkDispatch: how a task queue's work reaches workers and provisioners: the signed poll
URLs of its Azure queues, claimWork, and the pending count (from Azure, falling back to the
store when Azure is down).

A coordinator started without a storage account hands out no work: it keeps tasks and answers
reads, and its pending runs keep their hints unconfirmed until it runs with one again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordinator.azure.errors import QueueUnavailable
from coordinator.azure.queues import PollUrls, QueueService
from coordinator.domain.errors import NotFound
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import WorkerKey
from coordinator.service.claim_work import ClaimWork
from coordinator.service.queue_controls import QueueControlService
from coordinator.service.tasks import TaskService
from coordinator.service.workers import WorkerService

log = logging.getLogger(__name__)

NO_AZURE = (
    "this coordinator runs without Azure queues (AZURE_STORAGE_CONNECTION_STRING is unset), "
    "so it hands out no work: neither pollTaskUrls nor claimWork is available; its pending "
    "runs get their hints once it runs with a storage account"
)


class WorkDispatch:
    """Hands out the work of task queues (through their Azure queues), for the API.

    :param azure_queues: ``None`` when the coordinator runs without Azure.
    :param workers: sees the workers that poll and claim, and knows the quarantined ones.
    :param controls: the claim gate of paused and limited task queues.
    :param claim_work_timeout_s: how long one claimWork call waits for work (seconds).
    """

    def __init__(
        self,
        *,
        service: TaskService,
        azure_queues: QueueService | None,
        workers: WorkerService,
        controls: QueueControlService,
        claim_work_timeout_s: float,
    ) -> None:
        self._service = service
        self._azure_queues = azure_queues
        self._workers = workers
        self._claim_work: ClaimWork | None = None
        if azure_queues is not None:
            claim_work = ClaimWork(
                service=service,
                azure_queues=azure_queues,
                controls=controls,
                timeout_s=claim_work_timeout_s,
            )
            service.hints.listeners.append(
                lambda hint: claim_work.wake(hint.provisioner_id, hint.worker_type)
            )
            self._claim_work = claim_work

    def _require_azure_queues(self) -> QueueService:
        if self._azure_queues is None:
            raise NotFound(NO_AZURE)
        return self._azure_queues

    async def poll_urls(self, task_queue: TaskQueue) -> PollUrls:
        """Signed poll and delete URLs of the task queue's Azure queues, highest first.

        :raises NotFound: the coordinator runs without Azure.
        :raises QueueUnavailable: Azure did not answer.
        """
        return await self._require_azure_queues().poll_urls(
            task_queue.provisioner_id, task_queue.worker_type, now=self._service.clock()
        )

    async def claim_work(
        self,
        task_queue: TaskQueue,
        *,
        worker_group: str,
        worker_id: str,
        count: int,
        disconnected: Callable[[], bool],
    ) -> list[TaskRecord]:
        """claimWork's long poll (nothing for a quarantined worker); :raises NotFound: the
        coordinator runs without Azure."""
        self._require_azure_queues()
        assert self._claim_work is not None
        worker = WorkerKey(task_queue=task_queue, worker_group=worker_group, worker_id=worker_id)
        self._workers.worker_seen(worker)
        claimed = await self._claim_work.claim(
            task_queue.provisioner_id,
            task_queue.worker_type,
            worker_group=worker_group,
            worker_id=worker_id,
            count=count,
            disconnected=disconnected,
            quarantined=lambda: self._workers.quarantined_until(worker) is not None,
        )
        for record in claimed:
            self._workers.run_held(record, len(record.runs) - 1, claimed=True)
        return claimed

    async def pending_count(self, task_queue: TaskQueue) -> int:
        """Azure's approximate count (an upper bound, cached), or the store's exact count
        when there is no Azure or it is unreachable."""
        if self._azure_queues is not None:
            try:
                return await self._azure_queues.pending_count(
                    task_queue.provisioner_id, task_queue.worker_type
                )
            except QueueUnavailable as error:
                log.warning("pendingTasks from the store: Azure unavailable error=%r", error)
        counts = await self._service.run_counts(task_queue.provisioner_id, task_queue.worker_type)
        return counts.pending
