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
import functools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.errors import Throttled
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.queue_controls import KeyLimit, QueueControlService

log = logging.getLogger(__name__)


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


Answer = int | list[TaskRecord]
"""What wakes a waiting call: the number of the ring it now holds, or the runs a create
claimed for it (:class:`Taker`)."""


@dataclass(eq=False)
class Taker:
    """A claimWork call waiting on a drained queue, taken out of the wait by a create that
    claims new runs for it in the create's own write (:meth:`ClaimWork.hand_over`), so that
    the runs are neither announced nor claimed again by a write of their own."""

    worker_group: str
    worker_id: str
    count: int
    """The most runs the call takes."""
    ready: Callable[[], bool]
    """Whether the call may take runs now (its worker is not quarantined, its client not
    gone)."""
    _wakeup: _Wakeup
    answer: asyncio.Future[Answer] = field(init=False)
    taken: bool = field(init=False, default=False)
    """Handed over to a create, which answers it once its write is done."""

    def __post_init__(self) -> None:
        self.answer = asyncio.get_running_loop().create_future()

    def give(self, claimed: Sequence[TaskRecord]) -> None:
        """Answer the call with the runs claimed for it; given none (the create wrote none
        of them), it asks the store again, as a ring would have it."""
        if not self.answer.done():
            self.answer.set_result(list(claimed) or self._wakeup.rings)


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
        self._waiters: collections.deque[tuple[int, Taker]] = collections.deque()
        """The waiting callers, longest first: the ring count each waits past, and each as a
        taker of the runs a create may hand it."""

    def ring(self) -> None:
        self.rings += 1
        if not self.woken:
            self.pass_on(self.rings)

    def pass_on(self, ring: int) -> None:
        """Hand ring number ``ring`` to the caller that has waited longest, if it waited
        since before that ring."""
        self.woken = False
        while self._waiters:
            since, taker = self._waiters[0]
            if taker.answer.done():
                self._waiters.popleft()
            elif since >= ring:
                return
            else:
                self._waiters.popleft()
                taker.answer.set_result(ring)
                self.woken = True
                return

    def waiting(self) -> int:
        """How many callers wait."""
        return sum(not taker.answer.done() for _, taker in self._waiters)

    def asking(self) -> None:
        """The woken caller asks now: a ring from now on is for another."""
        self.woken = False

    def hand_over(self, runs: int) -> list[Taker]:
        """Take out of the wait, longest-waiting first, the callers ready to take runs, until
        they take ``runs`` between them: each takes at least one (a call asks for one or
        more)."""
        takers: list[Taker] = []
        kept: collections.deque[tuple[int, Taker]] = collections.deque()
        for entry in self._waiters:
            taker = entry[1]
            if taker.answer.done():
                continue
            if runs > 0 and taker.ready():
                taker.taken = True
                takers.append(taker)
                runs -= taker.count
            else:
                kept.append(entry)
        self._waiters = kept
        return takers

    async def wait(self, since: int, within_s: float, taker: Taker) -> Answer | None:
        """Wait for the first ring after the ``since``-th, or for runs handed to ``taker``,
        at most ``within_s`` seconds; the number of the ring that came (the caller then holds
        it), the runs, or ``None`` if neither came. A caller handed over to a create waits
        past ``within_s`` for the runs the create is claiming for it."""
        if self.rings != since:
            return self.rings
        entry = (since, taker)
        self._waiters.append(entry)
        answer = taker.answer
        try:
            try:
                async with asyncio.timeout(within_s):
                    return await asyncio.shield(answer)
            except TimeoutError:
                if not answer.done() and not taker.taken:
                    return None
                # a ring in the same turn, or runs being claimed for this caller: it takes them
                return await asyncio.shield(answer)
        except asyncio.CancelledError:
            answer.add_done_callback(functools.partial(self._left, taker))
            raise
        finally:
            if not answer.done() and not taker.taken:
                answer.cancel()
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def _left(self, taker: Taker, answer: asyncio.Future[Answer]) -> None:
        """What came for a caller that went away: a ring goes to the next caller; runs a
        create claimed for it stay claimed until their claims expire, and are then retried."""
        if answer.cancelled():
            return
        got = answer.result()
        if isinstance(got, int):
            self.pass_on(got)
            return
        log.warning(
            "runs claimed for a claimWork call that went away; retried once their claims "
            "expire workerId=%s runs=%s",
            taker.worker_id,
            ",".join(f"{record.task_id}/{len(record.runs) - 1}" for record in got),
        )


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

    def waiting(self, task_queue: TaskQueue) -> int:
        """How many calls wait on the queue."""
        wakeup = self._wakeups.get(task_queue)
        return 0 if wakeup is None else wakeup.waiting()

    def hand_over(self, task_queue: TaskQueue, runs: int) -> list[Taker]:
        """The calls waiting on ``task_queue`` that a create may claim up to ``runs`` of its
        new runs for, in its own write, longest-waiting first; each must then be given what
        was claimed for it (:meth:`Taker.give`). None under Azure dispatch, for a queue
        with controls (their gate decides each claim), nor for a worker with weights or one
        quarantined."""
        wakeup = self._wakeups.get(task_queue)
        if wakeup is None or not self.every_run_rings or self.controls.controlled(task_queue):
            return []
        return wakeup.hand_over(runs)

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

        def ready() -> bool:
            return weights is None and not quarantined() and not disconnected()

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
                taker = Taker(
                    worker_group=worker_group,
                    worker_id=worker_id,
                    count=count,
                    ready=ready,
                    _wakeup=wakeup,
                )
                answer = await wakeup.wait(rings, min(self.idle_poll_s, remaining), taker)
                if isinstance(answer, list):
                    return answer
                rung = answer
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
