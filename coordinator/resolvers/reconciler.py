"""Reconciler: every pending run has a hint, whatever Azure lost.

The hint keeper covers hints the coordinator never managed to put. This pass covers hints
that were put and then lost: an emulator killed before it persisted them, a queue cleared or
deleted by hand. Per task queue it compares the store's pending runs (visible or delayed)
with the sum of Azure's approximate message counts of its seven queues, which include
invisible messages (delayed hints, and hints a worker has taken but not yet deleted); when
Azure holds fewer, it puts hints again for the deficit, the earliest claimable runs first, at
most ``budget`` a pass. Duplicates are harmless by design: every claim re-checks the store.

Cost model: a pass costs one count of the pending runs grouped by task queue (from the index
on queue and state) and seven Azure requests per task queue that has pending runs; nothing
is re-hinted on a timer, so a million-task backlog whose hints are all there costs a count
and no puts. A hint put again for a run that still had one, and stale hints (of runs claimed
or resolved meanwhile), inflate Azure's count and can hide a deficit until workers have
drained them; the next pass then puts the rest right. With the default interval a lost hint
is back within about a minute while workers make progress.
"""

from __future__ import annotations

import logging

from coordinator.azure.errors import QueueUnavailable
from coordinator.azure.queues import QueueService
from coordinator.domain.lifecycle import hint_for
from coordinator.domain.task_queues import PRIORITIES
from coordinator.service.tasks import TaskService

log = logging.getLogger(__name__)


async def run_once(service: TaskService, azure_queues: QueueService, *, budget: int = 500) -> int:
    """Put missing hints, at most ``budget`` of them; returns how many were put."""
    put = 0
    for pending in await service.pending_by_task_queue():
        if put >= budget:
            break
        task_queue = pending.task_queue
        try:
            counts = [
                await azure_queues.hint_count(
                    task_queue.provisioner_id, task_queue.worker_type, priority
                )
                for priority in PRIORITIES
            ]
        except QueueUnavailable:
            continue  # logged by the Azure layer; the next pass tries again
        deficit = pending.pending - sum(counts)
        if deficit <= 0:
            continue
        log.warning(
            "hints missing, putting them again taskQueueId=%s pending=%d inAzure=%d",
            task_queue,
            pending.pending,
            sum(counts),
        )
        for record in await service.oldest_pending(task_queue, limit=min(deficit, budget - put)):
            put += await service.hints.publish(hint_for(record))
    return put
