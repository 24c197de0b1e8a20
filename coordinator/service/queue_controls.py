"""QueueControlService: pausing and limiting task queues, and the gate every claim passes
(:meth:`QueueControlService.claiming`): claimTask, claimRuns and claimWork alike.

**An unrestricted queue costs nothing.** The gate first asks this process's copy of the
controls, which the controls refresher (:mod:`coordinator.resolvers.queue_controls_refresher`)
reloads from the store about every second, and which a pause, resume or limit served here
updates at once; so every replica applies a change made through another within about a
second. A queue without controls is claimed from as before, without a store round trip; a
paused one is refused at once.

**A limited queue's claims take turns.** They hold the queue's claim lock
(:meth:`~coordinator.store.base.Store.queue_lock`, shared by every replica on PostgreSQL)
while the gate reads the controls as stored, counts the queue's running runs (for
``maxRunning``) and advances the rate's state (``maxClaimsPerSecond``), and with
``maxRunning`` while the claim runs too; so no two replicas count the same free room twice.
Until the rate has room again, this process refuses the queue's claims without the lock. A
claim that gets nothing raises :class:`~coordinator.domain.errors.Throttled` (429 with
``Retry-After``); claimWork waits instead, as for an empty queue.

**Concurrency keys.** With ``maxRunningPerKey`` the claim holds the lock too, and is handed
the limit (:class:`KeyLimit`): store dispatch's claim counts the running runs of each key and
serves the keys in turn in its store transaction; a claim of a run the worker names (claimTask,
claimRuns, claimWork over Azure's hints) counts them once (:meth:`KeyLimit.room`) and refuses
a run whose key is at its limit with ``Throttled``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from coordinator.domain.concurrency_keys import KeyRoom
from coordinator.domain.errors import DomainError, Throttled
from coordinator.domain.queue_controls import (
    Admission,
    Limits,
    Pause,
    QueueControls,
    QueueDefaults,
    admit,
    room_of,
)
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.clock import Clock, wall_clock
from coordinator.service.metrics import ServiceMetrics
from coordinator.service.tasks import Permit, TaskService
from coordinator.store.base import Store

log = logging.getLogger(__name__)

R = TypeVar("R", bound=TaskRecord | DomainError)


class QueueControlService:
    """Pause, resume and limits of task queues, and the claim gate, for one process.

    :param service: whose claims the gate lets through.
    """

    def __init__(
        self,
        *,
        store: Store,
        service: TaskService,
        metrics: ServiceMetrics,
        clock: Clock = wall_clock,
    ) -> None:
        self._store = store
        self._service = service
        self._metrics = metrics
        self.clock = clock
        self._controls: dict[TaskQueue, QueueControls] = {}
        self._rate_refusals: dict[TaskQueue, tuple[int, Admission]] = {}
        """Per rate-limited queue, until when (epoch ms) the rate admits nothing, and the
        refusal: claims before then are refused without taking the queue's lock."""

    # --- the operator's calls -------------------------------------------------------------

    async def pause(self, task_queue: TaskQueue, *, reason: str) -> QueueControls:
        """Claims of the queue stop (on every replica within about a second); its tasks are
        still accepted and stay pending."""
        controls = await self._store.pause_task_queue(
            task_queue, Pause(since=self.clock(), reason=reason)
        )
        self._known(controls)
        log.info("task queue paused taskQueueId=%s reason=%r", task_queue, reason)
        return controls

    async def resume(self, task_queue: TaskQueue) -> QueueControls:
        controls = await self._store.pause_task_queue(task_queue, None)
        self._known(controls)
        log.info("task queue resumed taskQueueId=%s", task_queue)
        return controls

    async def set_limits(
        self, task_queue: TaskQueue, limits: Limits, *, named: frozenset[str]
    ) -> QueueControls:
        """Set the limits named (``maxRunning``, ``maxClaimsPerSecond``,
        ``maxRunningPerKey``; ``None`` lifts one); the others stay."""
        controls = await self._store.limit_task_queue(task_queue, limits, named=named)
        self._known(controls)
        log.info(
            "task queue limits set taskQueueId=%s maxRunning=%s maxClaimsPerSecond=%s "
            "maxRunningPerKey=%s",
            task_queue,
            controls.limits.max_running,
            controls.limits.max_claims_per_second,
            controls.limits.max_running_per_key,
        )
        return controls

    async def set_defaults(
        self, task_queue: TaskQueue, defaults: QueueDefaults, *, named: frozenset[str]
    ) -> QueueControls:
        """Set the defaults named (``claimTimeout``, ``completedTTL``, ``failedTTL``; ``None``
        goes back to the coordinator's); the others stay."""
        controls = await self._store.default_task_queue(task_queue, defaults, named=named)
        self._known(controls)
        log.info(
            "task queue defaults set taskQueueId=%s claimTimeout=%s completedTTL=%s failedTTL=%s",
            task_queue,
            controls.defaults.claim_timeout_s,
            controls.defaults.completed_ttl_s,
            controls.defaults.failed_ttl_s,
        )
        return controls

    async def controls_of(self, task_queue: TaskQueue) -> QueueControls:
        """The queue's controls as stored."""
        return await self._store.queue_controls_of(task_queue)

    async def restricted(self) -> dict[TaskQueue, QueueControls]:
        """The controls of every paused or limited queue, as stored."""
        return {c.task_queue: c for c in await self._store.queue_controls() if c.restricted}

    def _known(self, controls: QueueControls) -> None:
        self._rate_refusals.pop(controls.task_queue, None)
        if controls.restricted:
            self._controls[controls.task_queue] = controls
        else:
            self._controls.pop(controls.task_queue, None)
        self._default_claim_timeout(controls)
        self._metrics.set_paused_queues(c.task_queue for c in self._controls.values() if c.pause)

    def _default_claim_timeout(self, controls: QueueControls) -> None:
        """Keep the task service's claim timing of the queue in step with its default."""
        timeout_s = controls.defaults.claim_timeout_s
        timeouts = self._service.claim_timeouts
        if timeout_s is None:
            timeouts.pop(str(controls.task_queue), None)
        else:
            timing = dataclasses.replace(self._service.timing, claim_timeout_ms=timeout_s * 1000)
            timeouts[str(controls.task_queue)] = timing

    async def refresh(self) -> int:
        """Reload this process's copy from the store; how many queues' controls changed."""
        stored = await self._store.queue_controls()
        found = {c.task_queue: c for c in stored if c.restricted}
        for gone in self._service.claim_timeouts.keys() - {str(c.task_queue) for c in stored}:
            del self._service.claim_timeouts[gone]
        for controls in stored:
            self._default_claim_timeout(controls)
        before, self._controls = self._controls, found
        changed = {
            queue
            for queue in found.keys() | before.keys()
            if _setting(found.get(queue)) != _setting(before.get(queue))
        }
        for task_queue in changed & self._rate_refusals.keys():
            del self._rate_refusals[task_queue]  # a new rate, or none: ask the store again
        self._metrics.set_paused_queues(c.task_queue for c in found.values() if c.pause)
        return len(changed)

    # --- the gate -------------------------------------------------------------------------

    def controlled(self, task_queue: TaskQueue) -> bool:
        """Whether the queue has a pause or limits (this process's copy)."""
        return task_queue in self._controls

    async def claiming(self, task_queue: TaskQueue, wanted: int, claim: Claim[R]) -> Gated[R]:
        """Run ``claim(n, per_key)`` for as many of ``wanted`` runs of the queue as its pause
        and limits let through now (``n`` ≥ 1), ``per_key`` the queue's concurrency-key limit
        if it has one; ``claim`` answers what it claimed (records) and what it could not
        (domain errors).

        :raises Throttled: the queue lets no claim through now.
        """
        known = self._controls.get(task_queue)
        if known is None:
            return Gated(results=await claim(wanted, None))
        if known.pause is not None:
            raise self._refused(task_queue, wanted, admit(known, running=0, wanted=0, now=0))
        refused_until = self._rate_refusals.get(task_queue)
        if refused_until is not None and self.clock() < refused_until[0]:
            raise self._refused(task_queue, wanted, refused_until[1])
        async with contextlib.AsyncExitStack() as locked:
            await locked.enter_async_context(self._store.queue_lock(task_queue))
            controls = await self._store.queue_controls_of(task_queue)
            running = 0
            if controls.limits.max_running is not None:
                counts = await self._service.run_counts(
                    task_queue.provisioner_id, task_queue.worker_type
                )
                running = counts.running
            now = self.clock()
            admission = admit(controls, running=running, wanted=wanted, now=now)
            if admission.by_rate:
                self._rate_refusals[task_queue] = (now + admission.retry_after_ms, admission)
            if admission.granted == 0:
                raise self._refused(task_queue, wanted, admission)
            if admission.claims_tat_us != controls.claims_tat_us:
                await self._store.set_claims_tat(task_queue, admission.claims_tat_us)
            if not controls.limits.held_while_claiming:
                # The rate's room is taken: the claim itself need not hold the others up.
                await locked.aclose()
            per_key = None
            if (max_per_key := controls.limits.max_running_per_key) is not None:
                per_key = KeyLimit(task_queue, max_per_key, self._store)
            claimed = 0
            try:
                results = await claim(admission.granted, per_key)
                claimed = sum(isinstance(r, TaskRecord) for r in results)
            finally:  # what claimed nothing (a stale hint, a refusal) gives its room back
                unused_us = room_of(controls, admission.granted - claimed)
                if unused_us:
                    await self._store.give_back_claims(task_queue, unused_us)
        if admission.granted == wanted:
            return Gated(results=results)
        self._metrics.claims_limited(task_queue, wanted - admission.granted)
        return Gated(results=results, held_back=admission.refused())

    def _refused(self, task_queue: TaskQueue, wanted: int, admission: Admission) -> Throttled:
        self._metrics.claims_limited(task_queue, wanted)
        log.debug("claims refused taskQueueId=%s wanted=%d", task_queue, wanted)
        return admission.refused()

    async def claim_task(
        self, task_id: str, run_id: int, *, worker_group: str, worker_id: str, read: TaskRecord
    ) -> TaskRecord:
        """claimTask through the gate (``read``: the task as just read, which tells its
        queue).

        :raises Throttled: the queue lets no claim through now.
        """

        async def claim(count: int, per_key: KeyLimit | None) -> list[TaskRecord]:
            room = None if per_key is None else await per_key.room()
            record = await self._service.claim(
                task_id,
                run_id,
                worker_group=worker_group,
                worker_id=worker_id,
                read=read,
                permit=None if room is None else room.admit,
            )
            return [record]

        task_queue = TaskQueue(read.provisioner_id, read.worker_type)
        return (await self.claiming(task_queue, 1, claim)).results[0]

    async def claim_runs(
        self,
        runs: Sequence[tuple[str, int]],
        *,
        worker_group: str,
        worker_id: str,
        permit: Permit,
    ) -> list[TaskRecord | DomainError]:
        """claimRuns through the gate: the runs of each restricted queue get as many claims
        as it lets through now, the others :class:`Throttled`. While no queue is restricted
        it costs no read: straight to :meth:`TaskService.claim_runs`."""
        if not self._controls:
            return await self._service.claim_runs(
                runs, worker_group=worker_group, worker_id=worker_id, permit=permit
            )
        records = await self._service.get_many([task_id for task_id, _ in runs])
        by_queue: dict[TaskQueue | None, list[int]] = {}
        for index, (task_id, _) in enumerate(runs):
            record = records.get(task_id)
            queue = None if record is None else TaskQueue(record.provisioner_id, record.worker_type)
            by_queue.setdefault(queue, []).append(index)
        results: dict[int, TaskRecord | DomainError] = {}
        for queue, indexes in by_queue.items():

            async def claim(
                count: int, per_key: KeyLimit | None, chosen: list[int] = indexes
            ) -> list[TaskRecord | DomainError]:
                return await self._service.claim_runs(
                    [runs[i] for i in chosen[:count]],
                    worker_group=worker_group,
                    worker_id=worker_id,
                    permit=permit if per_key is None else _and(permit, await per_key.room()),
                )

            if queue is None:  # tasks that do not exist: the claim says so
                gated = Gated(results=await claim(len(indexes), None))
            else:
                try:
                    gated = await self.claiming(queue, len(indexes), claim)
                except Throttled as error:
                    gated = Gated(results=[], held_back=error)
            for position, index in enumerate(indexes):
                if position < len(gated.results):
                    results[index] = gated.results[position]
                else:
                    assert gated.held_back is not None
                    results[index] = gated.held_back
        return [results[index] for index in range(len(runs))]


