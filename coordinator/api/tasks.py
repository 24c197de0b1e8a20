"""The queue's task methods: createTask(s), the reads of tasks and their groups, and what a
producer does to a stored task or group (schedule, rerun, cancel, seal, priorities).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from aiohttp import web

from coordinator.api import keyset, tracing, validation
from coordinator.api.claims import progress_body
from coordinator.api.endpoints import (
    PAGED,
    Endpoint,
    task_action,
)
from coordinator.api.errors import (
    InputValidationError,
    as_api_error,
)
from coordinator.api.pipeline import (
    ApiServices,
    Body,
    Handlers,
    Routes,
    status_body,
    task_id_of,
)
from coordinator.domain.errors import DomainError
from coordinator.domain.listings import Page
from coordinator.domain.records import TaskRecord
from coordinator.domain.scopes import CREATE_TASK_SCOPES, create_task_params

log = logging.getLogger(__name__)


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


def _item_error(error: InputValidationError | DomainError) -> Body:
    """A batch item's error, as createTask would have answered it."""
    api_error = error if isinstance(error, InputValidationError) else as_api_error(error)
    return {"code": api_error.code, "message": str(api_error)}


_CREATE_RULES = (
    " Besides the schema, a definition is a 400 when `created` is more than 15 minutes from "
    "the coordinator's clock; `deadline` is not in the future, is before `created` or further "
    "than the coordinator's maximum (5 days unless configured); `expires` is before "
    "`deadline`; `notBefore` is after `deadline`; `provisionerId` or `workerType` contradicts "
    "`taskQueueId`; it depends on itself, or names a dependency, route or scope twice; a "
    "scope ends in `**`; or a dependency does not exist or expires before its deadline."
)

