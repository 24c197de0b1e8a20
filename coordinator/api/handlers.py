"""The queue v1 endpoints: one method per Taskcluster API method, bound by name to the routes of
:mod:`coordinator.api.endpoints`.

A handler calls the task service (or the queue layer) and returns the response body;
:func:`route_handler` does the work around it: the JSON and schema checks of every parameter,
request and response body against ``schemas/``, and the endpoint's declared scopes
(:attr:`~coordinator.api.endpoints.Endpoint.scopes`), which it checks itself when the path
supplies their parameters and otherwise leaves for the handler to complete with what only it
knows (:meth:`Handlers.authorize`), making sure it did.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from coordinator.api import keyset, management, validation
from coordinator.api.artifacts import ArtifactHandlers, ArtifactUrls
from coordinator.api.auth import Auth, Authorizer, RequestAuth, require
from coordinator.api.endpoints import Endpoint, Parameter, task_queue_of, url_parameters
from coordinator.api.errors import (
    InputValidationError,
    InsufficientScopes,
    ServiceUnavailable,
    as_api_error,
)
from coordinator.api.filters import task_filter
from coordinator.api.hooks import HookHandlers
from coordinator.api.http import ENDPOINT, json_response, read_json
from coordinator.api.scopes import Expression, create_task_params, expand, held_scopes
from coordinator.domain.errors import DomainError, Forbidden
from coordinator.domain.listings import Page, RunCounts
from coordinator.domain.queue_controls import Limits
from coordinator.domain.records import TaskRecord, from_iso, to_iso
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import WorkerKey, task_queue_fields
from coordinator.service.artifacts import ArtifactService
from coordinator.service.dispatch import WorkDispatch
from coordinator.service.hooks import HookService
from coordinator.service.management import TaskManagement
from coordinator.service.queue_controls import QueueControlService
from coordinator.service.tasks import Permit, RunReport, TaskService
from coordinator.service.workers import WorkerService
from coordinator.store.errors import StoreUnavailable

log = logging.getLogger(__name__)

Body = dict[str, Any]
Method = Callable[[web.Request, Any], Awaitable[Body | web.StreamResponse]]


def _task_id(request: web.Request, name: str = "taskId") -> str:
    return request.match_info[name]


def _run_id(request: web.Request) -> int:
    return int(request.match_info["runId"])


def _continuation(request: web.Request) -> str | None:
    """The task id the request's continuationToken names (listings keyed by task id)."""
    key = keyset.after(request, (str,))
    return None if key is None else str(key[0])


def _page_body(request: web.Request, page: Page[TaskRecord, str], key: str, value: str) -> Body:
    body: Body = {
        key: value,
        "tasks": [{"status": r.status(), "task": dict(r.definition)} for r in page.items],
    }
    if page.next_after is not None:
        body["continuationToken"] = keyset.token(request, (page.next_after,))
    return body


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


def declared(endpoint: Endpoint, params: Mapping[str, object], *, run: bool = False) -> Expression:
    """The expression ``endpoint``'s :attr:`~Endpoint.scopes` (``run``: its
    :attr:`~Endpoint.run_scopes`) declare for ``params``; the same object for the same
    parameters while they are cached (never mutate it).
    """
    try:
        return _declared(endpoint, run, frozenset(params.items()))
    except TypeError:  # a list or an object among them (createTasks' tasks): not cached
        return expand(_template(endpoint, run), params)


@functools.lru_cache(maxsize=1024)
def _declared(endpoint: Endpoint, run: bool, params: frozenset[tuple[str, Any]]) -> Expression:
    return expand(_template(endpoint, run), dict(params))


def _template(endpoint: Endpoint, run: bool) -> Any:
    template = endpoint.run_scopes if run else endpoint.scopes
    if template is None:
        raise ValueError(f"{endpoint.operation_id} declares no {'run_' if run else ''}scopes")
    return template


@dataclass(kw_only=True, slots=True)
class ScopeCheck:
    """The declared scopes of one request: its endpoint, the parameters its path supplies, and
    whether the scopes were checked (:meth:`Handlers.authorize`)."""

    endpoint: Endpoint
    url: dict[str, str]
    checked: bool = False


SCOPE_CHECK = web.RequestKey[ScopeCheck]("scope_check")


