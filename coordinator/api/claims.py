"""A worker's calls on one run: pollTaskUrls, claimTask and claimWork, reclaimTask, the three
reports and reportProgress; and the body a claim answers, which the batch calls share
(:mod:`coordinator.api.run_batches`), and the body of a run's progress.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from coordinator.api import tracing
from coordinator.api.auth import Authorizer
from coordinator.api.endpoints import (
    Endpoint,
    as_worker,
    task_queue_of,
)
from coordinator.api.pipeline import (
    ApiServices,
    Body,
    Handlers,
    Routes,
    run_id_of,
    status_body,
    task_id_of,
)
from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.progress import RunProgress
from coordinator.domain.records import TaskRecord, to_iso

log = logging.getLogger(__name__)


_CLAIM_WORK_DESCRIPTION = (
    "Long-poll (about 20 s) for up to `tasks` pending runs of the worker pool and claim them. "
    "Returns as soon as at least one claim succeeds, or an empty list at the end of the poll."
)


REPORTS = {
    "completed": "reportCompleted",
    "failed": "reportFailed",
    "exception": "reportException",
}
"""A resolution's report method: the name of its span, whichever call reported it."""


def retry_after_ms(report: Body) -> int | None:
    """A report's ``retryAfter`` (seconds; the schema bounds it) in milliseconds."""
    seconds = report.get("retryAfter")
    return None if seconds is None else round(seconds * 1000)


def held_run(auth: Authorizer, record: TaskRecord, run_id: int, **extra: Any) -> Body:
    """What claims and reclaims answer about the run a worker holds, with the run's temporary
    credentials last."""
    run = record.runs[run_id]
    assert run.taken_until is not None
    return {
        "status": record.status(),
        "runId": run.run_id,
        "workerGroup": run.worker_group,
        "workerId": run.worker_id,
        "takenUntil": to_iso(run.taken_until),
        **extra,
        "credentials": auth.run_credentials(record, run),
    }


def progress_body(progress: RunProgress) -> Body:
    """A run's progress as reportProgress and the task's progress answer it."""
    return {
        "runId": progress.run_id,
        "fraction": progress.fraction,
        "message": progress.message,
        "updated": to_iso(progress.updated),
    }


def claim_body(auth: Authorizer, record: TaskRecord, traceparent: str | None) -> Body:
    """A claim as claimTask, claimWork and claimRuns answer it; with tracing, the claim's
    ``traceparent`` (docs/operations.md#tracing), which Taskcluster's answer lacks."""
    if traceparent is None:
        return held_run(auth, record, -1, task=dict(record.definition))
    return held_run(auth, record, -1, task=dict(record.definition), traceparent=traceparent)


CLAIM_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        name="pollTaskUrls",
        method="GET",
        route="/poll-task-url/{provisionerId}/{workerType}",
        input=None,
        output="poll-task-urls-response",
        title="Get Urls to Poll Pending Tasks",
        description="Signed URLs to get and delete hint messages of the worker pool's Azure "
        "queues, highest priority first, valid until `expires`.",
        stability="deprecated",
        scopes="queue:poll-task-urls:<taskQueueId>",
    ),
    Endpoint(
        name="claimTask",
        method="POST",
        route="/task/{taskId}/runs/{runId}/claim",
        input="task-claim-request",
        output="task-claim-response",
        title="Claim Task",
        description="Claim a pending run for the worker until `takenUntil`. Repeating the "
        "claim of a run the same worker holds returns the claim again. 429 with `Retry-After` "
        "while the task queue is paused or at its limits.",
        stability="deprecated",
        scopes=as_worker("queue:claim-task:<provisionerId>/<workerType>"),
        statuses=("429",),
    ),
    Endpoint(
        name="claimWork",
        method="POST",
        route="/claim-work/{provisionerId}/{workerType}",
        input="claim-work-request",
        output="claim-work-response",
        built_output=True,
        title="Claim Work",
        description=_CLAIM_WORK_DESCRIPTION,
        scopes=as_worker("queue:claim-work:<taskQueueId>"),
    ),
    Endpoint(
        name="claimWork",
        method="POST",
        route="/claim-work/{taskQueueId}",
        input="claim-work-request",
        output="claim-work-response",
        built_output=True,
        title="Claim Work (by taskQueueId)",
        description=_CLAIM_WORK_DESCRIPTION,
        variant="ByTaskQueueId",
        scopes=as_worker("queue:claim-work:<taskQueueId>"),
    ),
    Endpoint(
        name="reclaimTask",
        method="POST",
        route="/task/{taskId}/runs/{runId}/reclaim",
        input=None,
        output="task-reclaim-response",
        title="Reclaim Task",
        description="Extend the claim of a running run and get fresh credentials. A conflict "
        "means the worker must stop the task and report nothing.",
        scopes="queue:reclaim-task:<taskId>/<runId>",
    ),
    Endpoint(
        name="reportCompleted",
        method="POST",
        route="/task/{taskId}/runs/{runId}/completed",
        input=None,
        output="task-status-response",
        title="Report Run Completed",
        description="Resolve the running run as `completed`.",
        scopes="queue:resolve-task:<taskId>/<runId>",
    ),
    Endpoint(
        name="reportFailed",
        method="POST",
        route="/task/{taskId}/runs/{runId}/failed",
        input=None,
        output="task-status-response",
        title="Report Run Failed",
        description="Resolve the running run as `failed`.",
        scopes="queue:resolve-task:<taskId>/<runId>",
    ),
    Endpoint(
        name="reportException",
        method="POST",
        route="/task/{taskId}/runs/{runId}/exception",
        input="task-exception-request",
        output="task-status-response",
        title="Report Task Exception",
        description="Resolve the running run as `exception` with the given reason; "
        "`worker-shutdown` and `intermittent-task` retry the task while retries remain.",
        scopes="queue:resolve-task:<taskId>/<runId>",
    ),
    Endpoint(
        name="reportProgress",
        method="POST",
        route="/task/{taskId}/runs/{runId}/progress",
        input="report-progress-request",
        output="run-progress-response",
        title="Report Run Progress",
        description="Keep how far the running run is (`fraction`, 0 to 1) and what it is "
        "doing (`message`), replacing its last report; `task/<taskId>/progress` reads them. "
        "A conflict means the run is not running.",
        scopes="queue:resolve-task:<taskId>/<runId>",
    ),
)
"""The queue's methods a worker calls on one run."""


