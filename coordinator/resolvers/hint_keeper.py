"""Hint keeper: re-puts hints that were asked for but never confirmed in the store.

A pending run's hint is confirmed once Azure accepted it. If the coordinator died between the
store write and the put, or Azure was unreachable, the run stays ``hint_needed`` and this pass
puts it again after ``grace`` (long enough for an in-flight put to have finished), so no
pending run is stranded without a hint."""

from __future__ import annotations

from coordinator.lifecycle import hint_for
from coordinator.tasks import TaskService


async def run_once(service: TaskService, *, grace: int, limit: int = 500) -> int:
    """Put up to ``limit`` overdue hints; returns how many were put."""
    if service.hints is None:
        return 0
    put = 0
    for task_id in await service.store.hints_due(service.clock() - grace, limit):
        record = await service.store.get(task_id)
        if record is None or record.hint_due is None:
            continue
        put += await service.put_hint(hint_for(record))
    return put