def _item_error(error: InputValidationError | DomainError) -> Body:
    """A batch item's error, as createTask would have answered it."""
    api_error = error if isinstance(error, InputValidationError) else as_api_error(error)
    return {"code": api_error.code, "message": str(api_error)}


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
    template = _template(endpoint, run=True)

    def check(params: Mapping[str, object]) -> None:
        if not held.satisfy_template(template, params):
            _permit(auth, declared(endpoint, params, run=True))

    return check


def _held_or(auth: Auth, endpoint: Endpoint) -> Permit:
    """reclaimRuns' and resolveRuns' per-run check of the endpoint's ``run_scopes``, with the
    worker holding the run (``held``) when it has one."""
    check = _run_check(auth, endpoint)

    def permit(record: TaskRecord, run_id: int) -> None:
        params: dict[str, object] = {"taskId": record.task_id, "runId": str(run_id), "held": False}
        if 0 <= run_id < len(record.runs):
            run = record.runs[run_id]
            if run.worker_group is not None and run.worker_id is not None:
                params.update(held=True, workerGroup=run.worker_group, workerId=run.worker_id)
        check(params)

    return permit


def _retry_after_ms(report: Body) -> int | None:
    """A report's ``retryAfter`` (seconds; the schema bounds it) in milliseconds."""
    seconds = report.get("retryAfter")
    return None if seconds is None else round(seconds * 1000)


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


VERSION: Body = {
    "source": os.environ.get("COORDINATOR_SOURCE", "queue-coordinator"),
    "version": importlib.metadata.version("queue-coordinator"),
    "commit": os.environ.get("COORDINATOR_COMMIT", "unknown"),
    "build": os.environ.get("COORDINATOR_BUILD", "unknown"),
}
"""``__version__``: the installed distribution; a deployment may name its source, commit and
build (``COORDINATOR_SOURCE``, ``COORDINATOR_COMMIT``, ``COORDINATOR_BUILD``)."""


def _status(record: TaskRecord) -> Body:
    return {"status": record.status()}


