"""What listings and counts return: a page of any listing, a task queue's run counts, and its
tasks resolved within a window."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from coordinator.domain.task_queues import TaskQueue

T = TypeVar("T")
K = TypeVar("K")

Key = tuple[str | int, ...]
"""Where a keyset listing's page ended: the values of its sort columns for its last item."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Page(Generic[T, K]):
    """One page of a listing sorted by a key: a task id, or a :data:`Key` of several columns.

    :param items: at most ``limit`` items, in key order.
    :param next_after: the last item's key, to pass as ``after`` for the next page; ``None``
        on the last page.
    """

    items: list[T]
    next_after: K | None


def keyed_page(items: Sequence[T], limit: int, key: Callable[[T], K]) -> Page[T, K]:
    """A page from the items of a listing read with ``LIMIT limit + 1``: the extra item is
    not returned, it only tells that another page follows."""
    kept = list(items[:limit])
    return Page(items=kept, next_after=key(kept[-1]) if len(items) > limit else None)


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingCount:
    """How many pending runs (visible or delayed) one task queue has: as many hints should be
    in its Azure queues."""

    task_queue: TaskQueue
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


RESOLVED_WINDOW_MAX_S = 24 * 60 * 60
"""The longest window taskQueueCountsBatch counts resolutions over, in seconds: the count reads
every task resolved in the window, so a day bounds its cost."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResolvedCounts:
    """Numbers of tasks of one task queue whose last run resolved (by outcome) since a time:
    a task retried counts once, when it resolves for good; a task rerun since then, not at all.
    """

    completed: int = 0
    failed: int = 0
    exception: int = 0
