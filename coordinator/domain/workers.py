"""What the queue remembers of the task queues and workers it has seen, as Taskcluster does:
their records (with the provisioner and worker-type views derived from task queues), the
sightings that create and refresh them, quarantine notes, and the sort keys of their listings.

A task queue is seen when a task is created in it, when a worker polls or claims from it and
on declareWorker; a worker when it polls claimWork, claims, reclaims or is declared. Each
sighting keeps the record listed for :data:`SEEN_EXPIRY` more (expiry never moves back). A
worker keeps its :data:`RECENT_TASKS` latest claims. Pure values and rules; times are epoch
milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from coordinator.domain.records import to_iso
from coordinator.domain.task_queues import TaskQueue

SEEN_EXPIRY = 86_400_000
"""How long (ms) a task queue or worker stays listed after a sighting (Taskcluster's day)."""

RECENT_TASKS = 20
"""How many of its latest claims a worker record keeps (Taskcluster's cap)."""

NEVER_QUARANTINED = 10 * 365 * SEEN_EXPIRY
"""How far before its first sighting a new worker's ``quarantineUntil`` lies: Taskcluster
always answers a time, in the past for a worker never quarantined."""

UNSPECIFIED = "[unspecified]"
"""The ``quarantineInfo`` of a quarantine given without one (Taskcluster's)."""

Stability = Literal["experimental", "stable", "deprecated"]


def task_queue_fields(task_queue: TaskQueue) -> dict[str, str]:
    """``provisionerId``, ``workerType`` and ``taskQueueId`` of a task queue."""
    return {
        "provisionerId": task_queue.provisioner_id,
        "workerType": task_queue.worker_type,
        "taskQueueId": str(task_queue),
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerKey:
    """One worker: its task queue, workerGroup and workerId."""

    task_queue: TaskQueue
    worker_group: str
    worker_id: str

    def __str__(self) -> str:
        return f"{self.worker_group}/{self.worker_id} of task queue {self.task_queue}"


@dataclass(frozen=True, kw_only=True, slots=True)
class RecentTask:
    """A claimed run, as a worker's ``recentTasks`` lists it."""

    task_id: str
    run_id: int

    def to_api(self) -> dict[str, Any]:
        return {"taskId": self.task_id, "runId": self.run_id}


def recent_tasks(
    earlier: Sequence[RecentTask], later: Sequence[RecentTask]
) -> tuple[RecentTask, ...]:
    """The last :data:`RECENT_TASKS` of ``earlier`` followed by ``later``, oldest first."""
    return (*earlier, *later)[-RECENT_TASKS:]


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskQueueSighting:
    """A task queue seen at ``seen``, to be listed until at least ``expires``."""

    task_queue: TaskQueue
    seen: int
    expires: int

    def merged(self, later: TaskQueueSighting) -> TaskQueueSighting:
        """This sighting and a later one of the same queue, as one."""
        return TaskQueueSighting(
            task_queue=self.task_queue,
            seen=max(self.seen, later.seen),
            expires=max(self.expires, later.expires),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerSighting:
    """A worker seen at ``seen``, to be listed until at least ``expires``, that claimed
    ``recent_tasks`` (oldest first) since its last recorded sighting."""

    key: WorkerKey
    seen: int
    expires: int
    recent_tasks: tuple[RecentTask, ...] = ()

    def merged(self, later: WorkerSighting) -> WorkerSighting:
        """This sighting and a later one of the same worker, as one."""
        return WorkerSighting(
            key=self.key,
            seen=max(self.seen, later.seen),
            expires=max(self.expires, later.expires),
            recent_tasks=recent_tasks(self.recent_tasks, later.recent_tasks),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskQueueRecord:
    """A task queue as stored; also what the worker-type views show."""

    task_queue: TaskQueue
    expires: int
    last_date_active: int
    description: str = ""
    stability: Stability = "experimental"

    def to_api(self) -> dict[str, Any]:
        """The task queue as getTaskQueue and listTaskQueues answer it."""
        return {
            "taskQueueId": str(self.task_queue),
            "stability": self.stability,
            "description": self.description,
            "expires": to_iso(self.expires),
            "lastDateActive": to_iso(self.last_date_active),
        }

    def worker_type_to_api(self) -> dict[str, Any]:
        """The task queue as listWorkerTypes lists it (getWorkerType adds ``actions``)."""
        return {**task_queue_fields(self.task_queue), **self.to_api()}


@dataclass(frozen=True, kw_only=True, slots=True)
class ProvisionerRecord:
    """A provisioner: the task queues of one provisionerId taken together.

    :param expires: the latest expiry of its task queues.
    :param last_date_active: when the most recently active of them was last seen.
    """

    provisioner_id: str
    expires: int
    last_date_active: int

    def to_api(self) -> dict[str, Any]:
        """The provisioner as listProvisioners lists it (getProvisioner adds ``actions``)."""
        return {
            "provisionerId": self.provisioner_id,
            "stability": "experimental",
            "description": "",
            "expires": to_iso(self.expires),
            "lastDateActive": to_iso(self.last_date_active),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class QuarantineNote:
    """One quarantineWorker call: who, when, until when and why."""

    client_id: str
    updated_at: int
    quarantine_until: int
    info: str

    def to_stored(self) -> dict[str, Any]:
        return {
            "clientId": self.client_id,
            "updatedAt": self.updated_at,
            "quarantineUntil": self.quarantine_until,
            "quarantineInfo": self.info,
        }

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> QuarantineNote:
        return cls(
            client_id=data["clientId"],
            updated_at=data["updatedAt"],
            quarantine_until=data["quarantineUntil"],
            info=data["quarantineInfo"],
        )

    def to_api(self) -> dict[str, Any]:
        return {
            **self.to_stored(),
            "updatedAt": to_iso(self.updated_at),
            "quarantineUntil": to_iso(self.quarantine_until),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerRecord:
    """A worker as stored.

    :param quarantine_until: no claims until then; in the past when not quarantined.
    :param quarantine_details: every quarantineWorker call, oldest first.
    :param recent_tasks: its latest claims, oldest first.
    """

    key: WorkerKey
    first_claim: int
    last_date_active: int
    expires: int
    quarantine_until: int
    quarantine_details: tuple[QuarantineNote, ...] = ()
    recent_tasks: tuple[RecentTask, ...] = ()

    def quarantined(self, now: int) -> bool:
        return self.quarantine_until > now

    def listed(self, now: int) -> bool:
        """Expired workers are not listed, unless quarantined (as in Taskcluster)."""
        return self.expires > now or self.quarantined(now)

    def to_api(self) -> dict[str, Any]:
        """The worker as getWorker, declareWorker and quarantineWorker answer it."""
        return {
            **task_queue_fields(self.key.task_queue),
            "workerGroup": self.key.worker_group,
            "workerId": self.key.worker_id,
            "recentTasks": [task.to_api() for task in self.recent_tasks],
            "expires": to_iso(self.expires),
            "firstClaim": to_iso(self.first_claim),
            "lastDateActive": to_iso(self.last_date_active),
            "quarantineUntil": to_iso(self.quarantine_until),
            "quarantineDetails": [note.to_api() for note in self.quarantine_details],
            "actions": [],
        }

    def list_item(self, now: int) -> dict[str, Any]:
        """The worker as listWorkers lists it: ``quarantineUntil`` only while quarantined,
        ``latestTask`` only once it claimed."""
        item: dict[str, Any] = {
            "workerGroup": self.key.worker_group,
            "workerId": self.key.worker_id,
            "firstClaim": to_iso(self.first_claim),
            "lastDateActive": to_iso(self.last_date_active),
        }
        if self.recent_tasks:
            item["latestTask"] = self.recent_tasks[-1].to_api()
        if self.quarantined(now):
            item["quarantineUntil"] = to_iso(self.quarantine_until)
        return item
