"""Outbox rows to and from :class:`~coordinator.domain.events.QueueEvent`, and what a broker's
reply calls for (:func:`writes_after_reply`), for both drivers."""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.domain.events import (
    BrokerReply,
    OutboxEntry,
    OutboxPass,
    QueueEvent,
    after_refusal,
)
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
            "cc": json.dumps(event.cc) if event.cc else "[]",
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
        attempts=int(row["attempts"]),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplyWrites:
    """The outbox writes a broker's reply to a batch calls for: the ids to delete (confirmed
    or parked), the ``retry_outbox_event`` and ``park_outbox_event`` rows, and the pass's
    outcome."""

    deleted: list[int]
    retries: list[dict[str, Any]]
    parks: list[dict[str, Any]]
    outcome: OutboxPass

    @property
    def needed(self) -> bool:
        return bool(self.deleted or self.retries)


def writes_after_reply(
    entries: Sequence[OutboxEntry], reply: BrokerReply, *, now: int
) -> ReplyWrites:
    """What the outbox does with ``entries`` (in order) after ``reply``: delete the confirmed,
    retry the refused later (:func:`~coordinator.domain.events.after_refusal`) or park them,
    and leave the unanswered as they are. The later entries of a refused entry's key stay
    too, confirmed or not, to go out again after it: the key's last copies keep its order."""
    held: set[str] = set()
    deleted = []
    for entry in entries:
        if entry.id in reply.refused:
            held.add(entry.key)
        elif entry.id in reply.confirmed and entry.key not in held:
            deleted.append(entry.id)
    retries: list[dict[str, Any]] = []
    parks: list[dict[str, Any]] = []
    parked: list[tuple[OutboxEntry, str]] = []
    for entry in entries:
        reason = reply.refused.get(entry.id)
        if reason is None:
            continue
        retry_at = after_refusal(entry, now)
        if retry_at is None:
            parks.append({"id": entry.id, "reason": reason, "now": now})
            parked.append((entry, reason))
            deleted.append(entry.id)
        else:
            retries.append({"id": entry.id, "retry_at": retry_at})
    confirmed = len(deleted) - len(parks)
    return ReplyWrites(
        deleted=deleted,
        retries=retries,
        parks=parks,
        outcome=OutboxPass(published=confirmed, parked=tuple(parked)),
    )
