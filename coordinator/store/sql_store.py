"""What both SQL drivers share: every read whose SQL differs only in its dialect.

A driver subclasses :class:`SQLStore` and supplies :meth:`SQLStore._fetch`, which runs a named
statement of its ``queries.sql`` with keyword parameters; the scans, listings and counts here
are then written once.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from coordinator.domain.listings import Page, RunCounts
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_groups import TaskGroup
from coordinator.store.base import Store
from coordinator.store.rows import Row, page_from_rows, record_from_row


class SQLStore(Store, abc.ABC):
    """A :class:`Store` on named SQL statements."""

    @abc.abstractmethod
    async def _fetch(self, name: str, **params: Any) -> Sequence[Row]:
        """All rows of the named statement."""

    async def get(self, task_id: str) -> TaskRecord | None:
        rows = await self._fetch("get_task", task_id=task_id)
        return record_from_row(rows[0]) if rows else None

    async def expired_claims(self, now: int, limit: int) -> list[tuple[str, int]]:
        rows = await self._fetch("expired_claims", now=now, limit=limit)
        return [(row["task_id"], row["taken_until"]) for row in rows]

    async def past_deadlines(self, now: int, limit: int) -> list[str]:
        return [row[0] for row in await self._fetch("past_deadlines", now=now, limit=limit)]

    async def hints_due(self, before: int, limit: int) -> list[str]:
        return [row[0] for row in await self._fetch("hints_due", before=before, limit=limit)]

    async def tasks_to_notify(self, limit: int) -> list[str]:
        return [row[0] for row in await self._fetch("tasks_to_notify", limit=limit)]

    async def task_group(self, task_group_id: str, *, limit: int, after: str | None) -> Page:
        rows = await self._fetch(
            "task_group", task_group_id=task_group_id, after=after or "", limit=limit + 1
        )
        return page_from_rows(rows, limit)

    async def dependents(self, task_id: str, *, limit: int, after: str | None) -> Page:
        rows = await self._fetch("dependents", task_id=task_id, after=after or "", limit=limit + 1)
        return page_from_rows(rows, limit)

    async def get_task_group(self, task_group_id: str) -> TaskGroup | None:
        rows = await self._fetch("get_task_group", task_group_id=task_group_id)
        return _task_group(rows[0]) if rows else None

    async def seal_task_group(self, task_group_id: str, *, now: int) -> TaskGroup | None:
        rows = await self._fetch("seal_task_group", task_group_id=task_group_id, now=now)
        return _task_group(rows[0]) if rows else None

    async def task_group_size(self, task_group_id: str) -> int:
        rows = await self._fetch("task_group_size", task_group_id=task_group_id)
        return int(rows[0][0])

    async def unresolved_in_group(
        self, task_group_id: str, *, limit: int, after: str | None
    ) -> list[str]:
        rows = await self._fetch(
            "unresolved_in_group", task_group_id=task_group_id, after=after or "", limit=limit
        )
        return [row[0] for row in rows]

    async def run_counts(self, provisioner_id: str, worker_type: str, *, now: int) -> RunCounts:
        rows = await self._fetch(
            "run_counts", provisioner_id=provisioner_id, worker_type=worker_type, now=now
        )
        row = rows[0]
        return RunCounts(pending=row["pending"], delayed=row["delayed"], running=row["running"])


def _task_group(row: Row) -> TaskGroup:
    return TaskGroup(
        task_group_id=row["task_group_id"],
        scheduler_id=row["scheduler_id"],
        expires=row["expires"],
        sealed=row["sealed"],
    )
