"""The management part of the store contract: the tasks a
:class:`~coordinator.domain.task_filters.TaskFilter` selects, listed, counted and deleted in
bounded batches (the management API, and the resolved-task TTLs).
"""

from __future__ import annotations

import abc

from coordinator.domain.listings import Page
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_filters import TaskCounts, TaskFilter


class ManagementStore(abc.ABC):
    """Tasks selected by a filter."""

    @abc.abstractmethod
    async def list_tasks(
        self, matching: TaskFilter, *, now: int, limit: int, after: str | None
    ) -> Page[TaskRecord, str]:
        """Tasks ``matching`` matches at ``now``, ordered by task id, after ``after``."""

    @abc.abstractmethod
    async def matching_task_ids(
        self, matching: TaskFilter, *, now: int, limit: int, after: str | None
    ) -> list[str]:
        """Ids of :meth:`list_tasks`, without reading the records."""

    @abc.abstractmethod
    async def count_tasks(self, matching: TaskFilter, *, now: int) -> TaskCounts:
        """How many tasks ``matching`` matches at ``now``, by state."""

    @abc.abstractmethod
    async def delete_matching(self, matching: TaskFilter, *, now: int, limit: int) -> int:
        """Delete up to ``limit`` tasks that ``matching`` matches at ``now`` (with their edges,
        tags and artifacts) in one transaction; return how many were deleted. A row that a
        concurrent compare-and-set holds is waited for, so fewer than ``limit`` means none is
        left."""
