"""The batches of runs (not Taskcluster methods): claimRuns, reclaimRuns and resolveRuns, and
watchRuns, the long poll that tells a worker its running runs were cancelled.

One request and one store round trip for what one Azure get hinted at, and for the reclaims
and reports a worker coalesced. Scopes that depend on a stored task (its queue, who holds the
run) are checked per item as the transition reads the task, so a refusal is that item's 403
and never the batch's.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from coordinator.api import tracing
from coordinator.api.auth import Auth, require
from coordinator.api.claims import REPORTS, claim_body, held_run, retry_after_ms
from coordinator.api.endpoints import (
    WORKER_ID,
    Endpoint,
    run_or_holder,
)
from coordinator.api.errors import (
    InputValidationError,
    InsufficientScopes,
    as_api_error,
)
from coordinator.api.pipeline import (
    SCOPE_CHECK,
    ApiServices,
    Body,
    Handlers,
    Routes,
    declared,
    declared_template,
)
from coordinator.domain.artifacts import MAX_INLINE_BYTES, InlineArtifact
from coordinator.domain.errors import DomainError, Forbidden
from coordinator.domain.records import TaskRecord
from coordinator.domain.scopes import Expression, held_scopes
from coordinator.domain.task_queues import MAX_BATCH_RUNS
from coordinator.service.tasks import Permit, RunReport

log = logging.getLogger(__name__)


def _distinct_runs(items: list[Body], key: str) -> list[tuple[str, int]]:
    """The ``(taskId, runId)`` of a batch's items.

    :raises InputValidationError: a run appears twice (its two answers could contradict).
    """
    runs: list[tuple[str, int]] = []
    first: dict[tuple[str, int], int] = {}
    for index, item in enumerate(items):
        run = (item["taskId"], item["runId"])
        if run in first:
            raise InputValidationError(
                f"{key}[{index}]: run {run[1]} of task {run[0]} is already {key}[{first[run]}]; "
                "name each run once per batch"
            )
        first[run] = index
        runs.append(run)
    return runs


def _inline_artifacts(items: list[Body], report: int) -> tuple[InlineArtifact, ...]:
    """A report's ``artifacts`` (valid against the schema), their bytes decoded.

    :raises InputValidationError: bytes that are not base64 or decode past the limit, or a
        name given twice.
    """
    artifacts: list[InlineArtifact] = []
    for index, item in enumerate(items):
        where = f"reports[{report}].artifacts[{index}]"
        try:
            content = base64.b64decode(item["content"], validate=True)
        except binascii.Error as error:
            raise InputValidationError(f"{where}.content is not base64: {error}") from None
        if len(content) > MAX_INLINE_BYTES:
            raise InputValidationError(
                f"{where}.content is {len(content)} bytes, past the {MAX_INLINE_BYTES} a report "
                "may carry: upload it with createArtifact"
            )
        if any(a.name == item["name"] for a in artifacts):
            raise InputValidationError(f"{where}.name {item['name']!r} is given twice")
        encoding = item.get("contentEncoding", "identity")
        artifacts.append(
            InlineArtifact(
                name=item["name"],
                content_type=item["contentType"],
                content_encoding=None if encoding == "identity" else encoding,
                content=content,
            )
        )
    return tuple(artifacts)


def _permit(auth: Auth, expression: Expression) -> None:
    """:raises Forbidden: ``auth`` does not satisfy ``expression``, with the message a single
    call's 403 would carry (clients read the missing scopes from it)."""
    try:
        require(auth, expression)
    except InsufficientScopes as error:
        raise Forbidden(str(error)) from None


def _run_check(auth: Auth, endpoint: Endpoint) -> Callable[[Mapping[str, object]], None]:
    """The check of ``endpoint``'s ``run_scopes`` for one run's parameters, as :func:`_permit`
    would make it of their expansion: decided on the template (a run's parameters are its
    own, so an expansion is never reused), and expanded only to word a refusal."""
    held = held_scopes(auth.scopes)
    template = declared_template(endpoint, run=True)

    def check(params: Mapping[str, object]) -> None:
        if not held.satisfy_template(template, params):
            _permit(auth, declared(endpoint, params, run=True))

    return check


def _held_or(auth: Auth, endpoint: Endpoint) -> Permit:
    """reclaimRuns', resolveRuns' and watchRuns' per-run check of the endpoint's
    ``run_scopes``, with the worker holding the run (``held``) when it has one."""
    check = _run_check(auth, endpoint)

    def permit(record: TaskRecord, run_id: int) -> None:
        params: dict[str, object] = {"taskId": record.task_id, "runId": str(run_id), "held": False}
        if 0 <= run_id < len(record.runs):
            run = record.runs[run_id]
            if run.worker_group is not None and run.worker_id is not None:
                params.update(held=True, workerGroup=run.worker_group, workerId=run.worker_id)
        check(params)

    return permit


