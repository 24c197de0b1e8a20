"""Task queues and workers, as records kept from claims: their listings and counts, the
queue controls (pause, resume, limits), declareWorker and quarantineWorker.

Reads need no credentials, as every read of this API; the changes require Taskcluster's scopes
(ours for the controls).
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from coordinator.api import keyset
from coordinator.api.auth import Auth
from coordinator.api.endpoints import (
    PAGED,
    PARAMETERS,
    Endpoint,
    task_queue_of,
)
from coordinator.api.pipeline import (
    ApiServices,
    Body,
    Handlers,
    Routes,
)
from coordinator.domain.listings import RESOLVED_WINDOW_MAX_S, ResolvedCounts, RunCounts
from coordinator.domain.queue_controls import Limits, QueueDefaults
from coordinator.domain.records import TaskRecord, from_iso, to_iso
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import WorkerKey, task_queue_fields

log = logging.getLogger(__name__)


_PENDING_DESCRIPTION = (
    "Approximate number of pending tasks of the worker pool, from the Azure queues' message "
    "counts (an upper bound, cached for up to 20 s)."
)

_COUNTS_DESCRIPTION = (
    "Exact numbers of pending and running runs of the worker pool, counted in the store. "
    "This is the coordinator's management endpoint, not Taskcluster's approximate one."
)


def _resolved_body(since: int, counts: ResolvedCounts) -> Body:
    return {
        "since": to_iso(since),
        "completed": counts.completed,
        "failed": counts.failed,
        "exception": counts.exception,
    }


def _counts_body(task_queue: TaskQueue, counts: RunCounts) -> Body:
    """The exact counts of a task queue, as taskQueueCounts and taskQueueCountsBatch answer."""
    return {
        **task_queue_fields(task_queue),
        "pending": counts.pending,
        "delayed": counts.delayed,
        "running": counts.running,
        # the names the current Taskcluster client's taskQueueCounts reads
        "pendingTasks": counts.pending,
        "claimedTasks": counts.running,
    }


TASK_QUEUE_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        name="pendingTasks",
        method="GET",
        route="/pending/{provisionerId}/{workerType}",
        input=None,
        output="pending-tasks-response",
        title="Get Number of Pending Tasks",
        description=_PENDING_DESCRIPTION,
        stability="deprecated",
    ),
    Endpoint(
        name="pendingTasks",
        method="GET",
        route="/pending/{taskQueueId}",
        input=None,
        output="pending-tasks-response",
        title="Get Number of Pending Tasks (by taskQueueId)",
        description=_PENDING_DESCRIPTION,
        stability="deprecated",
        variant="ByTaskQueueId",
    ),
    Endpoint(
        name="taskQueueCounts",
        method="GET",
        route="/task-queues/{provisionerId}/{workerType}/counts",
        input=None,
        output="task-queue-counts-response",
        title="Count Pending and Running Runs",
        description=_COUNTS_DESCRIPTION,
        stability="experimental",
    ),
    Endpoint(
        name="taskQueueCounts",
        method="GET",
        route="/task-queues/{taskQueueId}/counts",
        input=None,
        output="task-queue-counts-response",
        title="Count Pending and Running Runs (by taskQueueId)",
        description=_COUNTS_DESCRIPTION,
        stability="experimental",
        variant="ByTaskQueueId",
    ),
    Endpoint(
        name="listTaskQueues",
        method="GET",
        route="/task-queues",
        input=None,
        output="list-task-queues-response",
        title="List Task Queues",
        description="One page of the task queues seen (a task created in it, a worker polling "
        "or claiming, declareWorker) and not expired, by taskQueueId.",
        query=PAGED,
    ),
    Endpoint(
        name="getTaskQueue",
        method="GET",
        route="/task-queues/{taskQueueId}",
        input=None,
        output="task-queue-response",
        title="Get Task Queue",
        description="The task queue; 404 when never seen or expired.",
    ),
    Endpoint(
        name="pauseTaskQueue",
        method="POST",
        route="/task-queues/{taskQueueId}/pause",
        input="pause-task-queue-request",
        output="task-queue-controls-response",
        title="Pause a Task Queue",
        description="No run of the task queue is claimed until it is resumed: claimWork hands "
        "out nothing, claimTask and claimRuns answer 429 with `Retry-After`. Tasks are still "
        "accepted and stay pending. Every replica applies it within about a second. Pausing a "
        "paused queue keeps its `since` and takes the new reason. Not a Taskcluster method.",
        stability="experimental",
        scopes="queue:manage:pause:<taskQueueId>",
    ),
    Endpoint(
        name="resumeTaskQueue",
        method="POST",
        route="/task-queues/{taskQueueId}/resume",
        input=None,
        output="task-queue-controls-response",
        title="Resume a Task Queue",
        description="Lift the task queue's pause (nothing happens to one not paused). Not a "
        "Taskcluster method.",
        stability="experimental",
        scopes="queue:manage:pause:<taskQueueId>",
    ),
    Endpoint(
        name="setTaskQueueLimits",
        method="PUT",
        route="/task-queues/{taskQueueId}/limits",
        input="task-queue-limits-request",
        output="task-queue-controls-response",
        title="Set a Task Queue's Limits",
        description="At most `maxRunning` runs of the task queue running, at most "
        "`maxClaimsPerSecond` claims a second, at most `maxRunningPerKey` runs of one "
        "`concurrencyKey` running (claims serve the keys in turn within a priority), across "
        "every replica; a claim beyond them is answered 429 with `Retry-After`, and claimWork "
        "hands out nothing beyond them. Only the limits in the body change; `null` lifts one. "
        "Not a Taskcluster method.",
        stability="experimental",
        scopes="queue:manage:limits:<taskQueueId>",
    ),
    Endpoint(
        name="setTaskQueueDefaults",
        method="PUT",
        route="/task-queues/{taskQueueId}/defaults",
        input="task-queue-defaults-request",
        output="task-queue-controls-response",
        title="Set a Task Queue's Defaults",
        description="`claimTimeout`: how long a claim of the queue's tasks lasts when the task "
        "sets none; `completedTTL` and `failedTTL`: how long the queue's completed, and "
        "failed or exception, tasks are kept after they resolve, instead of the coordinator's "
        "resolved-task TTLs. Only the defaults in the body change; `null` goes back to the "
        "coordinator's. Not a Taskcluster method.",
        stability="experimental",
        scopes="queue:manage:defaults:<taskQueueId>",
    ),
    Endpoint(
        name="listPendingTasks",
        method="GET",
        route="/task-queues/{taskQueueId}/pending",
        input=None,
        output="list-pending-tasks-response",
        title="List Pending Tasks",
        description="One page of the task queue's pending runs with their tasks, the oldest "
        "claimable first (runs delayed by notBefore or a retry delay by when they become "
        "claimable). An unknown queue has none.",
        stability="experimental",
        query=PAGED,
    ),
    Endpoint(
        name="listClaimedTasks",
        method="GET",
        route="/task-queues/{taskQueueId}/claimed",
        input=None,
        output="list-claimed-tasks-response",
        title="List Claimed Tasks",
        description="One page of the task queue's running runs with their workers and tasks, "
        "the oldest claim first. An unknown queue has none.",
        stability="experimental",
        query=PAGED,
    ),
    Endpoint(
        name="taskQueueCountsBatch",
        method="POST",
        route="/task-queues/counts",
        input="task-queue-counts-request",
        output="task-queue-counts-list-response",
        title="Count Pending and Running Runs of Many Task Queues",
        description="taskQueueCounts of up to 1,000 distinct task queues in one store query, "
        "in request order; an unknown queue counts zeros. With `resolvedWithin` (seconds, at "
        f"most {RESOLVED_WINDOW_MAX_S:,}), each also has `resolved`: its tasks resolved within "
        "that window, by outcome (a second store query).",
        stability="experimental",
    ),
    Endpoint(
        name="listProvisioners",
        method="GET",
        route="/provisioners",
        input=None,
        output="list-provisioners-response",
        title="List Provisioners",
        description="One page of the provisionerIds of the unexpired task queues, by "
        "provisionerId. Use listTaskQueues.",
        stability="deprecated",
        query=PAGED,
    ),
    Endpoint(
        name="getProvisioner",
        method="GET",
        route="/provisioners/{provisionerId}",
        input=None,
        output="provisioner-response",
        title="Get Provisioner",
        description="The provisioner, derived from its unexpired task queues; 404 without any.",
        stability="deprecated",
    ),
    Endpoint(
        name="listWorkerTypes",
        method="GET",
        route="/provisioners/{provisionerId}/worker-types",
        input=None,
        output="list-worker-types-response",
        title="List Worker Types",
        description="One page of the provisioner's unexpired task queues, as worker types, by "
        "workerType. Use listTaskQueues.",
        stability="deprecated",
        query=PAGED,
    ),
    Endpoint(
        name="getWorkerType",
        method="GET",
        route="/provisioners/{provisionerId}/worker-types/{workerType}",
        input=None,
        output="worker-type-response",
        title="Get Worker Type",
        description="The task queue `<provisionerId>/<workerType>` as a worker type; 404 when "
        "never seen or expired. Use getTaskQueue.",
        stability="deprecated",
    ),
    Endpoint(
        name="listWorkers",
        method="GET",
        route="/provisioners/{provisionerId}/worker-types/{workerType}/workers",
        input=None,
        output="list-workers-response",
        title="List Workers",
        description="One page of the task queue's workers that are unexpired or quarantined, by "
        "workerGroup and workerId; `quarantined=true|false` keeps only those that are, or are "
        "not, quarantined.",
        stability="deprecated",
        query=(*PAGED, PARAMETERS["quarantined"]),
    ),
    Endpoint(
        name="getWorker",
        method="GET",
        route="/provisioners/{provisionerId}/worker-types/{workerType}/workers/{workerGroup}/"
        "{workerId}",
        input=None,
        output="worker-response",
        title="Get Worker",
        description="The worker, with its 20 latest claims and its quarantine history; 404 when "
        "never seen, or expired and not quarantined.",
        stability="deprecated",
    ),
    Endpoint(
        name="quarantineWorker",
        method="PUT",
        route="/provisioners/{provisionerId}/worker-types/{workerType}/workers/{workerGroup}/"
        "{workerId}",
        input="quarantine-worker-request",
        output="worker-response",
        title="Quarantine a Worker",
        description="Until `quarantineUntil` (a past time lifts it) the worker claims nothing: "
        "claimWork answers no tasks at the end of its poll and claimTask 409. Every replica "
        "applies it within about a second. 404 for a worker never seen or declared.",
        stability="experimental",
        scopes="queue:quarantine-worker:<taskQueueId>/<workerGroup>/<workerId>",
    ),
    Endpoint(
        name="declareWorker",
        method="PUT",
        route="/provisioners/{provisionerId}/worker-types/{workerType}/{workerGroup}/{workerId}",
        input="update-worker-request",
        output="worker-response",
        title="Declare a Worker",
        description="Record the worker (and its task queue) as seen now, listed until at least "
        "`expires` (a day from now without it); expiry never moves back.",
        stability="experimental",
        scopes={
            "AllOf": [
                {
                    "for": "property",
                    "in": "properties",
                    "each": "queue:declare-worker:<taskQueueId>/<workerGroup>/<workerId>"
                    "#<property>",
                }
            ]
        },
    ),
)
"""The task-queue and worker methods."""


class TaskQueueHandlers(Handlers):
    """Task queues and workers."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.service = services.tasks
        self.dispatch = services.dispatch
        self.workers = services.workers
        self.controls = services.controls

    async def pendingTasks(self, request: web.Request, body: Any) -> Body:
        task_queue = task_queue_of(request.match_info)
        return {
            **task_queue_fields(task_queue),
            "pendingTasks": await self.dispatch.pending_count(task_queue),
        }

    async def taskQueueCounts(self, request: web.Request, body: Any) -> Body:
        task_queue = task_queue_of(request.match_info)
        counts = await self.service.run_counts(task_queue.provisioner_id, task_queue.worker_type)
        return _counts_body(task_queue, counts)

    @staticmethod
    def _worker(request: web.Request) -> WorkerKey:
        return WorkerKey(
            task_queue=task_queue_of(request.match_info),
            worker_group=request.match_info["workerGroup"],
            worker_id=request.match_info["workerId"],
        )

    async def listTaskQueues(self, request: web.Request, body: Any) -> Body:
        page = await self.workers.task_queues(
            limit=keyset.limit(request), after=keyset.after(request, (str, str))
        )
        controls = await self.controls.restricted()
        return keyset.page_body(
            request,
            "taskQueues",
            page,
            lambda found: {
                **found.to_api(),
                **(
                    controls[found.task_queue].task_queue_fields()
                    if found.task_queue in controls
                    else {}
                ),
            },
        )

    async def getTaskQueue(self, request: web.Request, body: Any) -> Body:
        task_queue = task_queue_of(request.match_info)
        found = await self.workers.task_queue(task_queue)
        controls = await self.controls.controls_of(task_queue)
        return {**found.to_api(), **controls.task_queue_fields()}

    async def pauseTaskQueue(self, request: web.Request, body: Any) -> Body:
        task_queue = task_queue_of(request.match_info)
        return (await self.controls.pause(task_queue, reason=body["reason"])).to_api()

    async def resumeTaskQueue(self, request: web.Request, body: Any) -> Body:
        return (await self.controls.resume(task_queue_of(request.match_info))).to_api()

    async def setTaskQueueLimits(self, request: web.Request, body: Any) -> Body:
        limits = Limits(
            max_running=_whole(body.get("maxRunning")),
            max_claims_per_second=body.get("maxClaimsPerSecond"),
            max_running_per_key=_whole(body.get("maxRunningPerKey")),
        )
        task_queue = task_queue_of(request.match_info)
        controls = await self.controls.set_limits(task_queue, limits, named=frozenset(body))
        return controls.to_api()

    async def setTaskQueueDefaults(self, request: web.Request, body: Any) -> Body:
        defaults = QueueDefaults(
            claim_timeout_s=body.get("claimTimeout"),
            completed_ttl_s=body.get("completedTTL"),
            failed_ttl_s=body.get("failedTTL"),
        )
        task_queue = task_queue_of(request.match_info)
        controls = await self.controls.set_defaults(task_queue, defaults, named=frozenset(body))
        return controls.to_api()

    async def listPendingTasks(self, request: web.Request, body: Any) -> Body:
        page = await self.workers.pending_runs(
            task_queue_of(request.match_info),
            limit=keyset.limit(request),
            after=keyset.after(request, (int, str)),
        )
        return keyset.page_body(
            request,
            "tasks",
            page,
            lambda record: {
                "taskId": record.task_id,
                "runId": len(record.runs) - 1,
                "task": dict(record.definition),
                "inserted": to_iso(record.runs[-1].scheduled),
            },
        )

    async def listClaimedTasks(self, request: web.Request, body: Any) -> Body:
        page = await self.workers.claimed_runs(
            task_queue_of(request.match_info),
            limit=keyset.limit(request),
            after=keyset.after(request, (int, str)),
        )

        def claimed(record: TaskRecord) -> Body:
            run = record.runs[-1].to_api()
            return {
                "taskId": record.task_id,
                "runId": run["runId"],
                "workerGroup": run["workerGroup"],
                "workerId": run["workerId"],
                "claimed": run["started"],
                "task": dict(record.definition),
            }

        return keyset.page_body(request, "tasks", page, claimed)

    async def taskQueueCountsBatch(self, request: web.Request, body: Any) -> Body:
        task_queues = [TaskQueue.parse(task_queue_id) for task_queue_id in body["taskQueueIds"]]
        counts = await self.workers.run_counts(task_queues)
        bodies = [
            _counts_body(task_queue, found)
            for task_queue, found in zip(task_queues, counts, strict=True)
        ]
        if "resolvedWithin" in body:
            since, resolved = await self.workers.resolved_counts(
                task_queues, within_s=int(body["resolvedWithin"])
            )
            for entry, found_resolved in zip(bodies, resolved, strict=True):
                entry["resolved"] = _resolved_body(since, found_resolved)
        return {"taskQueueCounts": bodies}

    async def listProvisioners(self, request: web.Request, body: Any) -> Body:
        page = await self.workers.provisioners(
            limit=keyset.limit(request), after=keyset.after(request, (str,))
        )
        return keyset.page_body(request, "provisioners", page, lambda found: found.to_api())

    async def getProvisioner(self, request: web.Request, body: Any) -> Body:
        found = await self.workers.provisioner(request.match_info["provisionerId"])
        return {**found.to_api(), "actions": []}

    async def listWorkerTypes(self, request: web.Request, body: Any) -> Body:
        page = await self.workers.task_queues(
            limit=keyset.limit(request),
            after=keyset.after(request, (str, str)),
            provisioner_id=request.match_info["provisionerId"],
        )
        return keyset.page_body(
            request, "workerTypes", page, lambda found: found.worker_type_to_api()
        )

    async def getWorkerType(self, request: web.Request, body: Any) -> Body:
        found = await self.workers.task_queue(task_queue_of(request.match_info))
        return {**found.worker_type_to_api(), "actions": []}

    async def listWorkers(self, request: web.Request, body: Any) -> Body:
        quarantined = request.query.get("quarantined")
        page = await self.workers.workers(
            task_queue_of(request.match_info),
            quarantined=None if quarantined is None else quarantined == "true",
            limit=keyset.limit(request),
            after=keyset.after(request, (str, str)),
        )
        now = self.workers.clock()
        return keyset.page_body(request, "workers", page, lambda found: found.list_item(now))

    async def getWorker(self, request: web.Request, body: Any) -> Body:
        return (await self.workers.worker(self._worker(request))).to_api()

    async def declareWorker(self, request: web.Request, body: Any) -> Body:
        worker = self._worker(request)
        # one scope per property given: an empty object needs none (as in Taskcluster)
        await self.authorize(request, properties=tuple(body))
        expires = from_iso(body["expires"]) if "expires" in body else None
        return (await self.workers.declare(worker, expires=expires)).to_api()

    async def quarantineWorker(self, request: web.Request, body: Any) -> Body:
        worker = self._worker(request)
        auth = await self.auth.caller(request)
        assert isinstance(auth, Auth)  # the pipeline required a scope: the caller is a client
        quarantined = await self.workers.quarantine(
            worker,
            until=from_iso(body["quarantineUntil"]),
            info=body.get("quarantineInfo"),
            client_id=auth.client_id,
        )
        return quarantined.to_api()


ROUTES = Routes(TASK_QUEUE_ENDPOINTS, TaskQueueHandlers)


def _whole(number: float | None) -> int | None:
    """A JSON integer as Python's ``int`` (JSON Schema counts ``2.0`` as an integer)."""
    return None if number is None else int(number)
