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
import collections
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
    """One task queue's wake-up.

    A ring wakes the caller that has waited longest, not every caller: the others would each
    ask the store for runs the first one takes (at half load, two of every three asks came
    back empty). A woken caller holds the ring, and hands it on to the next (:meth:`pass_on`)
    unless its ask drained the queue; a ring goes only to callers that were waiting when it
    rang, so that callers that cannot claim cannot hand one round among themselves.
    Rings that come while a woken caller has yet to ask wake nobody more: its ask will see
    their runs too (a createTasks of many tasks rings once for each).
    ``rings`` counts the rings, so that a caller that was busy asking when one rang does not
    wait for the next; ``drained_at`` is the count at which an ask last found fewer runs than
    it could take, so that a new caller need not ask again before the next ring.
    """

    __slots__ = ("_waiters", "drained_at", "rings", "woken")

    def __init__(self) -> None:
        self.rings = 0
        self.drained_at: int | None = None
        self.woken = False
        """A caller was woken and has yet to ask (:meth:`asking`)."""
        self._waiters: collections.deque[tuple[int, asyncio.Future[int]]] = collections.deque()
        """The waiting callers, longest first: the ring count each waits past, its future."""

    def ring(self) -> None:
        self.rings += 1
        if not self.woken:
            self.pass_on(self.rings)

    def pass_on(self, ring: int) -> None:
        """Hand ring number ``ring`` to the caller that has waited longest, if it waited
        since before that ring."""
        self.woken = False
        while self._waiters:
            since, waiter = self._waiters[0]
            if waiter.done():
                self._waiters.popleft()
            elif since >= ring:
                return
            else:
                self._waiters.popleft()
                waiter.set_result(ring)
                self.woken = True
                return

    def asking(self) -> None:
        """The woken caller asks now: a ring from now on is for another."""
        self.woken = False

    async def wait(self, since: int, within_s: float) -> int | None:
        """Wait for the first ring after the ``since``-th, at most ``within_s`` seconds; the
        number of the ring that came (the caller then holds it), ``None`` if none did."""
        if self.rings != since:
            return self.rings
        waiter = asyncio.get_running_loop().create_future()
        entry = (since, waiter)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(within_s):
                return await asyncio.shield(waiter)
        except TimeoutError:
            # a ring and the timeout in the same turn: the ring wins
            return waiter.result() if waiter.done() else None
        except asyncio.CancelledError:
            if waiter.done():
                self.pass_on(waiter.result())  # this caller is going: the next one takes it
            raise
        finally:
            if not waiter.done():
                waiter.cancel()
                self._waiters.remove(entry)


class ClaimWork:
    """Long-polling claims for one coordinator process.

    :param timeout_s: how long one call waits for work (seconds).
    :param idle_poll_s: the longest wait between two asks while a queue has nothing (the
        wake-ups make most waits shorter).
    :param every_run_rings: every run made pending rings the wake-up of its queue (store
        dispatch: in this process, and through the store's announcements from the others), so
        an ask that found fewer runs than it could take tells that the queue has none until
        the next ring. Under Azure dispatch a hint put by another replica rings nothing here.
    """

    def __init__(
        self,
        *,
        source: WorkSource,
        controls: QueueControlService,
        timeout_s: float,
        idle_poll_s: float,
        every_run_rings: bool,
    ) -> None:
        self.source = source
        self.every_run_rings = every_run_rings
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
        # whether the last ask found fewer runs than it could take: only a plain ask tells (a
        # worker's weights draw the levels, a key's limit holds runs back)
        drained = False

        async def take(allowed: int, per_key: KeyLimit | None) -> list[TaskRecord]:
            nonlocal drained
            taken = await self.source.take(
                task_queue,
                worker_group=worker_group,
                worker_id=worker_id,
                count=allowed,
                weights=weights,
                per_key=per_key,
            )
            drained = (
                self.every_run_rings
                and allowed == count
                and per_key is None
                and weights is None
                and len(taken) < allowed
            )
            return taken

        # A new call asks at once, unless an ask found the queue drained since the last ring.
        ask = not self.every_run_rings or wakeup.drained_at != wakeup.rings
        rung: int | None = None  # the ring this call holds, which it owes the next caller
        try:
            while True:
                rings = wakeup.rings
                if rung is not None:
                    wakeup.asking()
                if ask and not quarantined():
                    drained = False
                    try:
                        gated = await self.controls.claiming(task_queue, count, take)
                    except Throttled:
                        gated = None  # paused, or at its limits: wait as for an empty queue
                    if drained:
                        wakeup.drained_at = rings
                        rung = None
                    if gated is not None and gated.results:
                        return list(gated.results)
                if rung is not None:
                    wakeup.pass_on(rung)
                    rung = None
                ask = True
                remaining = give_up - time.monotonic()
                if remaining <= 0 or disconnected():
                    return []
                rung = await wakeup.wait(rings, min(self.idle_poll_s, remaining))
                if rung is not None and not self.every_run_rings:
                    # an ask that takes fewer than it could does not tell that nothing is
                    # left: the others ask too, as the ring would have them
                    wakeup.pass_on(rung)
                    rung = None
                # The client may have gone while we waited: claiming for it now would leave
                # the run running for nobody until its claim expires.
                if disconnected():
                    return []
        finally:
            if rung is not None:
                wakeup.pass_on(rung)
