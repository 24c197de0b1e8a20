"""Queue gauges: every few seconds, the exact pending and claimed counts of every known task
queue go into ``queue_pending_tasks`` and ``queue_claimed_tasks``, so a ``/metrics`` scrape
reads a cached value and never queries the store (two queries per page of task queues per
refresh, whatever the number of scrapes or queues)."""

from __future__ import annotations

from coordinator.domain.listings import Key, RunCounts
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.metrics import ServiceMetrics
from coordinator.service.workers import WorkerService

INTERVAL = 5.0
"""Seconds between refreshes: how stale a gauge may be."""

PAGE = 1000
"""Task queues counted per store query."""


async def run_once(workers: WorkerService, metrics: ServiceMetrics) -> int:
    """Refresh the gauges; acts on no task, so returns 0."""
    counts: dict[TaskQueue, RunCounts] = {}
    after: Key | None = None
    while True:
        page = await workers.task_queues(limit=PAGE, after=after)
        task_queues = [record.task_queue for record in page.items]
        counts.update(zip(task_queues, await workers.run_counts(task_queues), strict=True))
        if page.next_after is None:
            break
        after = page.next_after
    metrics.set_task_queue_counts(counts)
    return 0