class ClaimHandlers(Handlers):
    """A worker's calls on one run, through the claim policy."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.service = services.tasks
        self.claims = services.claims
        self.dispatch = services.dispatch
        self.tracer = services.tracer

    async def pollTaskUrls(self, request: web.Request, body: Any) -> Body:
        task_queue = task_queue_of(request.match_info)
        urls = await self.dispatch.poll_urls(task_queue)
        return {
            "queues": [
                {
                    "signedPollUrl": q.signed_poll_url,
                    "signedDeleteUrl": q.signed_delete_url,
                    "signedReleaseUrl": q.signed_release_url,
                }
                for q in urls.queues
            ],
            "expires": to_iso(urls.expires),
        }

    async def claimTask(self, request: web.Request, body: Any) -> Body:
        started = tracing.started_ns(self.tracer)
        task_id, run_id = task_id_of(request), run_id_of(request)
        record = await self.service.get(task_id)
        await self.authorize(
            request,
            provisionerId=record.provisioner_id,
            workerType=record.worker_type,
            workerGroup=body["workerGroup"],
            workerId=body["workerId"],
        )
        claimed = await self.claims.claim_task(
            task_id,
            run_id,
            worker_group=body["workerGroup"],
            worker_id=body["workerId"],
            read=record,
        )
        traceparent = tracing.claim_traceparent(self.tracer, claimed, started)
        return claim_body(self.auth, claimed, traceparent)

    async def claimWork(self, request: web.Request, body: Any) -> Body:
        started = tracing.started_ns(self.tracer)
        task_queue = task_queue_of(request.match_info)
        await self.authorize(request, workerGroup=body["workerGroup"], workerId=body["workerId"])
        claimed = await self.claims.claim_work(
            task_queue,
            worker_group=body["workerGroup"],
            worker_id=body["workerId"],
            count=int(body["tasks"]),
            weights=None if "weights" not in body else ClaimWeights.parse(body["weights"]),
            disconnected=lambda: request.transport is None or request.transport.is_closing(),
        )
        return {
            "tasks": [
                claim_body(
                    self.auth, record, tracing.claim_traceparent(self.tracer, record, started)
                )
                for record in claimed
            ]
        }

    async def reclaimTask(self, request: web.Request, body: Any) -> Body:
        task_id, run_id = task_id_of(request), run_id_of(request)
        record = await self.claims.reclaim(task_id, run_id)
        return held_run(self.auth, record, run_id)

    async def _report(
        self, request: web.Request, resolution: str, reason: str, body: Body | None = None
    ) -> Body:
        started = tracing.started_ns(self.tracer)
        task_id, run_id = task_id_of(request), run_id_of(request)
        record = await self.service.report(
            task_id,
            run_id,
            resolution=resolution,
            reason=reason,
            retry_after_ms=retry_after_ms(body or {}),
        )
        tracing.report_span(
            self.tracer, REPORTS[resolution], record, run_id, started, request=request
        )
        return status_body(record)

    async def reportCompleted(self, request: web.Request, body: Any) -> Body:
        return await self._report(request, "completed", "completed")

    async def reportFailed(self, request: web.Request, body: Any) -> Body:
        return await self._report(request, "failed", "failed")

    async def reportException(self, request: web.Request, body: Any) -> Body:
        return await self._report(request, "exception", body["reason"], body)

    async def reportProgress(self, request: web.Request, body: Any) -> Body:
        progress = await self.service.report_progress(
            task_id_of(request),
            run_id_of(request),
            fraction=body["fraction"],
            message=body.get("message"),
        )
        return progress_body(progress)

    # One request and one store round trip for what one Azure get hinted at, and for the
    # reclaims and reports a worker coalesced. Scopes that depend on a stored task (its
    # queue, who holds the run) are checked per item as the transition reads the task, so a
    # refusal is that item's 403 and never the batch's.


ROUTES = Routes(CLAIM_ENDPOINTS, ClaimHandlers)
