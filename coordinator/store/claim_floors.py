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
could take, so the claim seeks straight to it. After a claim (:meth:`ClaimFloors.advance`):

* a level the claim left with nothing claimable (it took fewer runs than its limit, or found
  its runs at a lower level) gets the floor ``now - SETTLE_MS``;
* the lowest level it took from gets the earliest ``visible_at`` it read there, or
  ``now - SETTLE_MS`` if that is later;
* the levels below it keep theirs.

A run becomes pending with ``visible_at`` at least the ``now`` of the transaction that made
it so, and that transaction may commit after a claim that did not see it: ``SETTLE_MS`` is
how late it may commit (or how far another replica's clock may lag) and still be found.
A run found below its floor all the same (one that a concurrent claim had locked and then
let go, or one made pending by a transaction slower than that) waits for the next claim
that reads without floors: one every ``RESCAN_MS`` for each task queue.

Floors are a process's own and are lost with it; a process without them reads from the start
of each level, as every claim did before them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from coordinator.domain.task_queues import PRIORITIES, TaskQueue, priority_level

LEVELS = [priority_level(priority) for priority in PRIORITIES]
"""The priority levels in the order a claim reads them, highest first."""

SETTLE_MS = 1_000
"""How much older than the claim's ``now`` a run may be made pending by a transaction that
commits after the claim: a floor is never later than ``now - SETTLE_MS``."""

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

    def reading(self, task_queue: TaskQueue, now: int) -> list[int]:
        """The floors a claim at ``now`` reads ``task_queue`` from, one per level of
        :data:`LEVELS`; all 0 when it is the queue's turn to read without them."""
        floors = self._queues.get(task_queue)
        # a clock that went back (an injected one, a corrected one) also reads without floors
        if floors is None or not 0 <= now - floors.rescanned < RESCAN_MS:
            self._queues[task_queue] = _QueueFloors(rescanned=now)
            self._queues.move_to_end(task_queue)
            while len(self._queues) > self._max_queues:
                self._queues.popitem(last=False)
            return [0] * len(LEVELS)
        self._queues.move_to_end(task_queue)
        return [floors.by_level.get(level, 0) for level in LEVELS]

    def advance(
        self, task_queue: TaskQueue, now: int, limit: int, read: Sequence[tuple[int, int]]
    ) -> None:
        """Raise ``task_queue``'s floors after a claim at ``now`` of up to ``limit`` runs read
        ``read``: the ``(level, visible_at)`` of each run it locked, in the order it read
        them (level by level, highest first, then by ``visible_at``)."""
        floors = self._queues.get(task_queue)
        if floors is None or limit <= 0:  # a claim of nothing looked at nothing
            return
        settled = now - SETTLE_MS
        last_level = read[-1][0] if len(read) >= limit else 0
        earliest = min((visible_at for level, visible_at in read if level == last_level), default=0)
        for level in LEVELS:
            if level > last_level:
                floor = settled
            elif level == last_level:
                floor = min(earliest, settled)
            else:
                continue
            floors.by_level[level] = max(floors.by_level.get(level, 0), floor)
