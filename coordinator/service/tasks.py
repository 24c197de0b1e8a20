"""TaskService: every task operation the API handlers and the resolvers perform.

It composes the write path (:mod:`coordinator.service.transitions`), hint publishing
(:mod:`coordinator.service.hints`) and dependencies (:mod:`coordinator.service.dependencies`)
over one store, and is the only way the layers above reach the store: reads, listings, counts
and the resolvers' scans included. Failures are domain errors
(:mod:`coordinator.domain.errors`), never HTTP ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinator.domain import definitions, lifecycle
from coordinator.domain.errors import Conflict, NotFound
from coordinator.domain.lifecycle import Outcome, Timing
from coordinator.domain.listings import Page, RunCounts
from coordinator.domain.records import TaskRecord, record_from_definition
from coordinator.service.background import Background
from coordinator.service.clock import Clock, wall_clock
from coordinator.service.dependencies import Dependencies
from coordinator.service.hints import HintPublisher, HintSink
from coordinator.service.transitions import Transition, Transitions, log_changes
from coordinator.store.base import Store


class TaskService:
    """Task operations shared by the API handlers and the resolvers.

    :param store: the task store (the truth).
    :param hints: where hints are put; ``None`` when running without Azure.
    :param timing: claim timeout and retry delay for the transitions.
    :param max_deadline: how far in the future a deadline may be (ms).
    :param clock: epoch-milliseconds clock; tests inject their own.
    """

    def __init__(
        self,
        *,
        store: Store,
        hints: HintSink | None,
        timing: Timing,
        max_deadline: int,
        clock: Clock = wall_clock,
    ) -> None:
        self._store = store
        self.timing = timing
        self.max_deadline = max_deadline
        self.clock = clock
        self._background = Background()
        self.hints = HintPublisher(
            store=store, sink=hints, clock=clock, background=self._background
        )
        self.transitions = Transitions(
            store=store,
            hints=self.hints,
            clock=clock,
            background=self._background,
            on_resolved=lambda task_id: self.dependencies.resolve_dependents(task_id),
        )
        self.dependencies = Dependencies(store=store, transitions=self.transitions)

    async def drain(self) -> None:
        """Wait for background effects started so far (shutdown, tests)."""
        await self._background.drain()

    async def apply(
        self,
        task_id: str,
        transition: Transition,
        *,
        action: str,
        read: TaskRecord | None = None,
    ) -> Outcome:
        """:meth:`Transitions.apply <coordinator.service.transitions.Transitions.apply>`."""
        return await self.transitions.apply(task_id, transition, action=action, read=read)

    async def apply_each(self, work: Iterable[tuple[str, Transition]], *, action: str) -> int:
        """Apply transitions to several tasks (resolver passes); returns how many changed."""
        return await self.transitions.apply_each(work, action=action)

    # --- reads ----------------------------------------------------------------------------

    async def get(self, task_id: str) -> TaskRecord:
        """:raises NotFound: no such task."""
        record = await self._store.get(task_id)
        if record is None:
            raise NotFound(f"task {task_id} does not exist")
        return record

    async def task_group(self, task_group_id: str, *, limit: int, after: str | None) -> Page:
        return await self._store.task_group(task_group_id, limit=limit, after=after)

    async def dependents(self, task_id: str, *, limit: int, after: str | None) -> Page:
        """:raises NotFound: no such task."""
        await self.get(task_id)
        return await self._store.dependents(task_id, limit=limit, after=after)

    async def run_counts(self, provisioner_id: str, worker_type: str) -> RunCounts:
        return await self._store.run_counts(provisioner_id, worker_type)

    # --- producers ------------------------------------------------------------------------

    async def create_task(self, task_id: str, body: Mapping[str, Any]) -> TaskRecord:
        """createTask: validate, store and (without dependencies) schedule a new task.

        Idempotent: the same definition again returns the current record; a different one is
        a conflict.

        :raises InputError: the definition is not acceptable.
        :raises Conflict: the taskId exists with a different definition.
        """
        now = self.clock()
        definition = definitions.normalise(task_id, body, now=now, max_deadline=self.max_deadline)
        record = record_from_definition(task_id, definition)
        if record.dependencies:
            await self.dependencies.check(record)
        outcome = lifecycle.create(record, now=now)
        stored = await self._store.insert(outcome.record)
        if stored is None:
            existing = await self._store.get(task_id)
            if existing is not None and definitions.definitions_match(
                existing.definition, definition
            ):
                return existing
            raise Conflict(
                f"task {task_id} already exists with a different definition; "
                "taskIds must be unique: generate a new slugid"
            )
        log_changes("created", None, stored)
        await self.transitions.effects(outcome)
        if stored.dependencies:
            # The edges are stored before the dependencies' states are read, so a dependency
            # resolving concurrently either sees this task among its dependents or is seen
            # resolved here: the task cannot be missed.
            scheduled = await self.dependencies.schedule_if_satisfied(stored)
            return scheduled.record
        return stored

    async def _from_read(
        self, record: TaskRecord, step: Callable[..., Outcome], action: str
    ) -> TaskRecord:
        """Apply a ``step(record, now=...)`` transition, starting from the caller's read."""
        outcome = await self.apply(
            record.task_id, lambda r, now: step(r, now=now), action=action, read=record
        )
        return outcome.record

    async def schedule(self, record: TaskRecord) -> TaskRecord:
        """scheduleTask."""
        return await self._from_read(record, lifecycle.schedule, "scheduled")

    async def rerun(self, record: TaskRecord) -> TaskRecord:
        """rerunTask."""
        return await self._from_read(record, lifecycle.rerun, "rerun")

    async def cancel(self, record: TaskRecord) -> TaskRecord:
        """cancelTask."""
        return await self._from_read(record, lifecycle.cancel, "canceled")

    # --- workers --------------------------------------------------------------------------

    async def claim(
        self,
        task_id: str,
        run_id: int,
        *,
        worker_group: str,
        worker_id: str,
        read: TaskRecord | None = None,
    ) -> TaskRecord:
        outcome = await self.apply(
            task_id,
            lambda r, now: lifecycle.claim(
                r,
                run_id=run_id,
                worker_group=worker_group,
                worker_id=worker_id,
                now=now,
                timing=self.timing,
            ),
            action="claimed",
            read=read,
        )
        return outcome.record

    async def reclaim(self, task_id: str, run_id: int) -> TaskRecord:
        outcome = await self.apply(
            task_id,
            lambda r, now: lifecycle.reclaim(r, run_id=run_id, now=now, timing=self.timing),
            action="reclaimed",
        )
        return outcome.record

    async def report(self, task_id: str, run_id: int, *, state: str, reason: str) -> TaskRecord:
        outcome = await self.apply(
            task_id,
            lambda r, now: lifecycle.report(
                r, run_id=run_id, state=state, reason=reason, now=now, timing=self.timing
            ),
            action=f"reported-{state}",
        )
        return outcome.record

    # --- resolvers ------------------------------------------------------------------------

    async def expired_claims(self, limit: int) -> list[tuple[str, int]]:
        """``(taskId, takenUntil)`` of running runs whose claim expired, oldest first."""
        return await self._store.expired_claims(self.clock(), limit)

    async def past_deadlines(self, before: int, limit: int) -> list[str]:
        """Unresolved tasks whose deadline is before ``before``."""
        return await self._store.past_deadlines(before, limit)

    async def tasks_to_notify(self, limit: int) -> list[str]:
        """Resolved tasks whose dependents still need re-examining."""
        return await self._store.tasks_to_notify(limit)

    async def resolve_dependents(self, task_id: str) -> int:
        return await self.dependencies.resolve_dependents(task_id)

    async def hints_due(self, before: int, limit: int) -> list[str]:
        """Tasks whose last run's hint was due before ``before`` and is still unconfirmed."""
        return await self._store.hints_due(before, limit)

    async def delete_expired(self, limit: int) -> int:
        """Delete tasks past ``expires`` (with their dependency edges); how many."""
        return await self._store.delete_expired(self.clock(), limit)
