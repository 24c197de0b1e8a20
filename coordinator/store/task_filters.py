"""The SQL of a :class:`~coordinator.domain.task_filters.TaskFilter`: the ``{filters}`` clause
of the management statements in both drivers' ``queries.sql``.

Values travel as ``:f_*`` parameters; only the state names, from a closed set, are written
into the text, so that PostgreSQL plans ``state IN ('pending')`` with the statistics of that
state rather than with one generic plan for every state. Each condition is one an index
serves (``docs/performance.md``). The clause also uses ``:now``, which tells pending from
delayed, and ``:after``, the listing's keyset (``""`` for a count or a delete); callers always
pass both.

On PostgreSQL the columns that only the management API filters by (``scheduler_id``,
``project_id``, ``created``) are indexed in ``task_listing`` rather than in ``tasks``
(migration 0027: every transition would add an entry to each of their indexes); a filter on
them is then a condition on that table's row of the task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator.domain.task_filters import FILTER_STATES, TaskFilter


@dataclass(frozen=True, kw_only=True, slots=True)
class FilterClause:
    """
    :param sql: a boolean SQL expression over the ``tasks`` table.
    :param params: its ``:f_*`` parameters.
    """

    sql: str
    params: dict[str, Any]


def filter_clause(task_filter: TaskFilter, *, listed_apart: bool = False) -> FilterClause:
    """The WHERE clause selecting the tasks ``task_filter`` matches; with ``listed_apart``
    (PostgreSQL), the listing columns are read from ``task_listing``."""
    conditions: list[str] = []
    listing: list[str] = []  # on the columns task_listing holds
    params: dict[str, Any] = {}

    def equal(
        column: str,
        value: str | int | None,
        *,
        operator: str = "=",
        into: list[str] = conditions,
    ) -> None:
        if value is not None:
            name = f"f_{len(params)}"
            params[name] = value
            into.append(f"{column} {operator} :{name}")

    if task_filter.task_queue is not None:
        equal("provisioner_id", task_filter.task_queue.provisioner_id)
        equal("worker_type", task_filter.task_queue.worker_type)
    for other in task_filter.other_than_task_queues:
        provisioner, worker_type = f"f_{len(params)}", f"f_{len(params) + 1}"
        params |= {provisioner: other.provisioner_id, worker_type: other.worker_type}
        conditions.append(f"NOT (provisioner_id = :{provisioner} AND worker_type = :{worker_type})")
    conditions += _state_conditions(task_filter)
    equal("scheduler_id", task_filter.scheduler_id, into=listing)
    equal("task_group_id", task_filter.task_group_id)
    equal("project_id", task_filter.project_id, into=listing)
    for key, value in sorted(set(task_filter.tags)):
        key_name, value_name = f"f_{len(params)}", f"f_{len(params) + 1}"
        params |= {key_name: key, value_name: value}
        # The task_id bound repeats the listing's keyset inside the subquery: PostgreSQL then
        # reads the tag index from the page's start instead of every earlier match again
        # (a full export by tag: 0.7 s instead of 11 s at a million tasks).
        conditions.append(
            "EXISTS (SELECT 1 FROM task_tags WHERE task_tags.tag_key = "
            f":{key_name} AND task_tags.tag_value = :{value_name} "
            "AND task_tags.task_id = tasks.task_id AND task_tags.task_id > :after)"
        )
    equal("created", task_filter.created_after, operator=">=", into=listing)
    equal("created", task_filter.created_before, operator="<", into=listing)
    equal("resolved", task_filter.resolved_after, operator=">=")
    equal("resolved", task_filter.resolved_before, operator="<")
    if listing and listed_apart:
        # the keyset repeats inside, as for tags: the listing's index is read from the page on
        conditions.append(
            "EXISTS (SELECT 1 FROM task_listing WHERE task_listing.task_id = tasks.task_id "
            "AND task_listing.task_id > :after AND " + " AND ".join(listing) + ")"
        )
    else:
        conditions += listing
    return FilterClause(sql=" AND ".join(conditions) or "1 = 1", params=params)


def _state_conditions(task_filter: TaskFilter) -> list[str]:
    wanted = set(task_filter.states)
    if not wanted:
        return []
    # delayed is a pending task whose visible_at is still ahead
    stored = sorted({"pending" if state == "delayed" else state for state in wanted})
    assert wanted <= set(FILTER_STATES)  # the API parsed them; never text from a client
    conditions = ["state IN (" + ", ".join(f"'{state}'" for state in stored) + ")"]
    if "pending" in wanted and "delayed" not in wanted:
        conditions.append("(state <> 'pending' OR visible_at <= :now)")
    elif "delayed" in wanted and "pending" not in wanted:
        conditions.append("(state <> 'pending' OR visible_at > :now)")
    return conditions
