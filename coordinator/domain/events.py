"""Taskcluster's Pulse messages: which exchange, routing key, CCs and body a change of a task
makes, as the queue's ``services/queue/src/exchanges.js`` builds them, and the hooks service's
messages of a hook change (``services/hooks/src/exchanges.js``).

Pure: the service computes the events of a write from the records before and after it, and
the store keeps them in its outbox in the same transaction as the write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinator.domain.artifacts import Artifact
from coordinator.domain.records import Run, TaskRecord, changed_runs, to_iso
from coordinator.domain.task_groups import TaskGroup

EXCHANGE_PREFIX = "exchange/taskcluster-queue/v1/"
HOOK_EXCHANGE_PREFIX = "exchange/taskcluster-hooks/v1/"
AUTH_EXCHANGE_PREFIX = "exchange/taskcluster-auth/v1/"

TASK_EXCHANGES: tuple[str, ...] = (
    "task-defined",
    "task-pending",
    "task-running",
    "artifact-created",
    "task-completed",
    "task-failed",
    "task-exception",
    "task-priority-changed",
)
GROUP_EXCHANGES: tuple[str, ...] = (
    "task-group-resolved",
    "task-group-sealed",
    "task-group-priority-changed",
)

HOOK_EXCHANGES: tuple[str, ...] = ("hook-created", "hook-updated", "hook-deleted")
"""The hooks service's exchanges, under :data:`HOOK_EXCHANGE_PREFIX`."""
AUTH_EXCHANGES: tuple[str, ...] = (
    "client-created",
    "client-updated",
    "client-deleted",
    "role-created",
    "role-updated",
    "role-deleted",
)
"""The auth service's exchanges, under :data:`AUTH_EXCHANGE_PREFIX`."""
HOOK_ROUTING_KEY = "_"
"""The routing key of every hook message: Taskcluster declares one word, ``reserved``
(multiple words, "always match with ``#``"), that its builder leaves unset, so ``_``."""

