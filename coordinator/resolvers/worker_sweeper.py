"""Worker sweeper: deletes workers whose records expired (unless still quarantined) and task
queues that expired, as Taskcluster's expiry crons do."""

from __future__ import annotations

from coordinator.service.workers import WorkerService


async def run_once(workers: WorkerService, *, limit: int = 1000) -> int:
    """Delete up to ``limit`` expired workers and as many task queues; how many in all."""
    return await workers.delete_expired(limit)