class Handlers(ArtifactHandlers, HookHandlers):
    """The endpoint methods, sharing the services and the authorizer (the artifact methods
    are in :class:`~coordinator.api.artifacts.ArtifactHandlers`, the hooks service's in
    :class:`~coordinator.api.hooks.HookHandlers`)."""

    def __init__(
        self,
        *,
        service: TaskService,
        management: TaskManagement,
        dispatch: WorkDispatch,
        workers: WorkerService,
        controls: QueueControlService,
        artifacts: ArtifactService,
        artifact_urls: ArtifactUrls,
        hooks: HookService,
        authorizer: Authorizer,
    ) -> None:
        self.service = service
        self.management = management
        self.dispatch = dispatch
        self.workers = workers
        self.controls = controls
        self.artifacts = artifacts
        self.artifact_urls = artifact_urls
        self.hooks = hooks
        self.auth = authorizer
        self.started = time.monotonic()

    async def authorize(self, request: web.Request, **params: object) -> RequestAuth:
        """Check the scopes the request's endpoint declares, filled in with the path's
        parameters and ``params`` (what only the handler knows): the one place a request's
        scopes are checked. Returns the caller.

        :raises AuthenticationFailed: 401, the credentials are missing or invalid.
        :raises InsufficientScopes: 403, naming what the caller lacks.
        """
        check = request[SCOPE_CHECK]
        auth = await self.auth.require(request, declared(check.endpoint, {**check.url, **params}))
        check.checked = True
        return auth

    async def _stored_task(self, request: web.Request) -> TaskRecord:
        """The task of the path, once the caller holds the scopes to act on it (its own
        scope, or its project's: scheduleTask, rerunTask, cancelTask)."""
        record = await self.service.get(_task_id(request))
        await self.authorize(
            request,
            schedulerId=record.scheduler_id,
            taskGroupId=record.task_group_id,
            projectId=record.project_id,
        )
        return record

    # --- reads ----------------------------------------------------------------------------

    async def ping(self, request: web.Request, body: Any) -> Body:
        return {"alive": True, "uptime": time.monotonic() - self.started}

    async def task(self, request: web.Request, body: Any) -> Body:
        return dict((await self.service.get(_task_id(request))).definition)

    async def status(self, request: web.Request, body: Any) -> Body:
        return _status(await self.service.get(_task_id(request)))

    async def listTaskGroup(self, request: web.Request, body: Any) -> Body:
        limit, after = keyset.limit(request), _continuation(request)
        group = await self.service.get_task_group(_task_id(request, "taskGroupId"))
        page = await self.service.task_group(group.task_group_id, limit=limit, after=after)
        return {**group.to_api(), **_page_body(request, page, "taskGroupId", group.task_group_id)}

    async def tasks(self, request: web.Request, body: Any) -> Body:
        found = await self._existing(body["taskIds"])
        return {"tasks": [{"taskId": r.task_id, "task": dict(r.definition)} for r in found]}

    async def statuses(self, request: web.Request, body: Any) -> Body:
        found = await self._existing(body["taskIds"])
        return {"statuses": [{"taskId": r.task_id, "status": r.status()} for r in found]}

    async def _existing(self, task_ids: list[str]) -> list[TaskRecord]:
        """The tasks that exist among ``task_ids``, in their order, each once."""
        found = await self.service.get_many(task_ids)
        return [found[task_id] for task_id in dict.fromkeys(task_ids) if task_id in found]

    async def heartbeat(self, request: web.Request, body: Any) -> Body:
        try:
            await self.service.check_store()
        except StoreUnavailable:
            raise  # error_middleware: 503 naming the store, with Retry-After
        except Exception as error:  # whatever else the driver raises, the check fails too
            raise ServiceUnavailable(f"the store does not answer: {error!r}") from error
        return {}

    async def lbheartbeat(self, request: web.Request, body: Any) -> Body:
        return {}

    async def version(self, request: web.Request, body: Any) -> Body:
        return VERSION

    async def listDependentTasks(self, request: web.Request, body: Any) -> Body:
        task_id = _task_id(request)
        page = await self.service.dependents(
            task_id, limit=keyset.limit(request), after=_continuation(request)
        )
        return _page_body(request, page, "taskId", task_id)

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

    # --- producers ------------------------------------------------------------------------

    async def createTask(self, request: web.Request, body: Any) -> Body:
        task_id = _task_id(request)
        await self.authorize(request, **create_task_params(body))
        record = await self.service.create_task(task_id, body)
        self.workers.task_created(record)
        return _status(record)

    async def createTasks(self, request: web.Request, body: Any) -> Body:
        items: list[Body] = body["tasks"]
        results: list[Body] = [{"taskId": item["taskId"]} for item in items]
        accepted: list[int] = []
        requirements: dict[frozenset[tuple[str, Hashable]], dict[str, Hashable]] = {}
        for index, item in enumerate(items):
            try:
                validation.validate(
                    "create-task-request", item["task"], where=f"tasks[{index}].task"
                )
                params = create_task_params(item["task"])
            except (InputValidationError, DomainError) as error:
                results[index]["error"] = _item_error(error)
                continue
            requirements.setdefault(frozenset(params.items()), params)  # tasks alike: once
            accepted.append(index)
        await self.authorize(request, tasks=list(requirements.values()))
        outcomes = await self.service.create_tasks(
            [(items[index]["taskId"], items[index]["task"]) for index in accepted]
        )
        for index, outcome in zip(accepted, outcomes, strict=True):
            if isinstance(outcome, DomainError):
                results[index]["error"] = _item_error(outcome)
            else:
                self.workers.task_created(outcome)
                results[index]["status"] = outcome.status()
        return {"tasks": results}

    async def scheduleTask(self, request: web.Request, body: Any) -> Body:
        record = await self._stored_task(request)
        return _status(await self.service.schedule(record))

    async def rerunTask(self, request: web.Request, body: Any) -> Body:
        record = await self._stored_task(request)
        return _status(await self.service.rerun(record))

    async def cancelTask(self, request: web.Request, body: Any) -> Body:
        record = await self._stored_task(request)
        return _status(await self.service.cancel(record))

    async def changeTaskPriority(self, request: web.Request, body: Any) -> Body:
        record = await self.service.get(_task_id(request))
        await self.authorize(request, taskQueueId=record.task_queue_id)
        return _status(await self.service.change_priority(record, body["newPriority"]))

    # --- task groups ----------------------------------------------------------------------

    async def getTaskGroup(self, request: web.Request, body: Any) -> Body:
        group = await self.service.get_task_group(_task_id(request, "taskGroupId"))
        return group.to_api()

    async def sealTaskGroup(self, request: web.Request, body: Any) -> Body:
        group = await self.service.get_task_group(_task_id(request, "taskGroupId"))
        await self.authorize(request, schedulerId=group.scheduler_id)
        return (await self.service.seal_task_group(group.task_group_id)).to_api()

    async def cancelTaskGroup(self, request: web.Request, body: Any) -> Body:
        group = await self.service.get_task_group(_task_id(request, "taskGroupId"))
        if group.sealed is not None:
            # Taskcluster refuses an unsealed group before it checks scopes; so do we
            await self.authorize(request, schedulerId=group.scheduler_id)
        cancelled = await self.service.cancel_task_group(group)
        return {
            "taskGroupId": group.task_group_id,
            "taskGroupSize": await self.service.task_group_size(group.task_group_id),
            "cancelledCount": len(cancelled),
            "taskIds": cancelled,
        }

    async def changeTaskGroupPriority(self, request: web.Request, body: Any) -> Body:
        group = await self.service.get_task_group(_task_id(request, "taskGroupId"))
        await self.authorize(request, schedulerId=group.scheduler_id)
        changed = await self.service.change_task_group_priority(group, body["newPriority"])
        return {
            "taskGroupId": group.task_group_id,
            "schedulerId": group.scheduler_id,
            "newPriority": body["newPriority"],
            "tasksAffected": len(changed),
            "taskIds": changed,
        }

    # --- workers --------------------------------------------------------------------------

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

    def _held_run(self, record: TaskRecord, run_id: int, **extra: Any) -> Body:
        """What claims and reclaims answer about the run a worker holds, with the run's
        temporary credentials last."""
        run = record.runs[run_id]
        assert run.taken_until is not None
        return {
            "status": record.status(),
            "runId": run.run_id,
            "workerGroup": run.worker_group,
            "workerId": run.worker_id,
            "takenUntil": to_iso(run.taken_until),
            **extra,
            "credentials": self.auth.run_credentials(record, run),
        }

    def claim_body(self, record: TaskRecord) -> Body:
        """A claim as claimTask and claimWork return it."""
        return self._held_run(record, -1, task=dict(record.definition))

    async def claimTask(self, request: web.Request, body: Any) -> Body:
        task_id, run_id = _task_id(request), _run_id(request)
        record = await self.service.get(task_id)
        await self.authorize(
            request,
            provisionerId=record.provisioner_id,
            workerType=record.worker_type,
            workerGroup=body["workerGroup"],
            workerId=body["workerId"],
        )
        self.workers.refuse_quarantined(
            WorkerKey(
                task_queue=TaskQueue(record.provisioner_id, record.worker_type),
                worker_group=body["workerGroup"],
                worker_id=body["workerId"],
            )
        )
        claimed = await self.controls.claim_task(
            task_id,
            run_id,
            worker_group=body["workerGroup"],
            worker_id=body["workerId"],
            read=record,
        )
        self.workers.run_held(claimed, run_id, claimed=True)
        return self.claim_body(claimed)

    async def claimWork(self, request: web.Request, body: Any) -> Body:
        task_queue = task_queue_of(request.match_info)
        await self.authorize(request, workerGroup=body["workerGroup"], workerId=body["workerId"])
        claimed = await self.dispatch.claim_work(
            task_queue,
            worker_group=body["workerGroup"],
            worker_id=body["workerId"],
            count=int(body["tasks"]),
            disconnected=lambda: request.transport is None or request.transport.is_closing(),
        )
        return {"tasks": [self.claim_body(record) for record in claimed]}

    async def reclaimTask(self, request: web.Request, body: Any) -> Body:
        task_id, run_id = _task_id(request), _run_id(request)
        record = await self.service.reclaim(task_id, run_id)
        self.workers.run_held(record, run_id, claimed=False)
        return self._held_run(record, run_id)

    async def _report(
        self, request: web.Request, resolution: str, reason: str, body: Body | None = None
    ) -> Body:
        task_id, run_id = _task_id(request), _run_id(request)
        record = await self.service.report(
            task_id,
            run_id,
            resolution=resolution,
            reason=reason,
            retry_after_ms=_retry_after_ms(body or {}),
        )
        return _status(record)

    async def reportCompleted(self, request: web.Request, body: Any) -> Body:
        return await self._report(request, "completed", "completed")

    async def reportFailed(self, request: web.Request, body: Any) -> Body:
        return await self._report(request, "failed", "failed")

    async def reportException(self, request: web.Request, body: Any) -> Body:
        return await self._report(request, "exception", body["reason"], body)

    # --- batches of runs (not Taskcluster methods) ----------------------------------------
    # One request and one store round trip for what one Azure get hinted at, and for the
    # reclaims and reports a worker coalesced. Scopes that depend on a stored task (its
    # queue, who holds the run) are checked per item as the transition reads the task, so a
    # refusal is that item's 403 and never the batch's.

    async def claimRuns(self, request: web.Request, body: Any) -> Body:
        worker_group, worker_id = body["workerGroup"], body["workerId"]
        auth = await self.auth.authenticated(request)
        await self.authorize(request, workerGroup=worker_group, workerId=worker_id)
        runs = _distinct_runs(body["runs"], "runs")
        check = _run_check(auth, request[SCOPE_CHECK].endpoint)

        def permit(record: TaskRecord, run_id: int) -> None:
            check({"taskQueueId": record.task_queue_id})
            self.workers.refuse_quarantined(
                WorkerKey(
                    task_queue=TaskQueue(record.provisioner_id, record.worker_type),
                    worker_group=worker_group,
                    worker_id=worker_id,
                )
            )

        results = await self.controls.claim_runs(
            runs, worker_group=worker_group, worker_id=worker_id, permit=permit
        )
        return {"claims": self._held_items("claimRuns", runs, results, claimed=True)}

    async def reclaimRuns(self, request: web.Request, body: Any) -> Body:
        auth = await self.auth.authenticated(request)
        runs = _distinct_runs(body["runs"], "runs")
        results = await self.service.reclaim_runs(
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
    ) -> list[Body]:
        """Per run of a claimRuns (``claimed``) or reclaimRuns: the body its single call
        answers, the worker seen holding it; or its run error."""
        items: list[Body] = []
        for (task_id, run_id), result in zip(runs, results, strict=True):
            if isinstance(result, DomainError):
                items.append(_run_error(method, task_id, run_id, result))
                continue
            self.workers.run_held(result, run_id, claimed=claimed)
            items.append(self.claim_body(result) if claimed else self._held_run(result, run_id))
        return items

    async def resolveRuns(self, request: web.Request, body: Any) -> Body:
        auth = await self.auth.authenticated(request)
        items: list[Body] = body["reports"]
        runs = _distinct_runs(items, "reports")
        reports = [
            RunReport(
                task_id=task_id,
                run_id=run_id,
                resolution=item["resolution"],
                reason=item.get("reason") or item["resolution"],
                retry_after_ms=_retry_after_ms(item),
            )
            for (task_id, run_id), item in zip(runs, items, strict=True)
        ]
        results = await self.service.resolve_runs(
            reports, permit=_held_or(auth, request[SCOPE_CHECK].endpoint)
        )
        return {
            "reports": [
                _run_error("resolveRuns", task_id, run_id, result)
                if isinstance(result, DomainError)
                else {"taskId": task_id, "runId": run_id, "status": result.status()}
                for (task_id, run_id), result in zip(runs, results, strict=True)
            ]
        }

    # --- task queues and workers ----------------------------------------------------------
    # Reads need no credentials, as every read of this API; declareWorker and
    # quarantineWorker require Taskcluster's scopes.

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
            max_running=body.get("maxRunning"),
            max_claims_per_second=body.get("maxClaimsPerSecond"),
        )
        task_queue = task_queue_of(request.match_info)
        controls = await self.controls.set_limits(task_queue, limits, named=frozenset(body))
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
        return {
            "taskQueueCounts": [
                _counts_body(task_queue, found)
                for task_queue, found in zip(task_queues, counts, strict=True)
            ]
        }

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
        assert isinstance(auth, Auth)  # the dispatch required a scope, so the caller is a client
        quarantined = await self.workers.quarantine(
            worker,
            until=from_iso(body["quarantineUntil"]),
            info=body.get("quarantineInfo"),
            client_id=auth.client_id,
        )
        return quarantined.to_api()

    # --- the management API ---------------------------------------------------------------

    async def listTasks(self, request: web.Request, body: Any) -> Body | web.StreamResponse:
        return await management.list_tasks(request, self.management, summary=False)

    async def listTaskSummaries(self, request: web.Request, body: Any) -> Body | web.StreamResponse:
        return await management.list_tasks(request, self.management, summary=True)

    async def countTasks(self, request: web.Request, body: Any) -> Body:
        return (await self.management.count_tasks(task_filter(request.query))).to_api()

    async def cancelTasks(self, request: web.Request, body: Any) -> Body:
        matching = task_filter(request.query)
        return {"cancelled": await self.management.cancel_tasks(matching)}

    async def rerunTasks(self, request: web.Request, body: Any) -> Body:
        rerun, matched = await self.management.rerun_tasks(task_filter(request.query))
        return {"rerun": rerun, "matched": matched}

    async def deleteTasks(self, request: web.Request, body: Any) -> Body:
        matching = task_filter(request.query)
        return {"deleted": await self.management.delete_tasks(matching)}


