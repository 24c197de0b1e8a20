"""Deadline resolver: every task still unresolved at its deadline (plus a small delay, so that
a report racing the deadline can land) ends ``exception/deadline-exceeded``."""

from __future__ import annotations

from coordinator.domain import lifecycle
from coordinator.domain.records import TaskRecord
from coordinator.service.tasks import TaskService


def _exceed(record: TaskRecord, now: int) -> lifecycle.TransitionResult:
    return lifecycle.exceed_deadline(record, now=now)


async def run_once(service: TaskService, *, delay_ms: int, limit: int = 500) -> int:
    """Resolve up to ``limit`` tasks whose deadline passed more than ``delay_ms`` ms ago."""
    due = await service.past_deadlines(service.clock() - delay_ms, limit)
    return await service.apply_each(
        ((task_id, _exceed) for task_id in due), action="deadline-exceeded"
    )