TASK_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        name="createTask",
        method="PUT",
        route="/task/{taskId}",
        input="create-task-request",
        output="task-status-response",
        title="Create New Task",
        description="Define a task. It is scheduled at once unless it has dependencies. "
        "Repeating the call with an identical definition returns the current status; a "
        "different definition under the same taskId is a conflict." + _CREATE_RULES,
        scopes=CREATE_TASK_SCOPES,
    ),
    Endpoint(
        name="createTasks",
        method="PUT",
        route="/tasks",
        input="create-tasks-request",
        output="create-tasks-response",
        built_output=True,
        title="Create Many Tasks",
        description="Define 1 to 1,000 tasks in one request. Each item is validated and is "
        "idempotent exactly as createTask; the new tasks are written in one transaction and "
        "their hints put concurrently. The caller needs every item's createTask scopes (403 "
        "for the whole batch otherwise). Per-item results come back in request order; an item "
        "refused by createTask's rules is that item's error. Not a Taskcluster method.",
        stability="experimental",
        batch=True,
        scopes={"AllOf": [{"for": "task", "in": "tasks", "each": CREATE_TASK_SCOPES}]},
    ),
    Endpoint(
        name="task",
        method="GET",
        route="/task/{taskId}",
        input=None,
        output="task-definition-response",
        title="Get Task Definition",
        description="The task definition, normalised and with every default filled in.",
    ),
    Endpoint(
        name="status",
        method="GET",
        route="/task/{taskId}/status",
        input=None,
        output="task-status-response",
        title="Get Task Status",
        description="The status of the task and its runs.",
    ),
    Endpoint(
        name="taskProgress",
        method="GET",
        route="/task/{taskId}/progress",
        input=None,
        output="task-progress-response",
        title="Get Task Progress",
        description="The last progress report (reportProgress) of each of the task's runs "
        "that sent one.",
    ),
    Endpoint(
        name="scheduleTask",
        method="POST",
        route="/task/{taskId}/schedule",
        input=None,
        output="task-status-response",
        title="Schedule Defined Task",
        description="Give an unscheduled task its first run without waiting for its "
        "dependencies. A no-op for a task that already has runs.",
        scopes=task_action("schedule-task"),
    ),
    Endpoint(
        name="rerunTask",
        method="POST",
        route="/task/{taskId}/rerun",
        input=None,
        output="task-status-response",
        title="Rerun a Resolved Task",
        description="Add a new pending run to a resolved task, restoring its retries.",
        stability="deprecated",
        scopes=task_action("rerun-task"),
    ),
    Endpoint(
        name="cancelTask",
        method="POST",
        route="/task/{taskId}/cancel",
        input=None,
        output="task-status-response",
        title="Cancel Task",
        description="Resolve the task as `exception/canceled`. A no-op for a resolved task.",
        scopes=task_action("cancel-task"),
    ),
    Endpoint(
        name="listTaskGroup",
        method="GET",
        route="/task-group/{taskGroupId}/list",
        input=None,
        output="list-task-group-response",
        title="List Task Group",
        description="One page of the tasks of the task group, with their statuses.",
        query=PAGED,
    ),
    Endpoint(
        name="listDependentTasks",
        method="GET",
        route="/task/{taskId}/dependents",
        input=None,
        output="list-dependent-tasks-response",
        title="List Dependent Tasks",
        description="One page of the tasks that depend on the task, with their statuses.",
        query=PAGED,
    ),
    Endpoint(
        name="tasks",
        method="POST",
        route="/tasks",
        input="tasks-request",
        output="tasks-response",
        title="Get Many Task Definitions",
        description="The definitions of up to 1,000 tasks; unknown taskIds are left out.",
        stability="experimental",
        query=PAGED,
    ),
    Endpoint(
        name="statuses",
        method="POST",
        route="/tasks/status",
        input="tasks-request",
        output="tasks-statuses-response",
        title="Get Many Task Statuses",
        description="The statuses of up to 1,000 tasks; unknown taskIds are left out.",
        stability="experimental",
        query=PAGED,
    ),
    Endpoint(
        name="getTaskGroup",
        method="GET",
        route="/task-group/{taskGroupId}",
        input=None,
        output="task-group-response",
        title="Get Task Group",
        description="The task group: its schedulerId, expiry and whether it is sealed.",
    ),
    Endpoint(
        name="sealTaskGroup",
        method="POST",
        route="/task-group/{taskGroupId}/seal",
        input=None,
        output="task-group-response",
        title="Seal Task Group",
        description="From now on no task may join the group: createTask into it answers 409. "
        "Idempotent; sealing and creating are atomic with each other.",
        stability="experimental",
        scopes="queue:seal-task-group:<schedulerId>/<taskGroupId>",
    ),
    Endpoint(
        name="cancelTaskGroup",
        method="POST",
        route="/task-group/{taskGroupId}/cancel",
        input=None,
        output="cancel-task-group-response",
        title="Cancel Task Group",
        description="Cancel every unresolved task of a sealed group (409 if it is not sealed), "
        "in bounded batches; answers the tasks this call cancelled.",
        stability="experimental",
        scopes="queue:cancel-task-group:<schedulerId>/<taskGroupId>",
    ),
    Endpoint(
        name="changeTaskGroupPriority",
        method="POST",
        route="/task-group/{taskGroupId}/priority",
        input="change-task-priority-request",
        output="task-group-priority-change-response",
        title="Change Task Group Priority",
        description="Give every unresolved task of the group the new priority (see "
        "changeTaskPriority).",
        stability="experimental",
        scopes="queue:change-task-group-priority:<schedulerId>/<taskGroupId>",
    ),
    Endpoint(
        name="changeTaskPriority",
        method="POST",
        route="/task/{taskId}/priority",
        input="change-task-priority-request",
        output="task-status-response",
        title="Change Task Priority",
        description="The task's priority from now on: its definition and scopes show it, and a "
        "pending run's hint is put again on the new priority's queue (the old hint goes stale, "
        "which is harmless). 409 past the deadline or once resolved.",
        stability="experimental",
        scopes={
            "AnyOf": [
                "queue:change-task-priority:<taskId>",
                "queue:change-task-priority-in-queue:<taskQueueId>",
            ]
        },
    ),
)
"""The queue's task and task-group methods."""


