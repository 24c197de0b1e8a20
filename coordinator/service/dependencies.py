"""Dependencies: checking them at create time, and scheduling dependents once they are met.

A resolved task carries ``notify_dependents`` until its dependents were re-examined; the API
does that at once (through :class:`~coordinator.service.transitions.Transitions`' effects), and
the dependency resolver finishes it after a crash.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.domain import definitions, lifecycle
from coordinator.domain.errors import Conflict, NotFound
from coordinator.domain.lifecycle import TransitionResult
from coordinator.domain.records import TaskRecord
from coordinator.service.transitions import Transitions
from coordinator.store.base import Store

DEPENDENTS_PAGE = 200


class Dependencies:
    """Dependency checks and fan-out over one store."""

    def __init__(self, *, store: Store, transitions: Transitions) -> None:
        self._store = store
        self._transitions = transitions

    async def check(self, record: TaskRecord) -> None:
        """createTask's checks: every dependency exists and outlives this task's deadline.

        :raises InputError: naming the dependencies that do not.
        """
        definitions.check_dependencies(record, await self._store.get_many(record.dependencies))

    async def schedule_if_satisfied(self, record: TaskRecord) -> TransitionResult:
        """Schedule an unscheduled task whose dependencies are satisfied.

        :param record: the task as the caller just read (or stored) it.
        """
        states: Mapping[str, str | None] = await self._store.states(record.dependencies)
        return await self._transitions.apply(
            record.task_id,
            lambda r, now: lifecycle.schedule_if_satisfied(r, dependency_states=states, now=now),
            action="scheduled",
            read=record,
        )

    async def resolve_dependents(self, task_id: str) -> int:
        """Re-examine every dependent of a resolved task; returns how many were scheduled."""
        resolved = await self._store.get(task_id)
        if resolved is None:
            return 0
        scheduled = 0
        after: str | None = None
        while True:
            page = await self._store.dependents(task_id, limit=DEPENDENTS_PAGE, after=after)
            for dependent in page.items:
                if dependent.runs:
                    continue
                try:
                    if (await self.schedule_if_satisfied(dependent)).changed:
                        scheduled += 1
                except (NotFound, Conflict):
                    continue  # expired meanwhile, or someone else got there first
            if page.next_after is None:
                break
            after = page.next_after
        await self._transitions.apply_each(
            [
                (
                    task_id,
                    lambda r, now: lifecycle.dependents_notified(
                        r, examined_version=resolved.version
                    ),
                )
            ],
            action="dependents-notified",
        )
        return scheduled
