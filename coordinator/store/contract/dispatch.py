"""The dispatch part of the store contract: how pending runs reach workers as the store serves
them. Store dispatch claims a task queue's claimable runs and announces runs made pending
across replicas (docs/dispatch.md); Azure dispatch's hints are confirmed here, found again when
unconfirmed, and counted per task queue for the reconciler.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence

from coordinator.domain.events import QueueEvent
from coordinator.domain.listings import PendingCount
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue

ClaimPending = Callable[[Sequence[TaskRecord]], Sequence[tuple[TaskRecord, Sequence[QueueEvent]]]]
"""Store dispatch's claim of the records :meth:`DispatchStore.claim_pending` hands over: each
one to write (a record of those, changed) with its outbox events. Pure and synchronous: it runs
inside the store's transaction."""

PickLevels = Callable[[Mapping[int, int]], Mapping[int, int]]
"""A weighted claim's draw (:meth:`DispatchStore.claim_pending`): given how many runs each
priority level (7 highest … 1 lowest) has claimable, up to the limit (levels without any left
out), how many runs of each level to claim, up to the limit in all. It runs inside the store's
transaction."""

PendingAnnouncement = tuple[TaskQueue, int]
"""A task queue that has a run made pending, and when that run becomes visible (epoch ms)."""


class DispatchStore(abc.ABC):
    """Claimable runs, their announcements, and the hints of pending runs."""

    # --- store dispatch -------------------------------------------------------------------

    @abc.abstractmethod
    async def claim_pending(
        self,
        task_queue: TaskQueue,
        *,
        now: int,
        limit: int,
        claim: ClaimPending,
        pick: PickLevels | None = None,
        max_per_key: int | None = None,
    ) -> list[TaskRecord]:
        """Hand up to ``limit`` of the queue's claimable runs (the last run pending and
        visible at ``now``, the deadline after it), the highest ``pending_priority`` first,
        then the earliest visible, to ``claim``, and compare-and-set the records it returns,
        with their outbox events, in the same transaction.

        With ``pick`` (a worker's weights), the runs handed over are instead the earliest
        visible of each level, as many as ``pick`` draws for it from the levels' claimable
        runs. Should the runs drawn all be gone meanwhile (taken by concurrent claimers), the
        call hands over the runs in priority order as without ``pick``, rather than nothing
        while other runs wait. Without ``pick`` the call costs what it always did.

        With ``max_per_key`` (the queue's ``maxRunningPerKey``) the runs handed over are
        those :func:`~coordinator.domain.concurrency_keys.serve_keys` takes from the earliest
        visible of each key and level (the keys found one index seek each, however long a
        key's backlog), counting the queue's running runs of each key and reading whose turn
        it is in the same transaction, and the turns of the keys written are stored with
        them. Runs without a key are one more key, never limited. The caller holds the
        queue's claim lock (:meth:`QueueControlStore.queue_lock
        <coordinator.store.contract.controls.QueueControlStore.queue_lock>`), so that two
        claims never count the same room of a key.

        Concurrent callers never get the same run: PostgreSQL locks the rows it hands over
        until the write commits and other callers, on any replica, skip them (``FOR UPDATE
        SKIP LOCKED``); SQLite's one writer runs one call at a time.

        :returns: the records written, as stored, in the order ``claim`` returned them.
        """

    @abc.abstractmethod
    async def announce_pending(self, announcements: Sequence[PendingAnnouncement]) -> None:
        """Tell every coordinator listening on this store (:meth:`listen_pending`), other
        replicas included, that these task queues have runs made pending. SQLite: nothing
        to do, its one process wakes its own waiters."""

    @abc.abstractmethod
    async def listen_pending(self, on_pending: Callable[[PendingAnnouncement], None]) -> None:
        """From now until the store is closed, call ``on_pending`` for each announcement that
        another coordinator makes on this store (PostgreSQL: ``LISTEN``, reconnected after an
        outage); not for this store's own, whose waiters were woken in process; SQLite:
        never."""

    # --- hints ----------------------------------------------------------------------------

    @abc.abstractmethod
    async def confirm_hints(self, hints: Sequence[tuple[str, int]]) -> None:
        """Record that the hints of these ``(task_id, run_id)`` pending runs are in their queues,
        in one write.

        Clears ``hint_due`` of each task only while that run is still its last, without
        touching the version: a concurrent writer that still carries ``hint_needed`` merely
        causes one duplicate hint later, which workers treat as harmless. Unknown tasks are
        ignored.
        """

    @abc.abstractmethod
    async def hints_due(self, before: int, limit: int) -> list[str]:
        """Ids of tasks whose pending last run's hint, asked for before ``before``, is
        unconfirmed."""

    @abc.abstractmethod
    async def pending_by_task_queue(self) -> list[PendingCount]:
        """How many pending runs (visible or delayed) each task queue has; queues without
        pending runs are left out."""
