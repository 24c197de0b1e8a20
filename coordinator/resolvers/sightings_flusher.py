"""Sightings flusher: writes the task queues and workers this process saw (claims, claimWork
polls, reclaims, createTask) to the store, in one write per pass, about every second."""

from __future__ import annotations

from coordinator.service.workers import WorkerService


async def run_once(workers: WorkerService) -> int:
    """Write the buffered sightings. Returns 0 whatever it wrote: they are not tasks acted on,
    and a busy coordinator would otherwise log a line every second."""
    await workers.flush()
    return 0