HANDLERS = web.AppKey("handlers", Handlers)


BEWIT = "bewit"
"""The query parameter of a signed URL (``buildSignedUrl``), which every GET accepts."""


def _check_query(
    endpoint: Endpoint, accepted: Mapping[str, Parameter], request: web.Request
) -> None:
    """:raises InputValidationError: a query parameter the endpoint does not take (of
    ``accepted``, its :attr:`~Endpoint.query_parameters`; a GET also takes a bewit), a value
    that does not match its schema, or a repeatable one given more often than it may be."""
    query = request.query
    unknown = sorted(set(query) - set(accepted) - ({BEWIT} if endpoint.method == "GET" else set()))
    if unknown:
        # A silently ignored filter (listTaskGroup?state=failed) looks as if it worked.
        raise InputValidationError(
            f"unknown query parameters {', '.join(unknown)}: {endpoint.name} accepts "
            f"{', '.join(accepted) or 'none'}"
        )
    missing = [name for name, p in accepted.items() if p.required and name not in query]
    if missing:
        raise InputValidationError(
            f"missing query parameters {', '.join(missing)}: {endpoint.name} needs the signed "
            "URL whole, as it was given"
        )
    try:
        validation.validate_params(query, accepted)
    except InputValidationError:
        for name, value in query.items():
            refusal = accepted[name].refusal if name in accepted else None
            mismatch = None if refusal is None else _mismatch(accepted, name, value)
            if refusal is not None and mismatch is not None:
                raise InputValidationError(f"{refusal.format(value=value)} ({mismatch})") from None
        raise
    for parameter in {accepted[key] for key in query if key in accepted}:
        given = len(query.getall(parameter.name))
        if parameter.repeat > 1 and given > parameter.repeat:
            raise InputValidationError(
                f"query parameter {parameter.name} is given {given} times: at most "
                f"{parameter.repeat}"
            )


