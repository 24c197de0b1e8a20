"""Task-queue ids and priorities: the one place that builds, splits and checks them.

A task queue is ``<provisionerId>/<workerType>``; each has seven priorities, highest first,
and ``normal`` is accepted on input as ``lowest`` (as in Taskcluster).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coordinator.domain.errors import InputError

IDENTIFIER = re.compile(r"[a-zA-Z0-9_-]{1,38}")
"""provisionerId, workerType, schedulerId, workerGroup, workerId."""

PRIORITIES: tuple[str, ...] = (
    "highest",
    "very-high",
    "high",
    "medium",
    "low",
    "very-low",
    "lowest",
)
"""Priorities from highest to lowest."""

MAX_BATCH_RUNS = 32
"""The most runs one call names or gets: a batch of claimRuns, reclaimRuns or resolveRuns, and
claimWork's ``tasks``. It is one Azure get's worth of hints (Azure's ``numofmessages`` limit),
and the schemas of those calls say the same number."""


def canonical_priority(priority: str) -> str:
    """``normal`` is an old name of ``lowest``; every other priority is itself."""
    return "lowest" if priority == "normal" else priority


def priority_level(priority: str) -> int:
    """The priority digit used in queue names: 7 for ``highest`` down to 1 for ``lowest``."""
    return len(PRIORITIES) - PRIORITIES.index(priority)


def priority_at_level(level: int) -> str:
    """The priority of :func:`priority_level` ``level``."""
    return PRIORITIES[len(PRIORITIES) - level]


@dataclass(frozen=True, slots=True)
class TaskQueue:
    """One task queue: ``str()`` of it is its taskQueueId."""

    provisioner_id: str
    worker_type: str

    def __str__(self) -> str:
        return f"{self.provisioner_id}/{self.worker_type}"

    @classmethod
    def parse(cls, task_queue_id: str) -> TaskQueue:
        """Split and check a taskQueueId.

        :raises InputError: not ``<provisionerId>/<workerType>`` with two valid identifiers.
        """
        provisioner_id, slash, worker_type = task_queue_id.partition("/")
        if not (
            slash and IDENTIFIER.fullmatch(provisioner_id) and IDENTIFIER.fullmatch(worker_type)
        ):
            raise InputError(
                f"taskQueueId {task_queue_id!r} is not <provisionerId>/<workerType> "
                "(each 1-38 letters, digits, '-' or '_')"
            )
        return cls(provisioner_id, worker_type)
