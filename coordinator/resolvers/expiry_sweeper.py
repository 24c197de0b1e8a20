"""Expiry sweeper: deletes tasks whose ``expires`` has passed, with their dependency edges."""

from __future__ import annotations

from coordinator.service.tasks import TaskService


async def run_once(service: TaskService, *, limit: int = 1000) -> int:
    """Delete up to ``limit`` expired tasks; returns how many were deleted."""
    return await service.delete_expired(limit)