class TaskHandlers(Handlers):
    """The task and task-group methods."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.service = services.tasks
        self.creates = services.creates
        self.tracer = services.tracer

    async def _stored_task(self, request: web.Request) -> TaskRecord:
        """The task of the path, once the caller holds the scopes to act on it (its own
        scope, or its project's: scheduleTask, rerunTask, cancelTask)."""
        record = await self.service.get(task_id_of(request))
        await self.authorize(
            request,
            schedulerId=record.scheduler_id,
            taskGroupId=record.task_group_id,
            projectId=record.project_id,
        )
        return record

    async def createTask(self, request: web.Request, body: Any) -> Body:
        task_id = task_id_of(request)
        await self.authorize(request, **create_task_params(body))
        if self.tracer is None:
            return status_body(await self.creates.create_task(task_id, body))
        with tracing.creating(self.tracer, request, "createTask", {"taskId": task_id}) as span:
            record = await self.creates.create_task(
                task_id, body, traceparent=self.tracer.traceparent(span)
            )
            span.set_attribute("taskQueueId", record.task_queue_id)
        return status_body(record)

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
        accepted_items = [(items[index]["taskId"], items[index]["task"]) for index in accepted]
        if self.tracer is None:
            outcomes = await self.creates.create_tasks(accepted_items)
        else:
            attributes = {"tasks": len(accepted_items)}
            with tracing.creating(self.tracer, request, "createTasks", attributes) as span:
                outcomes = await self.creates.create_tasks(
                    accepted_items, traceparent=self.tracer.traceparent(span)
                )
        for index, outcome in zip(accepted, outcomes, strict=True):
            if isinstance(outcome, DomainError):
                results[index]["error"] = _item_error(outcome)
            else:
                results[index]["status"] = outcome.status()
        return {"tasks": results}

    async def task(self, request: web.Request, body: Any) -> Body:
        return dict((await self.service.get(task_id_of(request))).definition)

    async def status(self, request: web.Request, body: Any) -> Body:
        return status_body(await self.service.get(task_id_of(request)))

    async def taskProgress(self, request: web.Request, body: Any) -> Body:
        found = await self.service.progress(task_id_of(request))
        return {"runs": [progress_body(progress) for progress in found]}

    async def scheduleTask(self, request: web.Request, body: Any) -> Body:
        record = await self._stored_task(request)
        return status_body(await self.service.schedule(record))

    async def rerunTask(self, request: web.Request, body: Any) -> Body:
        record = await self._stored_task(request)
        return status_body(await self.service.rerun(record))

    async def cancelTask(self, request: web.Request, body: Any) -> Body:
        record = await self._stored_task(request)
        return status_body(await self.service.cancel(record))

    async def listTaskGroup(self, request: web.Request, body: Any) -> Body:
        limit, after = keyset.limit(request), _continuation(request)
        group = await self.service.get_task_group(task_id_of(request, "taskGroupId"))
        page = await self.service.task_group(group.task_group_id, limit=limit, after=after)
        return {**group.to_api(), **_page_body(request, page, "taskGroupId", group.task_group_id)}

    async def listDependentTasks(self, request: web.Request, body: Any) -> Body:
        task_id = task_id_of(request)
        page = await self.service.dependents(
            task_id, limit=keyset.limit(request), after=_continuation(request)
        )
        return _page_body(request, page, "taskId", task_id)

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

    async def getTaskGroup(self, request: web.Request, body: Any) -> Body:
        group = await self.service.get_task_group(task_id_of(request, "taskGroupId"))
        return group.to_api()

    async def sealTaskGroup(self, request: web.Request, body: Any) -> Body:
        group = await self.service.get_task_group(task_id_of(request, "taskGroupId"))
        await self.authorize(request, schedulerId=group.scheduler_id)
        return (await self.service.seal_task_group(group.task_group_id)).to_api()

    async def cancelTaskGroup(self, request: web.Request, body: Any) -> Body:
        group = await self.service.get_task_group(task_id_of(request, "taskGroupId"))
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
        group = await self.service.get_task_group(task_id_of(request, "taskGroupId"))
        await self.authorize(request, schedulerId=group.scheduler_id)
        changed = await self.service.change_task_group_priority(group, body["newPriority"])
        return {
            "taskGroupId": group.task_group_id,
            "schedulerId": group.scheduler_id,
            "newPriority": body["newPriority"],
            "tasksAffected": len(changed),
            "taskIds": changed,
        }

    async def changeTaskPriority(self, request: web.Request, body: Any) -> Body:
        record = await self.service.get(task_id_of(request))
        await self.authorize(request, taskQueueId=record.task_queue_id)
        return status_body(await self.service.change_priority(record, body["newPriority"]))


ROUTES = Routes(TASK_ENDPOINTS, TaskHandlers)
