"""Mapping between :class:`~coordinator.domain.records.TaskRecord` and the column values every
driver stores: the definition written once, the status written by compare-and-set, and the columns
derived from the status that the resolver indexes scan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import orjson

from coordinator.domain.concurrency_keys import UNKEYED, Key
from coordinator.domain.json_text import compact, exact_loads
from coordinator.domain.listings import Page
from coordinator.domain.records import Run, TaskRecord, record_from_definition
from coordinator.domain.task_queues import TaskQueue


def status_columns(record: TaskRecord) -> dict[str, Any]:
    """Everything compare-and-set writes, keyed by column name."""
    return {
        "task_id": record.task_id,
        # written only when changed (a new priority); insert_columns always writes it
        "definition": compact(record.definition) if record.definition_changed else None,
        "retries_left": record.retries_left,
        "runs": compact(record.stored_runs()),
        "state": record.state,
        "taken_until": record.taken_until,
        "open_deadline": record.open_deadline,
        "hint_due": record.hint_due,
        "visible_at": record.visible_at,
        "pending_priority": record.pending_priority,
        "notify_dependents": record.notify_dependents,
        "resolved": record.resolved,
    }


def insert_columns(record: TaskRecord) -> dict[str, Any]:
    """Everything insert writes, keyed by column name."""
    return {
        **status_columns(record),
        "task_group_id": record.task_group_id,
        "scheduler_id": record.scheduler_id,
        "provisioner_id": record.provisioner_id,
        "worker_type": record.worker_type,
        "expires": record.expires,
        "definition": compact(record.definition),
        "project_id": record.project_id,
        "created": record.created,
        "traceparent": record.traceparent,
        "concurrency_key": record.concurrency_key,
    }


def tag_rows(records: Sequence[TaskRecord]) -> list[dict[str, str]]:
    """The ``task_tags`` rows of new records: one per tag."""
    return [
        {"task_id": record.task_id, "tag_key": key, "tag_value": value}
        for record in records
        for key, value in record.tags
    ]


class Row(Protocol):
    """What both drivers' rows offer: ``sqlite3.Row`` and ``asyncpg.Record``."""

    def __getitem__(self, key: str | int, /) -> Any: ...


def record_from_row(row: Row) -> TaskRecord:
    """A record from a row with ``task_id, definition, retries_left, runs, hint_due,
    notify_dependents, version, traceparent`` (the JSON columns as text)."""
    definition = exact_loads(row["definition"])
    runs = orjson.loads(row["runs"])
    return record_from_definition(
        row["task_id"],
        definition,
        version=row["version"],
        retries_left=row["retries_left"],
        runs=tuple(Run.from_stored(run) for run in runs),
        hint_needed=row["hint_due"] is not None,
        notify_dependents=bool(row["notify_dependents"]),
        traceparent=row["traceparent"],
    )


def page_from_rows(rows: Sequence[Row], limit: int) -> Page[TaskRecord, str]:
    """A page from the rows of a listing query run with ``LIMIT limit + 1``: the extra row is
    not returned, it only tells that another page follows."""
    records = [record_from_row(row) for row in rows[:limit]]
    next_after = records[-1].task_id if len(rows) > limit else None
    return Page(items=records, next_after=next_after)


def stored_after_cas(record: TaskRecord, version: int, notify_dependents: bool) -> TaskRecord:
    """The record as a successful compare-and-set stored it, at ``version`` with the
    ``notify_dependents`` it stored (the store keeps the flag only for a task with dependents)."""
    return record.replace(
        version=version, notify_dependents=bool(notify_dependents), definition_changed=False
    )


_UNKEYED_TURN = ""
"""The ``concurrency_key`` of the turn row of a queue's tasks without a key (a key is never
empty)."""


def turns_from_rows(rows: Sequence[Row]) -> dict[Key, int]:
    """Whose turn it is, from ``key_turns`` rows."""
    return {row["concurrency_key"] or UNKEYED: row["served"] for row in rows}


def turn_rows(
    task_queue: TaskQueue, turns: dict[Key, int], written: Sequence[TaskRecord]
) -> list[dict[str, Any]]:
    """The ``set_key_turn`` rows of the keys of the ``written`` records, each row expiring with
    the last of its key's tasks."""
    expires: dict[Key, int] = {}
    for record in written:
        key = record.concurrency_key
        expires[key] = max(expires.get(key, 0), record.expires)
    return [
        {
            "provisioner_id": task_queue.provisioner_id,
            "worker_type": task_queue.worker_type,
            "concurrency_key": _UNKEYED_TURN if key is UNKEYED else key,
            "served": turns[key],
            "expires": expiry,
        }
        for key, expiry in expires.items()
    ]
