"""The purge-cache part of the store contract (docs/secrets.md#purge-cache): one purge request
per ``(task queue, cacheName)``, raised by each purge, listed by task queue or all together,
and deleted once expired.
"""

from __future__ import annotations

import abc

from coordinator.domain.purge_cache import PurgeRequest
from coordinator.domain.task_queues import TaskQueue


class PurgeCacheStore(abc.ABC):
    """Cache-purge requests."""

    @abc.abstractmethod
    async def purge_cache(self, request: PurgeRequest) -> PurgeRequest:
        """Record ``request``: a new row, or the stored one's ``before`` and ``expires``
        raised to ``request``'s (never lowered: a replica whose clock is behind cannot undo a
        purge). Returns the request as stored."""

    @abc.abstractmethod
    async def purge_requests(self, task_queue: TaskQueue, *, since: int) -> list[PurgeRequest]:
        """The task queue's requests whose ``before`` is at or after ``since``, by
        cacheName."""

    @abc.abstractmethod
    async def all_purge_requests(
        self, *, limit: int, after: tuple[str, str, str] | None
    ) -> list[PurgeRequest]:
        """Up to ``limit`` requests by ``(provisionerId, workerType, cacheName)``, those after
        ``after`` (``None``: from the first)."""

    @abc.abstractmethod
    async def expire_purge_requests(self, now: int, limit: int) -> int:
        """Delete up to ``limit`` requests whose ``expires`` is before ``now``, the earliest
        first; how many."""
