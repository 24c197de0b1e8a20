"""Claim resolver: running runs whose ``takenUntil`` has passed become ``exception/claim-expired``
(and are retried while retries remain). Each transition names the exact ``takenUntil`` the scan
observed, so a reclaim that lands in between wins."""

from __future__ import annotations

from functools import partial

from coordinator.domain import lifecycle
from coordinator.domain.records import TaskRecord
from coordinator.service.tasks import TaskService


async def run_once(service: TaskService, *, limit: int = 500) -> int:
    """Resolve up to ``limit`` expired claims; returns how many this pass resolved."""
    expired = await service.expired_claims(limit)

    def expire(taken_until: int, record: TaskRecord, now: int) -> lifecycle.TransitionResult:
        return lifecycle.expire_claim(
            record, taken_until=taken_until, now=now, timing=service.timing
        )

    return await service.apply_each(
        ((task_id, partial(expire, seen)) for task_id, seen in expired), action="claim-expired"
    )
