"""WorkDispatch: how a task queue's work reaches workers and provisioners, under either
dispatch (``COORDINATOR_DISPATCH``, docs/dispatch.md).

* ``store``: claimWork claims straight from the store (:mod:`coordinator.service.store_work`);
  no hint is put and pollTaskUrls answers 404; the pending count is the store's.
* ``azure``: hints in Azure Storage Queues; pollTaskUrls hands out signed URLs of the task
  queue's Azure queues, claimWork reads them on the worker's behalf
  (:mod:`coordinator.service.azure_work`), and the pending count is Azure's (the store's when
  Azure is down).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordinator.azure.errors import QueueUnavailable
from coordinator.azure.queues import PollUrls, QueueService
from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.errors import NotFound
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.azure_work import AzureWork
from coordinator.service.claim_work import ClaimWork
from coordinator.service.queue_controls import QueueControlService
from coordinator.service.store_work import IDLE_POLL_S, PendingAnnouncer, StoreWork
from coordinator.service.tasks import TaskService

log = logging.getLogger(__name__)

STORE_DISPATCH = (
    "this coordinator dispatches from its store (COORDINATOR_DISPATCH=store): there are no "
    "Azure queues to poll; claim work with claimWork (queue-worker does so by itself)"
)
"""What pollTaskUrls answers under store dispatch (a 404)."""

AZURE_IDLE_POLL_S = 1.0
"""How often an Azure-dispatch long poll reads the queues while they are empty: a hint put
by another replica rings no wake-up here."""


class WorkDispatch:
    """Hands out the work of task queues, for the API.

    :param azure_queues: the Azure queues under Azure dispatch; ``None`` under store dispatch.
    :param controls: the claim gate of paused and limited task queues.
    :param claim_work_timeout_s: how long one claimWork call waits for work (seconds), and
        one watchRuns call for a run to stop.
    """

    def __init__(
        self,
        *,
        service: TaskService,
        azure_queues: QueueService | None,
        controls: QueueControlService,
        claim_work_timeout_s: float,
    ) -> None:
        self._service = service
        self._azure_queues = azure_queues
        self.long_poll_s = claim_work_timeout_s
        """How long a long poll (claimWork, watchRuns) waits before answering empty."""
        self._announcer: PendingAnnouncer | None = None
        if azure_queues is not None:
            claim_work = ClaimWork(
                source=AzureWork(service=service, azure_queues=azure_queues),
                controls=controls,
                timeout_s=claim_work_timeout_s,
                idle_poll_s=AZURE_IDLE_POLL_S,
                every_run_rings=False,
            )
            service.hints.listeners.append(
                lambda hint: claim_work.wake(TaskQueue(hint.provisioner_id, hint.worker_type))
            )
        else:
            claim_work = ClaimWork(
                source=StoreWork(service),
                controls=controls,
                timeout_s=claim_work_timeout_s,
                idle_poll_s=IDLE_POLL_S,
                every_run_rings=True,
            )
            self._announcer = PendingAnnouncer(service=service, claim_work=claim_work)
            service.hand_over = claim_work.hand_over
        self._claim_work = claim_work

    async def start(self) -> None:
        """Under store dispatch, start hearing the runs made pending (here and in replicas)."""
        if self._announcer is not None:
            await self._announcer.start()

    async def drain(self) -> None:
        """Finish what is on its way (the replicas' announcements)."""
        if self._announcer is not None:
            await self._announcer.drain()

    async def poll_urls(self, task_queue: TaskQueue) -> PollUrls:
        """Signed poll and delete URLs of the task queue's Azure queues, highest first.

        :raises NotFound: store dispatch: there are no Azure queues.
        :raises QueueUnavailable: Azure did not answer.
        """
        if self._azure_queues is None:
            raise NotFound(STORE_DISPATCH)
        return await self._azure_queues.poll_urls(
            task_queue.provisioner_id, task_queue.worker_type, now=self._service.clock()
        )

    async def claim_work(
        self,
        task_queue: TaskQueue,
        *,
        worker_group: str,
        worker_id: str,
        count: int,
        weights: ClaimWeights | None = None,
        disconnected: Callable[[], bool],
        quarantined: Callable[[], bool],
    ) -> list[TaskRecord]:
        """claimWork's long poll through the task queue's gate (see
        :meth:`ClaimWork.claim`); :class:`~coordinator.service.claims.ClaimPolicy` is what
        the API calls."""
        return await self._claim_work.claim(
            task_queue,
            worker_group=worker_group,
            worker_id=worker_id,
            count=count,
            weights=weights,
            disconnected=disconnected,
            quarantined=quarantined,
        )

    def waiting_claims(self, task_queue: TaskQueue) -> int:
        """How many claimWork calls wait on the task queue in this process."""
        return self._claim_work.waiting(task_queue)

    async def pending_count(self, task_queue: TaskQueue) -> int:
        """Azure's approximate count (an upper bound, cached), or the store's exact count
        under store dispatch or when Azure is unreachable."""
        if self._azure_queues is not None:
            try:
                return await self._azure_queues.pending_count(
                    task_queue.provisioner_id, task_queue.worker_type
                )
            except QueueUnavailable as error:
                log.warning("pendingTasks from the store: Azure unavailable error=%r", error)
        counts = await self._service.run_counts(task_queue.provisioner_id, task_queue.worker_type)
        return counts.pending
