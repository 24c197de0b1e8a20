"""The resolutions part of the store contract: how many tasks of each task queue resolved, by
outcome, since a time (the dashboard's completed and failed counts and its throughput)."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from coordinator.domain.listings import ResolvedCounts
from coordinator.domain.task_queues import TaskQueue


class ResolutionStore(abc.ABC):
    """Tasks resolved per task queue."""

    @abc.abstractmethod
    async def resolved_counts_of(
        self, task_queues: Sequence[TaskQueue], *, since: int
    ) -> dict[TaskQueue, ResolvedCounts]:
        """The tasks of each of ``task_queues`` (distinct) whose last run resolved at
        ``since`` or later, by outcome, in one query whose cost grows with the tasks of the
        store resolved since then, not with what the queues kept from before; a queue with none
        may be absent."""
