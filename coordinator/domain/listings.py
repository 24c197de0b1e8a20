"""What listings and counts return: a page of records, and a task queue's run counts."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue


@dataclass(frozen=True, kw_only=True, slots=True)
class Page:
    """One page of a listing.

    :param records: at most ``limit`` records, ordered by task id.
    :param next_after: pass as ``after`` to get the next page; ``None`` on the last page.
    """

    records: list[TaskRecord]
    next_after: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingCount:
    """How many pending runs (visible or delayed) one task queue has: as many hints should be
    in its Azure queues."""

    queue: TaskQueue
    pending: int


@dataclass(frozen=True, kw_only=True, slots=True)
class RunCounts:
    """Exact numbers of tasks whose last run is pending or running, for one task queue.

    :param pending: pending and claimable now.
    :param delayed: pending, but not claimable yet (notBefore, a retry delay).
    """

    pending: int
    delayed: int
    running: int