def _run_error(method: str, task_id: str, run_id: int, error: DomainError) -> Body:
    """A batch's answer for a run it refused, as the single call would have answered."""
    api_error = as_api_error(error)
    log.info(
        "run refused method=%s taskId=%s runId=%d status=%d code=%s",
        method,
        task_id,
        run_id,
        api_error.status,
        api_error.code,
    )
    error_body: Body = {
        "status": api_error.status,
        "code": api_error.code,
        "message": str(api_error),
    }
    if api_error.retry_after is not None:
        error_body["retryAfter"] = api_error.retry_after
    return {"taskId": task_id, "runId": run_id, "error": error_body}


_DUPLICATE = (
    "A run named twice in one batch is a 400 for the whole batch (its two answers could "
    "contradict)."
)

RUN_BATCH_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        name="claimRuns",
        method="POST",
        route="/claim-runs",
        input="claim-runs-request",
        output="claim-runs-response",
        built_output=True,
        title="Claim Many Runs",
        description=f"Claim 1 to {MAX_BATCH_RUNS} pending runs (the hints of one Azure get) "
        "for one worker in one request and one store round trip. Needs "
        "`queue:worker-id:<workerGroup>/<workerId>` "
        "(401/403 for the whole batch otherwise) and, per run, the claimTask scope of its task "
        "queue. Results come back in request order: the claim as claimTask answers it, or "
        "`{taskId, runId, error: {status, code, message}}` with what claimTask would have "
        "answered; one run refused never fails the others. " + _DUPLICATE + " Not a Taskcluster "
        "method.",
        stability="experimental",
        scopes=WORKER_ID,
        run_scopes="queue:claim-task:<taskQueueId>",
    ),
    Endpoint(
        name="reclaimRuns",
        method="POST",
        route="/reclaim-runs",
        input="reclaim-runs-request",
        output="reclaim-runs-response",
        title="Reclaim Many Runs",
        description=f"reclaimTask for 1 to {MAX_BATCH_RUNS} running runs at once. Per run the "
        "caller needs `queue:reclaim-task:<taskId>/<runId>` or "
        "`queue:worker-id:<workerGroup>/<workerId>` of the worker holding the run (a worker "
        "batches with its own credentials). Per-run "
        "results in request order, as claimRuns. " + _DUPLICATE + " Not a Taskcluster method.",
        stability="experimental",
        run_scopes=run_or_holder("queue:reclaim-task"),
    ),
    Endpoint(
        name="resolveRuns",
        method="POST",
        route="/resolve-runs",
        input="resolve-runs-request",
        output="resolve-runs-response",
        built_output=True,
        title="Resolve Many Runs",
        description="reportCompleted, reportFailed and reportException for 1 to "
        f"{MAX_BATCH_RUNS} running "
        "runs at once (`resolution`, and `reason` exactly for `exception`). Per run the caller "
        "needs `queue:resolve-task:<taskId>/<runId>` or the worker-id scope of the worker "
        "holding the run. A report may carry up to 4 small artifacts of its run (`artifacts`, "
        "64 KiB each, base64: a worker's run log), stored in the transaction that resolves "
        "the run, instead of a createArtifact and an upload each; they need what the report "
        "needs. Per-run results in request order, as claimRuns. " + _DUPLICATE + " Not "
        "a Taskcluster method.",
        stability="experimental",
        run_scopes=run_or_holder("queue:resolve-task"),
    ),
    Endpoint(
        name="watchRuns",
        method="POST",
        route="/runs/watch",
        input="watch-runs-request",
        output="watch-runs-response",
        title="Watch Running Runs",
        description=f"Long-poll for 1 to {MAX_BATCH_RUNS} running runs: answers as soon as "
        "any of them is no longer running (cancelTask, cancelTaskGroup, cancelTasks, its "
        "claim expired, resolved by anyone) with those runs, `{taskId, runId, state, "
        "reasonResolved}`, or `{runs: []}` when all still run at the end of the wait (about "
        "20 s, the claimWork long poll's `COORDINATOR_CLAIM_WORK_TIMEOUT`). A worker keeps "
        "one in flight for the runs it is running, to stop a cancelled run's handler within "
        "moments instead of at its next reclaim. Per run the caller needs what reclaimRuns "
        "needs (`queue:reclaim-task:<taskId>/<runId>` or the worker-id scope of the worker "
        "holding the run); a run refused, or of a task that does not exist, comes back at "
        "once as a run error. " + _DUPLICATE + " Not a Taskcluster method.",
        stability="experimental",
        run_scopes=run_or_holder("queue:reclaim-task"),
    ),
)
"""claimRuns, reclaimRuns, resolveRuns and watchRuns."""


