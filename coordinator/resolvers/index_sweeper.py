"""Index sweeper: deletes the index entries and namespaces past their ``expires``. Until then
an expired entry is already not found, not listed, and replaced by any insert at its path."""

from __future__ import annotations

from coordinator.service.index import IndexService

INTERVAL = 60.0
"""Seconds between sweeps."""
BATCH = 1000
"""Entries (and as many namespaces) deleted per pass."""


async def run_once(index: IndexService) -> int:
    """Delete a batch of expired entries and namespaces; how many."""
    return await index.expire(BATCH)
