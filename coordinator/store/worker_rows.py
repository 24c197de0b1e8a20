"""Mapping between the task-queue and worker records and the columns of the ``task_queues``,
``task_queue_controls`` and ``workers`` tables that both drivers store: recent tasks and
quarantine notes as compact JSON text, times as epoch milliseconds; and the parameters of the
keyed listings."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from coordinator.domain.json_text import compact
from coordinator.domain.listings import Key, ResolvedCounts, RunCounts
from coordinator.domain.queue_controls import Limits, Pause, QueueControls, QueueDefaults
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import (
    NEVER_QUARANTINED,
    ProvisionerRecord,
    QuarantineNote,
    RecentTask,
    TaskQueueRecord,
    TaskQueueSighting,
    WorkerKey,
    WorkerRecord,
    WorkerSighting,
)
from coordinator.store.rows import Row

BEFORE_EVERY_TIME = -(2**63)
"""Less than any stored time: where a listing keyed by a time starts (BIGINT's minimum)."""


def task_queue_columns(task_queue: TaskQueue) -> dict[str, str]:
    return {"provisioner_id": task_queue.provisioner_id, "worker_type": task_queue.worker_type}


def worker_columns(key: WorkerKey) -> dict[str, str]:
    return {
        **task_queue_columns(key.task_queue),
        "worker_group": key.worker_group,
        "worker_id": key.worker_id,
    }


def task_queue_sighting_columns(sighting: TaskQueueSighting) -> dict[str, Any]:
    return {
        **task_queue_columns(sighting.task_queue),
        "seen": sighting.seen,
        "expires": sighting.expires,
    }


def worker_sighting_columns(
    sighting: WorkerSighting, recent: Sequence[RecentTask] | None = None
) -> dict[str, Any]:
    """The columns of a sighting's upsert.

    :param recent: what to store as the worker's recent tasks, when the driver merged them with
        the stored ones itself; else the sighting's own.
    """
    return {
        **worker_columns(sighting.key),
        "seen": sighting.seen,
        "expires": sighting.expires,
        "quarantine_until": sighting.seen - NEVER_QUARANTINED,
        "recent_tasks": recent_json(sighting.recent_tasks if recent is None else recent),
    }


def recent_json(tasks: Sequence[RecentTask]) -> str:
    return compact([task.to_api() for task in tasks])


def recent_from_json(text: str) -> tuple[RecentTask, ...]:
    return tuple(
        RecentTask(task_id=item["taskId"], run_id=item["runId"]) for item in json.loads(text)
    )


def note_json(note: QuarantineNote) -> str:
    return compact(note.to_stored())


def task_queue_from_row(row: Row) -> TaskQueueRecord:
    return TaskQueueRecord(
        task_queue=TaskQueue(row["provisioner_id"], row["worker_type"]),
        expires=row["expires"],
        last_date_active=row["last_date_active"],
        description=row["description"],
        stability=row["stability"],
    )


def provisioner_from_row(row: Row) -> ProvisionerRecord:
    return ProvisionerRecord(
        provisioner_id=row["provisioner_id"],
        expires=row["expires"],
        last_date_active=row["last_date_active"],
    )


def worker_key_from_row(row: Row) -> WorkerKey:
    return WorkerKey(
        task_queue=TaskQueue(row["provisioner_id"], row["worker_type"]),
        worker_group=row["worker_group"],
        worker_id=row["worker_id"],
    )


def worker_from_row(row: Row) -> WorkerRecord:
    return WorkerRecord(
        key=worker_key_from_row(row),
        first_claim=row["first_claim"],
        last_date_active=row["last_date_active"],
        expires=row["expires"],
        quarantine_until=row["quarantine_until"],
        quarantine_details=tuple(
            QuarantineNote.from_stored(note) for note in json.loads(row["quarantine_details"])
        ),
        recent_tasks=recent_from_json(row["recent_tasks"]),
    )


def counts_from_rows(rows: Sequence[Row]) -> dict[TaskQueue, RunCounts]:
    """The counts of ``run_counts_of`` rows: ``provisioner_id, worker_type, pending, delayed,
    running``."""
    return {
        TaskQueue(row["provisioner_id"], row["worker_type"]): RunCounts(
            pending=row["pending"], delayed=row["delayed"], running=row["running"]
        )
        for row in rows
    }


def resolved_counts_from_rows(rows: Sequence[Row]) -> dict[TaskQueue, ResolvedCounts]:
    """The counts of ``resolved_counts_of`` rows: ``provisioner_id, worker_type, completed,
    failed, exception``."""
    return {
        TaskQueue(row["provisioner_id"], row["worker_type"]): ResolvedCounts(
            completed=row["completed"], failed=row["failed"], exception=row["exception"]
        )
        for row in rows
    }


def after_names(after: Key | None, *names: str) -> dict[str, Any]:
    """The ``after_<name>`` parameters of a listing keyed by strings; empty strings (before
    every name) for the first page."""
    values = after if after is not None else ("",) * len(names)
    return {f"after_{name}": value for name, value in zip(names, values, strict=True)}


def after_time(after: Key | None, time: str) -> dict[str, Any]:
    """The ``after_<time>`` and ``after_task_id`` parameters of a listing keyed by a time and
    a task id."""
    values = after if after is not None else (BEFORE_EVERY_TIME, "")
    return {f"after_{time}": values[0], "after_task_id": values[1]}


def controls_from_row(row: Row) -> QueueControls:
    paused_since = row["paused_since"]
    rate = row["max_claims_per_second"]
    return QueueControls(
        task_queue=TaskQueue(row["provisioner_id"], row["worker_type"]),
        pause=None
        if paused_since is None
        else Pause(since=paused_since, reason=row["paused_reason"] or ""),
        limits=Limits(
            max_running=row["max_running"],
            max_claims_per_second=None if rate is None else float(rate),
            max_running_per_key=row["max_running_per_key"],
        ),
        defaults=QueueDefaults(
            claim_timeout_s=row["claim_timeout_s"],
            completed_ttl_s=row["completed_ttl_s"],
            failed_ttl_s=row["failed_ttl_s"],
        ),
        claims_tat_us=row["claims_tat_us"],
    )
