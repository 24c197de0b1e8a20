"""Reads the management API's query string into a
:class:`~coordinator.domain.task_filters.TaskFilter`.

The route handler has checked every value against its parameter schema already (a date-time,
a known state, a tag with a colon, ids of the right shape); what is left here is what a schema
cannot say: a parameter that only one value makes sense for, given twice.
"""

from __future__ import annotations

from multidict import MultiMapping

from coordinator.api.errors import InputValidationError
from coordinator.domain.records import from_iso
from coordinator.domain.task_filters import TaskFilter, filter_states
from coordinator.domain.task_queues import TaskQueue

_REPEATABLE = frozenset({"state", "tag"})


def task_filter(query: MultiMapping[str]) -> TaskFilter:
    """The filter a (schema-valid) management query names.

    :raises InputValidationError: a parameter that takes one value is given several times.
    """
    repeated = sorted(
        name for name in set(query) if name not in _REPEATABLE and len(query.getall(name)) > 1
    )
    if repeated:
        raise InputValidationError(
            f"query parameters {', '.join(repeated)} may be given once each (only state, "
            "matching any of its values, and tag, matching all of them, repeat)"
        )

    def time(name: str) -> int | None:
        value = query.get(name)
        if value is None:
            return None
        try:
            return from_iso(value)
        except ValueError as error:  # a leap second, year 0: the pattern lets them through
            raise InputValidationError(f"{name}={value!r} is not a date-time: {error}") from None

    task_queue = query.get("taskQueueId")
    return TaskFilter(
        task_queue=None if task_queue is None else TaskQueue.parse(task_queue),
        states=filter_states(query.getall("state", [])),
        scheduler_id=query.get("schedulerId"),
        task_group_id=query.get("taskGroupId"),
        project_id=query.get("projectId"),
        tags=tuple(_tag(tag) for tag in query.getall("tag", [])),
        created_after=time("createdAfter"),
        created_before=time("createdBefore"),
        resolved_after=time("resolvedAfter"),
        resolved_before=time("resolvedBefore"),
    )


def _tag(text: str) -> tuple[str, str]:
    key, _, value = text.partition(":")
    return key, value