_RUN_EXCHANGE = {
    "pending": "task-pending",
    "running": "task-running",
    "completed": "task-completed",
    "failed": "task-failed",
    "exception": "task-exception",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueEvent:
    """One Pulse message.

    :param exchange: the exchange's short name (``task-pending``, ``hook-created``), without
        its prefix (:func:`exchange_name`).
    :param key: the message's ordering key: its task id (or task group id for group
        exchanges, ``<hookGroupId>/<hookId>`` for hook exchanges); the outbox publishes the
        events of one key in the order written.
    :param routing_key: the primary routing key.
    :param cc: ``route.<route>`` per task route (AMQP ``CC`` header).
    """

    exchange: str
    key: str
    routing_key: str
    cc: tuple[str, ...]
    body: Mapping[str, Any]

    @property
    def exchange_name(self) -> str:
        return exchange_name(self.exchange)


def exchange_name(exchange: str) -> str:
    """The full name of the exchange of short name ``exchange``: the hooks service's for
    :data:`HOOK_EXCHANGES`, the auth service's for :data:`AUTH_EXCHANGES`, else the
    queue's."""
    if exchange in HOOK_EXCHANGES:
        return HOOK_EXCHANGE_PREFIX + exchange
    if exchange in AUTH_EXCHANGES:
        return AUTH_EXCHANGE_PREFIX + exchange
    return EXCHANGE_PREFIX + exchange


def _part(value: object) -> str:
    return "_" if value is None or value == "" else str(value)


def task_routing_key(
    record: TaskRecord,
    *,
    run_id: int | None = None,
    worker_group: str | None = None,
    worker_id: str | None = None,
) -> str:
    """``primary.<taskId>.<runId>.<workerGroup>.<workerId>.<provisionerId>.<workerType>.
    <schedulerId>.<taskGroupId>._``, ``_`` for a missing value."""
    return _TaskMessages(record).routing_key(run_id, worker_group, worker_id)


def group_routing_key(task_group_id: str, scheduler_id: str) -> str:
    """``primary.<taskGroupId>.<schedulerId>._`` of the task-group exchanges."""
    return f"primary.{_part(task_group_id)}.{_part(scheduler_id)}._"


def task_cc(record: TaskRecord) -> tuple[str, ...]:
    return tuple(f"route.{route}" for route in record.definition.get("routes", ()))


class _TaskMessages:
    """The messages of one task as it stands after a change: what they all share (its
    status, CCs, tags, the end of the routing key) is built once, not once a message."""

    __slots__ = ("_head", "_tail", "cc", "record", "status", "task")

    def __init__(self, record: TaskRecord) -> None:
        self.record = record
        self.status: dict[str, Any] = record.status()
        self.cc = task_cc(record)
        self.task = {"tags": record.definition.get("tags", {})}
        self._head = f"primary.{_part(record.task_id)}."
        self._tail = (
            f".{_part(record.provisioner_id)}.{_part(record.worker_type)}"
            f".{_part(record.scheduler_id)}.{_part(record.task_group_id)}._"
        )

    def routing_key(self, run_id: int | None, worker_group: Any, worker_id: Any) -> str:
        return f"{self._head}{_part(run_id)}.{_part(worker_group)}.{_part(worker_id)}{self._tail}"

    def event(
        self,
        exchange: str,
        run: Run | None,
        extra: Mapping[str, Any],
        *,
        status: Any = None,
        with_task: bool = True,
    ) -> QueueEvent:
        body: dict[str, Any] = {"version": 1, "status": self.status if status is None else status}
        if run is not None:
            body["runId"] = run.run_id
        if with_task:
            body["task"] = self.task
        body.update(extra)
        return QueueEvent(
            exchange=exchange,
            key=self.record.task_id,
            routing_key=self.routing_key(
                None if run is None else run.run_id,
                extra.get("workerGroup"),
                extra.get("workerId"),
            ),
            cc=self.cc,
            body=body,
        )


def _run_extra(exchange: str, run: Run) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if exchange != "task-pending":
        if run.worker_group is not None:
            extra["workerGroup"] = run.worker_group
        if run.worker_id is not None:
            extra["workerId"] = run.worker_id
    if exchange == "task-running" and run.taken_until is not None:
        extra["takenUntil"] = to_iso(run.taken_until)
    return extra


def task_events(before: TaskRecord | None, after: TaskRecord) -> list[QueueEvent]:
    """The messages Taskcluster publishes for the change from ``before`` (``None``: the task
    is new) to ``after``: task-defined for a new task, then per run whose state changed, in
    run order, task-pending, task-running, task-completed, task-failed or task-exception; and
    task-priority-changed when the priority changed."""
    events: list[QueueEvent] = []
    messages = _TaskMessages(after)
    if before is None:
        defined = {**messages.status, "state": "unscheduled", "runs": []}
        events.append(messages.event("task-defined", None, {}, status=defined))
    elif before.priority != after.priority:
        changed = {"oldPriority": before.priority, "newPriority": after.priority}
        events.append(messages.event("task-priority-changed", None, changed, with_task=False))
    for run in changed_runs(before, after):
        exchange = _RUN_EXCHANGE.get(run.state)
        if exchange is not None:
            events.append(messages.event(exchange, run, _run_extra(exchange, run)))
    return events


def running_event(record: TaskRecord, run_id: int) -> QueueEvent:
    """task-running of run ``run_id`` as it stands: what a repeated claim (the same worker
    claiming the run it holds) publishes again, as Taskcluster's claimTask does."""
    run = record.runs[run_id]
    return _TaskMessages(record).event("task-running", run, _run_extra("task-running", run))


def artifact_event(record: TaskRecord, artifact: Artifact) -> QueueEvent | None:
    """artifact-created of a new (or repeated) artifact, as createArtifact publishes it;
    ``None`` for an ``s3`` artifact, which Taskcluster never announces."""
    if artifact.storage_type == "s3":
        return None
    run = record.runs[artifact.run_id]
    described: dict[str, Any] = {
        "storageType": artifact.storage_type,
        "name": artifact.name,
        "expires": to_iso(artifact.expires),
        "contentType": artifact.content_type,
    }
    if artifact.content_length is not None:
        described["contentLength"] = artifact.content_length
    extra: dict[str, Any] = {"artifact": described}
    if run.worker_group is not None and run.worker_id is not None:
        extra |= {"workerGroup": run.worker_group, "workerId": run.worker_id}
    return _TaskMessages(record).event("artifact-created", run, extra, with_task=False)


def group_event(exchange: str, group: TaskGroup, **extra: Any) -> QueueEvent:
    """task-group-sealed or task-group-resolved of ``group`` (no CC), or with ``extra``
    (``newPriority``, ``tasksAffected``) task-group-priority-changed, whose body has no
    ``expires`` or ``sealed``."""
    # the group as getTaskGroup answers it, versioned as every message body
    body = {"version": 1, **group.to_api()}
    if exchange == "task-group-priority-changed":
        body = {k: body[k] for k in ("version", "taskGroupId", "schedulerId")}
    return QueueEvent(
        exchange=exchange,
        key=group.task_group_id,
        routing_key=group_routing_key(group.task_group_id, group.scheduler_id),
        cc=(),
        body={**body, **extra},
    )


def hook_event(exchange: str, hook_group_id: str, hook_id: str) -> QueueEvent:
    """hook-created, hook-updated or hook-deleted of a hook: the body is Taskcluster's
    ``pulse-hook-changed-message`` (``{hookGroupId, hookId}``, no ``version``), no CC."""
    return QueueEvent(
        exchange=exchange,
        key=f"{hook_group_id}/{hook_id}",
        routing_key=HOOK_ROUTING_KEY,
        cc=(),
        body={"hookGroupId": hook_group_id, "hookId": hook_id},
    )


def auth_event(exchange: str, entity_id: str) -> QueueEvent:
    """client-created/-updated/-deleted or role-created/-updated/-deleted: the body is
    Taskcluster's ``client-message`` (``{clientId, version: 1}``) or ``role-message``
    (``{roleId, version: 1}``); the routing key is the one unset word, as for hooks."""
    field = "clientId" if exchange.startswith("client-") else "roleId"
    return QueueEvent(
        exchange=exchange,
        key=f"{field}/{entity_id}",
        routing_key=HOOK_ROUTING_KEY,
        cc=(),
        body={field: entity_id, "version": 1},
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class OutboxEntry:
    """An event as the outbox keeps it: ``id`` orders the publishing; ``body_json`` is the
    body as stored, published as it is (never decoded and encoded again); ``attempts`` how
    many times the broker refused it so far."""

    id: int
    exchange: str
    key: str
    routing_key: str
    cc: tuple[str, ...]
    body_json: str
    attempts: int = 0

    @property
    def event(self) -> QueueEvent:
        return QueueEvent(
            exchange=self.exchange,
            key=self.key,
            routing_key=self.routing_key,
            cc=self.cc,
            body=json.loads(self.body_json),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class BrokerReply:
    """What the broker answered for a batch of outbox entries, by entry id.

    :param confirmed: the entries it confirmed (deleted from the outbox).
    :param refused: the entries it refused, and why: a nack, or the channel it closed over
        the entry (retried, then parked: :func:`after_refusal`).

    Entries in neither went unanswered (the broker went away): they stay as they are and
    are published again, in order, once it is back.
    """

    confirmed: frozenset[int] = frozenset()
    refused: Mapping[int, str] = field(default_factory=dict)


REFUSALS_BEFORE_PARKING = 5
"""How many times the broker may refuse a message before it is parked."""

RETRY_BACKOFF_MS = 1000
"""The wait after a message's first refusal; it doubles with each further one (1, 2, 4, 8 s)."""


def after_refusal(entry: OutboxEntry, now: int) -> int | None:
    """When to publish ``entry`` again after the broker refused it once more (epoch ms), or
    ``None``: it was refused :data:`REFUSALS_BEFORE_PARKING` times, park it. Until then the
    later messages of its task wait with it, so a task's order holds."""
    attempts = entry.attempts + 1
    if attempts >= REFUSALS_BEFORE_PARKING:
        return None
    return now + RETRY_BACKOFF_MS * (1 << (attempts - 1))


@dataclass(frozen=True, kw_only=True, slots=True)
class OutboxPass:
    """What one pass of the publisher did: how many messages the broker confirmed (and the
    outbox deleted), and the messages it parked, each with the broker's last refusal."""

    published: int = 0
    parked: tuple[tuple[OutboxEntry, str], ...] = ()
