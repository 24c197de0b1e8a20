"""Server-side claimWork: the long poll that claims work on a worker's behalf, whatever the
work comes from.

One call long-polls up to ``timeout_s``: it asks its :class:`WorkSource` for up to ``count``
runs and returns as soon as it got at least one. While a task queue has nothing, the call
waits on the queue's wake-up, which rings when a run of it becomes pending (in this process;
under store dispatch also on another replica, through the store), and asks again at the
latest every ``idle_poll_s``. The sources are Azure's hints
(:mod:`coordinator.service.azure_work`) and the store itself
(:mod:`coordinator.service.store_work`). Each ask passes the queue's claim gate
(:mod:`coordinator.service.queue_controls`): it takes no more runs than the queue's pause and
limits let through, and none while they let none (the call then waits as for an empty queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Protocol

from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.errors import Throttled
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.queue_controls import KeyLimit, QueueControlService


class WorkSource(Protocol):
    """Where a claimWork call's runs come from."""

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
        """Claim up to ``count`` runs of the queue for the worker now; ``[]`` when none.
        ``weights``: the worker's weights per priority, where the source honours them;
        ``per_key``: the queue's concurrency-key limit, which no key's runs may exceed."""
        ...


class _Wakeup:
    """One task queue's wake-up: a counter of rings, so that a caller that was busy asking
    when it rang does not wait for the next one."""

    __slots__ = ("_rung", "rings")

    def __init__(self) -> None:
        self.rings = 0
        self._rung = asyncio.Event()

    def ring(self) -> None:
        self.rings += 1
        # each ring wakes the callers waiting on it, and later ones wait on a fresh event
        self._rung.set()
        self._rung = asyncio.Event()

    async def wait(self, since: int, within_s: float) -> None:
        """Return at the first ring after the ``since``-th, or after ``within_s`` seconds."""
        if self.rings != since:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._rung.wait(), within_s)


class ClaimWork:
    """Long-polling claims for one coordinator process.

    :param timeout_s: how long one call waits for work (seconds).
    :param idle_poll_s: the longest wait between two asks while a queue has nothing (the
        wake-ups make most waits shorter).
    """

    def __init__(
        self,
        *,
        source: WorkSource,
        controls: QueueControlService,
        timeout_s: float,
        idle_poll_s: float,
    ) -> None:
        self.source = source
        self.controls = controls
        self.timeout_s = timeout_s
        self.idle_poll_s = idle_poll_s
        self._wakeups: defaultdict[TaskQueue, _Wakeup] = defaultdict(_Wakeup)

    def wake(self, task_queue: TaskQueue, *, in_s: float = 0.0) -> None:
        """A run of this task queue became pending and is visible ``in_s`` seconds from
        now: waiting callers should ask then. A delay longer than the idle poll is left to
        it."""
        if in_s <= 0:
            wakeup = self._wakeups.get(task_queue)
            if wakeup is not None:
                wakeup.ring()
        elif in_s < self.idle_poll_s:
            asyncio.get_running_loop().call_later(in_s, self.wake, task_queue)

    async def claim(
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
        """Claim up to ``count`` runs; an empty list after ``timeout_s`` without work.

        :param weights: the worker's weights per priority (:class:`WorkSource`).

        :param disconnected: true once the client went away; the poll then stops.
        :param quarantined: true while the worker is quarantined: it then gets nothing, at the
            end of the poll as Taskcluster answers (an answer at once would have it ask again
            at once, in a loop), unless the quarantine ends during the poll.
        """
        give_up = time.monotonic() + self.timeout_s
        wakeup = self._wakeups[task_queue]

        async def take(allowed: int, per_key: KeyLimit | None) -> list[TaskRecord]:
            return await self.source.take(
                task_queue,
                worker_group=worker_group,
                worker_id=worker_id,
                count=allowed,
                weights=weights,
                per_key=per_key,
            )

        while True:
            rings = wakeup.rings
            if not quarantined():
                try:
                    gated = await self.controls.claiming(task_queue, count, take)
                except Throttled:
                    pass  # paused, or at its limits: wait as for an empty queue
                else:
                    if gated.results:
                        return list(gated.results)
            remaining = give_up - time.monotonic()
            if remaining <= 0 or disconnected():
                return []
            await wakeup.wait(rings, min(self.idle_poll_s, remaining))
            # The client may have gone while we waited: claiming for it now would leave the
            # run running for nobody until its claim expires.
            if disconnected():
                return []
