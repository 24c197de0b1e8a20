"""Outbox rows to and from :class:`~coordinator.domain.events.QueueEvent`, for both drivers."""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from coordinator.domain.events import OutboxEntry, QueueEvent
from coordinator.domain.json_text import compact
from coordinator.domain.records import TaskRecord

EventsByTask = Mapping[str, Sequence[QueueEvent]]
"""Events to write with the records of these task ids, if those are written."""


def outbox_rows(events: Iterable[QueueEvent]) -> list[dict[str, Any]]:
    return [
        {
            "event_key": event.key,
            "exchange": event.exchange,
            "routing_key": event.routing_key,
            "cc": json.dumps(list(event.cc)),
            "body": compact(event.body),
        }
        for event in events
    ]


def written_outbox_rows(
    records: Sequence[TaskRecord], written: Container[str], events: EventsByTask
) -> list[dict[str, Any]]:
    """The outbox rows of the ``events`` of those ``records`` a batch wrote (their task ids
    in ``written``), in the records' order.

    :param records: the records of the batch, in the order the caller gave them.
    :param written: the task ids of those the batch wrote.
    :param events: the events of each record, by task id.
    """
    return outbox_rows(
        event for r in records if r.task_id in written for event in events.get(r.task_id, ())
    )


def entry_from_row(row: Any) -> OutboxEntry:
    cc = row["cc"]
    return OutboxEntry(
        id=int(row["id"]),
        exchange=row["exchange"],
        key=row["event_key"],
        routing_key=row["routing_key"],
        cc=() if cc == "[]" else tuple(json.loads(cc)),
        body_json=row["body"],
    )
