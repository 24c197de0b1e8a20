"""The purge-cache service's writes and reads (docs/secrets.md#purge-cache): purge requests
made through the API, read by workers before they start a task, and deleted a day after they
were last made.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordinator.domain.errors import InputError
from coordinator.domain.listings import Key, Page, keyed_page
from coordinator.domain.purge_cache import (
    CACHE_NAME,
    MAX_CACHE_NAME_LENGTH,
    REQUEST_TTL_MS,
    PurgeRequest,
)
from coordinator.domain.task_queues import TaskQueue
from coordinator.store.base import Store

log = logging.getLogger(__name__)

EXPIRY_BATCH = 1000
"""How many expired requests one sweep deletes at most (a full sweep runs again at once)."""

PurgeKey = tuple[str, str, str]
"""Where a page of allPurgeRequests ends: ``(provisionerId, workerType, cacheName)``."""


class PurgeCacheService:
    """Cache-purge requests through the API.

    :param clock: epoch milliseconds.
    """

    def __init__(self, *, store: Store, clock: Callable[[], int]) -> None:
        self._store = store
        self._clock = clock

    async def purge_cache(self, task_queue: TaskQueue, cache_name: str, *, by: str) -> PurgeRequest:
        """Ask the task queue's workers to purge caches named ``cache_name`` made before now.

        :raises InputError: a cacheName no scope can name.
        """
        if CACHE_NAME.fullmatch(cache_name) is None:
            raise InputError(
                f"cacheName {cache_name[:100]!r} is not valid: it must be 1 to "
                f"{MAX_CACHE_NAME_LENGTH} printable ASCII characters"
            )
        now = self._clock()
        stored = await self._store.purge_cache(
            PurgeRequest(
                task_queue=task_queue,
                cache_name=cache_name,
                before=now,
                expires=now + REQUEST_TTL_MS,
            )
        )
        log.info(
            "cache purge requested taskQueueId=%s cacheName=%r by=%s", task_queue, cache_name, by
        )
        return stored

    async def purge_requests(self, task_queue: TaskQueue, *, since: int) -> list[PurgeRequest]:
        """The task queue's requests to purge caches made before a time at or after
        ``since``."""
        return await self._store.purge_requests(task_queue, since=since)

    async def all_purge_requests(
        self, *, limit: int, after: PurgeKey | None
    ) -> Page[PurgeRequest, Key]:
        """A page of every request, by task queue and cacheName."""
        requests = await self._store.all_purge_requests(limit=limit + 1, after=after)
        return keyed_page(requests, limit, _key)

    async def expire_purge_requests(self) -> int:
        """Delete a batch of requests past their expiry; how many."""
        return await self._store.expire_purge_requests(self._clock(), EXPIRY_BATCH)


def _key(request: PurgeRequest) -> PurgeKey:
    return (request.task_queue.provisioner_id, request.task_queue.worker_type, request.cache_name)
