"""Claim floors: where a PostgreSQL claim of each task queue starts reading a priority level.

A claim reads the partial index ``tasks_claimable`` (pending runs only) from each level's
earliest visible run. Each claim makes the row versions it takes dead, and their index
entries stay until vacuum removes them, or until an index scan finds them dead to every
transaction and marks them so. While a transaction older than them is open (a forgotten
session, a long backup, an analyst's ``BEGIN``), neither may happen, and every later claim
walks every one of them again, visiting its table row to learn that it is not visible: a
claim's cost then grows with the runs claimed since that transaction began (18 ms a claim
after 57,000 on the bench machine, against 3 ms with the walk bounded).

A floor is a ``visible_at`` below which a level holds no claimable run that this process
could take, so the claim seeks straight to it. A claim asks levels in turn for up to a
quota of runs each (in priority order: every level its limit; by weight: the levels drawn),
and stops at its limit. After it (:meth:`ClaimFloors.advance`), each level it read

* that gave fewer runs than asked, and not because the claim had its limit there, had no
  more claimable runs: its floor is ``now - SETTLE_MS``;
* that gave what was asked, or the rest of the claim's limit, gets the earliest
  ``visible_at`` it read there, or ``now - SETTLE_MS`` if that is earlier;

and the levels it did not read keep theirs.

A run becomes pending with ``visible_at`` at least the ``now`` of the transaction that made
it so, and that transaction may commit after a claim that did not see it: ``SETTLE_MS`` is
how late it may commit (or how far another replica's clock may lag) and still be found.
A run left below its floor all the same (one that a concurrent claim had locked and then
let go, one whose priority changed, one made pending by a transaction slower than that)
waits for the next claim that reads without floors: one every ``RESCAN_MS`` for each task
queue.

Floors are a process's own and are lost with it; a process without them reads from the start
of each level, as every claim did before them.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.domain.task_queues import PRIORITIES, TaskQueue, priority_level

LEVELS = [priority_level(priority) for priority in PRIORITIES]
"""The priority levels, highest first: the order a claim in priority order reads them."""

SETTLE_MS = 200
"""How much older than the claim's ``now`` a run may be made pending by a transaction that
commits after the claim: a floor is never later than ``now - SETTLE_MS``. Every claim under a
held transaction walks the dead entries of this span: at 1 s, a third of what the hold added
to the database's work a task (docs/performance-history.md); a run that commits later waits
for its queue's next read without floors (:data:`RESCAN_MS`)."""

RESCAN_MS = 1_000
"""How often each task queue's claims read without floors, to find any run left below one."""

MAX_QUEUES = 10_000
"""Task queues whose floors a process keeps, the least recently claimed forgotten first (a
forgotten queue's next claim reads without floors)."""


@dataclass(slots=True)
class _QueueFloors:
    rescanned: int
    by_level: dict[int, int] = field(default_factory=dict)


class ClaimFloors:
    """The floors of each task queue this process claims from."""

    def __init__(self, *, max_queues: int = MAX_QUEUES) -> None:
        self._queues: OrderedDict[TaskQueue, _QueueFloors] = OrderedDict()
        self._max_queues = max_queues

    def reading(self, task_queue: TaskQueue, now: int) -> dict[int, int]:
        """The floors a claim at ``now`` reads ``task_queue`` from, by level (a level not
        named: 0); none when it is the queue's turn to read without them."""
        floors = self._queues.get(task_queue)
        # a clock that went back (an injected one, a corrected one) also reads without floors
        if floors is None or not 0 <= now - floors.rescanned < RESCAN_MS:
            self._queues[task_queue] = _QueueFloors(rescanned=now)
            self._queues.move_to_end(task_queue)
            while len(self._queues) > self._max_queues:
                self._queues.popitem(last=False)
            return {}
        self._queues.move_to_end(task_queue)
        return dict(floors.by_level)

    def advance(
        self,
        task_queue: TaskQueue,
        now: int,
        limit: int,
        quotas: Mapping[int, int],
        read: Sequence[tuple[int, int]],
    ) -> None:
        """Raise ``task_queue``'s floors after a claim at ``now`` that asked the levels of
        ``quotas``, in that order, for up to their quota of runs each and ``limit`` in all,
        and read ``read``: the ``(level, visible_at)`` of each run it locked, in the order it
        read them (level by level, each by ``visible_at``)."""
        floors = self._queues.get(task_queue)
        if floors is None:
            return
        settled = now - SETTLE_MS
        # the level where the claim had its limit: it read no further, not even there
        cut = read[-1][0] if read and len(read) >= limit else None
        counts = Counter(level for level, _ in read)
        earliest: dict[int, int] = {}
        for level, visible_at in read:
            earliest.setdefault(level, visible_at)
        for level, quota in quotas.items():
            if quota <= 0:  # asked for nothing, it learned nothing
                continue
            if counts[level] < quota and level != cut:
                floor = settled  # nothing more there to claim
            else:
                floor = min(earliest[level], settled)
            floors.by_level[level] = max(floors.by_level.get(level, 0), floor)
            if level == cut:
                break