def _mismatch(parameters: Mapping[str, Parameter], name: str, value: str) -> str | None:
    """How the value of the parameter ``name`` fails its schema, or ``None``."""
    try:
        validation.validate_params({name: value}, parameters)
    except InputValidationError as error:
        return str(error)
    return None


async def _read_body(endpoint: Endpoint, request: web.Request, max_body: int) -> Any:
    """The request's body, valid for the endpoint's input schema.

    :raises InputValidationError: it is missing (an empty object is a body, none is not),
        or it does not match.
    """
    assert endpoint.input is not None
    body = await read_json(request, max_bytes=max_body)
    if body is None:
        try:
            validation.validate(endpoint.input, {})
        except InputValidationError as error:
            raise InputValidationError(f"request body is missing; {error}") from None
        raise InputValidationError(
            f"request body is missing: {endpoint.name} takes a JSON object matching the schema "
            f"{endpoint.input} (send {{}} for none of its properties)"
        )
    validation.validate(endpoint.input, body)
    return body


def route_handler(
    endpoint: Endpoint, *, max_body: int
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The aiohttp handler of an endpoint: check the parameters, parse and validate the body,
    check the declared scopes (or have the handler complete them), call the method of the same
    name on the app's :class:`Handlers`, validate the response.

    :param max_body: the largest request body (bytes) the endpoint accepts.
    """
    accepted = endpoint.query_parameters
    declares_scopes = endpoint.scopes is not None or endpoint.run_scopes is not None
    scopes_from_url = endpoint.scopes_from_url

    async def handle(request: web.Request) -> web.StreamResponse:
        request[ENDPOINT] = endpoint.name
        validation.validate_params(request.match_info)
        _check_query(endpoint, accepted, request)
        body: Any = None
        if endpoint.input is not None:
            body = await _read_body(endpoint, request, max_body)
        handlers = request.app[HANDLERS]
        check: ScopeCheck | None = None
        if declares_scopes:
            check = request[SCOPE_CHECK] = ScopeCheck(
                endpoint=endpoint, url=url_parameters(request.match_info)
            )
            if scopes_from_url:
                await handlers.authorize(request)
        method: Method = getattr(handlers, endpoint.name)
        result = await method(request, body)
        if check is not None and endpoint.scopes is not None and not check.checked:
            raise RuntimeError(f"{endpoint.name} declares scopes its handler never checked")
        if isinstance(result, web.StreamResponse):  # streamed, and so already sent
            return result
        if endpoint.output is not None:
            validation.validate_response(endpoint.output, result)
        return json_response(result)

    return handle