class KeyLimit:
    """A claim's concurrency-key limit: the queue's ``maxRunningPerKey``, handed to a claim
    that holds the queue's claim lock."""

    __slots__ = ("_store", "max_per_key", "task_queue")

    def __init__(self, task_queue: TaskQueue, max_per_key: int, store: Store) -> None:
        self.task_queue = task_queue
        self.max_per_key = max_per_key
        self._store = store

    async def room(self) -> KeyRoom:
        """Each key's room, counted now, for claims of runs the worker names."""
        running = await self._store.running_by_key(self.task_queue)
        return KeyRoom(self.task_queue, max_per_key=self.max_per_key, running=running)


Claim = Callable[[int, KeyLimit | None], Awaitable[Sequence[R]]]
"""A claim through the gate (:meth:`QueueControlService.claiming`)."""


def _and(permit: Permit, room: KeyRoom) -> Permit:
    """``permit``, then the room of the run's key."""

    def both(record: TaskRecord, run_id: int) -> None:
        permit(record, run_id)
        room.admit(record, run_id)

    return both


@dataclass(frozen=True, kw_only=True, slots=True)
class Gated(Generic[R]):
    """What a claim through the gate got: the results of the runs let through, and the
    refusal of the others (``None``: all were)."""

    results: Sequence[R]
    held_back: Throttled | None = None


def _setting(controls: QueueControls | None) -> tuple[Pause | None, Limits] | None:
    """What an operator set, without the rate's moving state."""
    return None if controls is None else (controls.pause, controls.limits)
