"""Store dispatch (``COORDINATOR_DISPATCH=store``, docs/dispatch.md): claimWork's runs come
straight from the store, and no hint is put anywhere.

:class:`StoreWork` claims the task queue's claimable runs in one store transaction, highest
priority first, then the earliest visible (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, the
single writer on SQLite), or by the worker's weights per priority when it sends them; in a
queue with ``maxRunningPerKey``, the concurrency keys in turn within a priority.
:class:`PendingAnnouncer` rings claimWork's wake-up when a run becomes pending: at once in
this process, and through the store (PostgreSQL ``LISTEN``/``NOTIFY``) in the other replicas,
whose listeners ring theirs.
"""

from __future__ import annotations

import asyncio
import functools
import random

from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.lifecycle import Hint
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.background import Background
from coordinator.service.claim_work import ClaimWork
from coordinator.service.queue_controls import KeyLimit
from coordinator.service.tasks import TaskService
from coordinator.store.contract.dispatch import PendingAnnouncement, PickLevels

IDLE_POLL_S = 5.0
"""The longest a store-dispatch long poll waits between two asks while its queue has nothing:
the wake-ups bring work at once, this only covers an announcement lost with its replica or
a listener reconnecting."""


class StoreWork:
    """A :class:`~coordinator.service.claim_work.WorkSource` over the store's pending runs.

    A worker's weights draw each run's priority at random, from ``rng``
    (:mod:`coordinator.domain.claim_weights`); without them, strictly by priority.
    """

    def __init__(self, service: TaskService, *, rng: random.Random | None = None) -> None:
        self.service = service
        self.rng = rng or random.Random()

    async def take(
        self,
        task_queue: TaskQueue,
        *,
        worker_group: str,
        worker_id: str,
        count: int,
        weights: ClaimWeights | None,
        per_key: KeyLimit | None = None,
    ) -> list[TaskRecord]:
        pick: PickLevels | None = None
        if weights is not None:
            pick = functools.partial(weights.quotas, limit=count, rng=self.rng)
        return await self.service.claim_pending(
            task_queue,
            worker_group=worker_group,
            worker_id=worker_id,
            limit=count,
            pick=pick,
            max_per_key=None if per_key is None else per_key.max_per_key,
        )


class PendingAnnouncer:
    """Tells claimWork's long polls, here and in the replicas, that a run became pending.

    The store announcements of one turn of the event loop go out in one call.
    """

    def __init__(self, *, service: TaskService, claim_work: ClaimWork) -> None:
        self._service = service
        self._claim_work = claim_work
        self._background = Background()
        self._waiting: list[PendingAnnouncement] = []

    async def start(self) -> None:
        """Listen to the other coordinators' announcements (a hint listener of the service
        hands this one the runs made pending here)."""
        await self._service.listen_pending(self._heard)
        self._service.hints.listeners.append(self.pending)

    def pending(self, hint: Hint) -> None:
        """The run of ``hint`` became pending (visible at ``hint.visible_at``)."""
        task_queue = TaskQueue(hint.provisioner_id, hint.worker_type)
        self._wake(task_queue, hint.visible_at)
        if not self._waiting:
            asyncio.get_running_loop().call_soon(self._announce)
        self._waiting.append((task_queue, hint.visible_at))

    def _heard(self, announcement: PendingAnnouncement) -> None:
        self._wake(*announcement)

    def _wake(self, task_queue: TaskQueue, visible_at: int) -> None:
        self._claim_work.wake(task_queue, in_s=(visible_at - self._service.clock()) / 1000)

    def _announce(self) -> None:
        # Lost in a store outage (logged once by the store) or with this process: the
        # replicas' long polls ask again within IDLE_POLL_S anyway.
        batch, self._waiting = self._waiting, []
        self._background.spawn(self._service.announce_pending(batch))

    async def drain(self) -> None:
        """Wait for the announcements on their way (shutdown)."""
        await self._background.drain()
