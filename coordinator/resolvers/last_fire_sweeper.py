"""Last-fire sweeper: deletes hooks' last fires older than a year (Taskcluster's rule), so that
a hook firing every few seconds does not grow its table forever."""

from __future__ import annotations

from coordinator.service.hooks import HookService

INTERVAL = 3600.0
"""Seconds between idle passes."""

BATCH = 1000
"""Last fires deleted per pass at most (a full pass runs again at once)."""


async def run_once(hooks: HookService) -> int:
    """Delete expired last fires; how many."""
    return await hooks.expire_last_fires(BATCH)
