"""Expiry sweeper: deletes tasks whose ``expires`` has passed, with their dependency edges, and
resolved tasks kept past their TTL (``COORDINATOR_COMPLETED_TTL``/``COORDINATOR_FAILED_TTL``).

It runs every resolver interval: a pass with nothing to delete is one index probe per rule.
"""

from __future__ import annotations

from coordinator.service.management import TaskManagement
from coordinator.service.tasks import TaskService


async def run_once(service: TaskService, management: TaskManagement, *, limit: int = 1000) -> int:
    """Delete up to about ``limit`` tasks per rule; returns how many were deleted."""
    expired = await service.delete_expired(limit)
    return expired + await management.expire_resolved(limit)
