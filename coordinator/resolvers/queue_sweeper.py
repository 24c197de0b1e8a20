"""Queue sweeper: deletes Azure queues that have been unused for 10 days and are empty."""

from __future__ import annotations

from coordinator.azure.queues import QueueService


async def run_once(azure_queues: QueueService, *, now: int) -> int:
    """Delete unused empty queues; returns how many were deleted."""
    return len(await azure_queues.sweep_unused(now=now))
