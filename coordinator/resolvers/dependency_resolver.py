"""Dependency resolver: finishes re-examining the dependents of resolved tasks.

The API does this right after a task resolves; this pass catches what a crash or a lost race
left behind, found through the record's ``notify_dependents`` flag."""

from __future__ import annotations

from coordinator.service.tasks import TaskService


async def run_once(service: TaskService, *, limit: int = 100) -> int:
    """Re-examine the dependents of up to ``limit`` flagged tasks; returns how many started."""
    scheduled = 0
    for task_id in await service.tasks_to_notify(limit):
        scheduled += await service.resolve_dependents(task_id)
    return scheduled
