"""Purge-request sweeper: deletes the cache-purge requests a day after they were last made
(upstream's expiry), so the table holds only what a worker may still need."""

from __future__ import annotations

from coordinator.service.purge_cache import PurgeCacheService

INTERVAL = 3600.0
"""Seconds between idle sweeps."""


async def run_once(purge_cache: PurgeCacheService) -> int:
    """Delete a batch of expired purge requests; how many."""
    return await purge_cache.expire_purge_requests()