class RunBatchHandlers(Handlers):
    """The batch calls on runs, each run answered on its own."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.service = services.tasks
        self.claims = services.claims
        self.tracer = services.tracer

    async def claimRuns(self, request: web.Request, body: Any) -> Body:
        started = tracing.started_ns(self.tracer)
        worker_group, worker_id = body["workerGroup"], body["workerId"]
        auth = await self.auth.authenticated(request)
        await self.authorize(request, workerGroup=worker_group, workerId=worker_id)
        runs = _distinct_runs(body["runs"], "runs")
        check = _run_check(auth, request[SCOPE_CHECK].endpoint)

        def permit(record: TaskRecord, run_id: int) -> None:
            check({"taskQueueId": record.task_queue_id})

        results = await self.claims.claim_runs(
            runs, worker_group=worker_group, worker_id=worker_id, permit=permit
        )
        return {
            "claims": self._held_items("claimRuns", runs, results, claimed=True, started=started)
        }

    async def reclaimRuns(self, request: web.Request, body: Any) -> Body:
        auth = await self.auth.authenticated(request)
        runs = _distinct_runs(body["runs"], "runs")
        results = await self.claims.reclaim_runs(
            runs, permit=_held_or(auth, request[SCOPE_CHECK].endpoint)
        )
        return {"reclaims": self._held_items("reclaimRuns", runs, results, claimed=False)}

    def _held_items(
        self,
        method: str,
        runs: list[tuple[str, int]],
        results: list[TaskRecord | DomainError],
        *,
        claimed: bool,
        started: int | None = None,
    ) -> list[Body]:
        """Per run of a claimRuns (``claimed``, the request begun at ``started``) or
        reclaimRuns: the body its single call answers, or its run error."""
        items: list[Body] = []
        for (task_id, run_id), result in zip(runs, results, strict=True):
            if isinstance(result, DomainError):
                items.append(_run_error(method, task_id, run_id, result))
                continue
            items.append(
                claim_body(
                    self.auth, result, tracing.claim_traceparent(self.tracer, result, started)
                )
                if claimed
                else held_run(self.auth, result, run_id)
            )
        return items

    async def resolveRuns(self, request: web.Request, body: Any) -> Body:
        started = tracing.started_ns(self.tracer)
        auth = await self.auth.authenticated(request)
        items: list[Body] = body["reports"]
        runs = _distinct_runs(items, "reports")
        reports = [
            RunReport(
                task_id=task_id,
                run_id=run_id,
                resolution=item["resolution"],
                reason=item.get("reason") or item["resolution"],
                retry_after_ms=retry_after_ms(item),
                artifacts=_inline_artifacts(item.get("artifacts", ()), index),
            )
            for index, ((task_id, run_id), item) in enumerate(zip(runs, items, strict=True))
        ]
        results = await self.service.resolve_runs(
            reports, permit=_held_or(auth, request[SCOPE_CHECK].endpoint)
        )
        if self.tracer is not None:
            for report, result in zip(reports, results, strict=True):
                if not isinstance(result, DomainError):
                    name = REPORTS[report.resolution]
                    tracing.report_span(
                        self.tracer, name, result, report.run_id, started, request=None
                    )
        return {
            "reports": [
                _run_error("resolveRuns", task_id, run_id, result)
                if isinstance(result, DomainError)
                else {"taskId": task_id, "runId": run_id, "status": result.status()}
                for (task_id, run_id), result in zip(runs, results, strict=True)
            ]
        }

    async def watchRuns(self, request: web.Request, body: Any) -> Body:
        auth = await self.auth.authenticated(request)
        runs = _distinct_runs(body["runs"], "runs")
        answered = await self.claims.watch_runs(
            runs,
            permit=_held_or(auth, request[SCOPE_CHECK].endpoint),
            disconnected=lambda: request.transport is None or request.transport.is_closing(),
        )
        items: list[Body] = []
        for task_id, run_id, result in answered:
            if isinstance(result, DomainError):
                items.append(_run_error("watchRuns", task_id, run_id, result))
                continue
            item: Body = {"taskId": task_id, "runId": run_id, "state": result.state}
            if result.reason_resolved is not None:
                item["reasonResolved"] = result.reason_resolved
            items.append(item)
        return {"runs": items}

    # Reads need no credentials, as every read of this API; declareWorker and
    # quarantineWorker require Taskcluster's scopes.


ROUTES = Routes(RUN_BATCH_ENDPOINTS, RunBatchHandlers)
