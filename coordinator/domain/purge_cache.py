"""Cache-purge requests as the purge-cache service keeps them (docs/secrets.md#purge-cache): a
worker pool's cache to purge, the time before which a cache of that name is stale, and how
long the request is kept.

There is one request per ``(task queue, cacheName)``: purging again raises its ``before``.
Times are epoch milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coordinator.domain.task_queues import TaskQueue

REQUEST_TTL_MS = 24 * 60 * 60 * 1000
"""How long a purge request is kept after it was last made (upstream's one day): long enough
for every worker that runs a task in the meantime to see it."""

MAX_CACHE_NAME_LENGTH = 512
"""The longest cacheName (upstream sets none): a scope's suffix, and part of an
allPurgeRequests continuationToken (with the task queue), whose length is bounded."""

CACHE_NAME = re.compile(rf"[\x20-\x7e]{{1,{MAX_CACHE_NAME_LENGTH}}}")
"""What a cacheName is: printable ASCII, what a scope can name."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PurgeRequest:
    """Caches named ``cache_name`` on the workers of ``task_queue`` created before ``before``
    are to be purged; the request is deleted after ``expires``."""

    task_queue: TaskQueue
    cache_name: str
    before: int
    expires: int
