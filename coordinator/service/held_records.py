"""The records of the tasks whose runs workers hold, as this process last wrote them.

A claimed run's next change is nearly always a report or a reclaim through the same process,
within seconds of the claim. :class:`HeldRecords` keeps what the claim's write stored, so that
the report's transition starts from it instead of a read of the store (a round trip and a
record built from its row). A record kept here may be stale: another replica, a resolver or an
operator may have changed the task since. That costs a lost compare-and-set, after which the
write path reads the store as it would have; a transition that refuses a kept record, or finds
nothing to change in it, is tried again on a fresh read before its answer is given, so no
answer is ever decided by a kept record alone (:mod:`coordinator.service.transitions`).
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.domain.records import TaskRecord

HELD_RECORDS_KEPT = 2048
"""The most records kept: more than a coordinator's workers usually hold at once, and a bound
on the memory (a record holds its task's definition); past it the oldest go, and their reports
read the store."""


class HeldRecords:
    """Records of tasks whose last run is running, by taskId, the oldest forgotten first."""

    def __init__(self, *, kept: int = HELD_RECORDS_KEPT) -> None:
        self._kept = kept
        self._records: dict[str, TaskRecord] = {}

    def written(self, record: TaskRecord) -> None:
        """``record`` is what a write of this process stored: kept while its run is held."""
        task_id = record.task_id
        self._records.pop(task_id, None)  # re-inserted last: the newest are kept longest
        if record.state != "running":
            return
        self._records[task_id] = record
        if len(self._records) > self._kept:
            del self._records[next(iter(self._records))]

    def take(self, task_ids: Iterable[str]) -> dict[str, TaskRecord]:
        """The kept records of ``task_ids``, forgotten here: the write that starts from one
        keeps what it stores, and one that loses reads the store again."""
        return {
            task_id: record
            for task_id in task_ids
            if (record := self._records.pop(task_id, None)) is not None
        }

    def __len__(self) -> int:
        return len(self._records)
