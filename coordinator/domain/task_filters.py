"""What the management API selects tasks by: a :class:`TaskFilter` (every field optional,
combined with AND) and the per-state :class:`TaskCounts` it counts.

The states a filter and a count know are the task states plus ``delayed``: a pending task whose
run may not be claimed yet (``notBefore``, a retry delay). They are disjoint, so the counts add
up to the total: ``pending`` means claimable now, and a task's status calls both ``pending``.
A filter may also name ``unresolved``, which stands for every state that is not resolved
(:func:`filter_states`), as Taskcluster calls a task not yet completed, failed or exception.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any, Literal, cast, get_args

from coordinator.domain.task_queues import TaskQueue

FilterState = Literal[
    "unscheduled", "pending", "delayed", "running", "completed", "failed", "exception"
]
FILTER_STATES: tuple[FilterState, ...] = get_args(FilterState)
UNRESOLVED_FILTER_STATES: tuple[FilterState, ...] = ("unscheduled", "pending", "delayed", "running")
RERUNNABLE_STATES: tuple[FilterState, ...] = ("failed", "exception")
UNRESOLVED = "unresolved"
"""The name a filter may give for all of :data:`UNRESOLVED_FILTER_STATES` at once."""


def filter_states(names: Iterable[str]) -> tuple[FilterState, ...]:
    """The states a filter's (known) state names select, each once, ``unresolved`` expanded."""
    states: dict[FilterState, None] = {}
    for name in names:
        expanded = UNRESOLVED_FILTER_STATES if name == UNRESOLVED else (cast(FilterState, name),)
        states.update(dict.fromkeys(expanded))
    return tuple(states)


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskFilter:
    """Which tasks a management call acts on: those matching every field that is set.

    :param task_queue: the task's queue.
    :param other_than_task_queues: the task's queue is none of these (what the resolved-task
        TTLs sweep with: queues with TTLs of their own are swept by them).
    :param states: any of these states (empty: any state).
    :param tags: ``(key, value)`` pairs the task's ``tags`` must all hold.
    :param created_after: ``created`` at or after (epoch ms); ``created_before`` strictly
        before. The resolved bounds are alike, on the last run's ``resolved``, and match only
        resolved tasks.
    """

    task_queue: TaskQueue | None = None
    other_than_task_queues: tuple[TaskQueue, ...] = ()
    states: tuple[FilterState, ...] = ()
    scheduler_id: str | None = None
    task_group_id: str | None = None
    project_id: str | None = None
    tags: tuple[tuple[str, str], ...] = ()
    created_after: int | None = None
    created_before: int | None = None
    resolved_after: int | None = None
    resolved_before: int | None = None

    @property
    def is_empty(self) -> bool:
        """Whether the filter matches every task (what bulk cancel and delete refuse)."""
        return all(getattr(self, f.name) in (None, ()) for f in fields(self))

    def unresolved(self) -> TaskFilter | None:
        """The filter narrowed to unresolved tasks (what cancelTasks acts on); ``None`` when
        it can match no unresolved task (only resolved states, or a resolved-time bound)."""
        if self.resolved_after is not None or self.resolved_before is not None:
            return None
        wanted = self.states or UNRESOLVED_FILTER_STATES
        states = tuple(state for state in wanted if state in UNRESOLVED_FILTER_STATES)
        return dataclasses.replace(self, states=states) if states else None

    def rerunnable(self) -> TaskFilter | None:
        """The filter narrowed to failed and exception tasks (what rerunTasks acts on);
        ``None`` when it can match none of them."""
        wanted = self.states or RERUNNABLE_STATES
        states = tuple(state for state in wanted if state in RERUNNABLE_STATES)
        return dataclasses.replace(self, states=states) if states else None


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskCounts:
    """How many tasks match a filter, by state (states that match none are 0)."""

    states: dict[FilterState, int]

    @property
    def total(self) -> int:
        return sum(self.states.values())

    def to_api(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "states": {state: self.states.get(state, 0) for state in FILTER_STATES},
        }
