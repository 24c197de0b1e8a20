"""Expiry sweeper: deletes expired artifacts (their bytes, then their rows), tasks whose
``expires`` has passed (with their dependency edges, once their artifacts are gone), and
resolved tasks kept past their TTL (``COORDINATOR_COMPLETED_TTL``/``COORDINATOR_FAILED_TTL``,
their artifacts' bytes first).

It runs every resolver interval: a pass with nothing to delete is one index probe per rule.
"""

from __future__ import annotations

from coordinator.service.management import TaskManagement


async def run_once(management: TaskManagement, *, limit: int = 1000) -> int:
    """Delete up to about ``limit`` artifacts and tasks per rule; returns how many were
    deleted."""
    expired = await management.delete_expired(limit)
    return expired + await management.expire_resolved(limit)
