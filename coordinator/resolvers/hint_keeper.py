"""Hint keeper: re-puts hints that were asked for but never confirmed in the store.

A pending run's hint is confirmed once Azure accepted it. If the coordinator died between the
store write and the put, or Azure was unreachable, the run stays ``hint_needed`` and this pass
puts it again after ``grace_ms`` (long enough for an in-flight put to have finished), so no
pending run is stranded without a hint."""

from __future__ import annotations

from coordinator.domain.errors import NotFound
from coordinator.domain.lifecycle import hint_for
from coordinator.service.tasks import TaskService


async def run_once(service: TaskService, *, grace_ms: int, limit: int = 500) -> int:
    """Put up to ``limit`` overdue hints; returns how many were put."""
    if not service.hints.enabled:
        return 0
    # A hint put and not yet confirmed is not overdue: write the confirmations waiting for
    # the publisher's delay first, or a grace shorter than that delay would put them again.
    await service.hints.flush()
    put = 0
    for task_id in await service.hints_due(service.clock() - grace_ms, limit):
        try:
            record = await service.get(task_id)
        except NotFound:
            continue  # expired or deleted since the scan
        if record.hint_due is not None:
            put += await service.hints.publish(hint_for(record))
    if put:
        await service.hints.flush()  # its own at once: they were overdue already
    return put
