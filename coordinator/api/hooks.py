"""The hooks service's endpoints (Taskcluster's ``Hooks`` client, at ``/api/hooks/v1``,
docs/hooks.md), and createTask as a hook calls it.

:class:`HookHandlers` is mixed into :class:`~coordinator.api.handlers.Handlers`, which binds
the routes of :data:`~coordinator.api.endpoints.HOOK_ENDPOINTS` to its methods by name, as it
does the queue's. :class:`HookTasks` is the :class:`~coordinator.service.hooks.TaskCreator`
the app gives the hook service: the checks a createTask request gets (the task schema, and the
scopes, here the hook's), then the task service.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from coordinator.api import keyset, validation
from coordinator.api.auth import Auth, Rejected
from coordinator.api.errors import AuthenticationFailed, InputValidationError, InsufficientScopes
from coordinator.api.scopes import CREATE_TASK_SCOPES, create_task_params, expand, render
from coordinator.api.scopes import unsatisfied as unsatisfied_scopes
from coordinator.domain.errors import Forbidden, InputError
from coordinator.domain.hooks import Hook, LastFire
from coordinator.domain.records import to_iso
from coordinator.service.hooks import HookService
from coordinator.service.tasks import TaskService
from coordinator.service.workers import WorkerService

if TYPE_CHECKING:
    from coordinator.api.auth import Authorizer, RequestAuth

Body = dict[str, Any]


class HookTasks:
    """createTask for a hook's fire: what the createTask endpoint checks of a request, with
    the hook's scopes (those of the client that last created or updated it) in the caller's
    place, then :meth:`TaskService.create_task`."""

    def __init__(self, *, service: TaskService, workers: WorkerService) -> None:
        self._service = service
        self._workers = workers

    async def __call__(self, task_id: str, task: dict[str, Any], *, scopes: Sequence[str]) -> None:
        try:
            validation.validate("create-task-request", task, where="task")
        except InputValidationError as error:
            raise InputError(str(error)) from None
        expression = expand(CREATE_TASK_SCOPES, create_task_params(task))
        missing = unsatisfied_scopes(scopes, expression)
        if missing is not None:
            raise Forbidden(
                "The hook's scopes (those of the client that last created or updated it) do "
                f"not satisfy createTask's; missing:\n\n```\n{render(missing)}\n```"
            )
        self._workers.task_created(await self._service.create_task(task_id, task))


def _hook_of(request: web.Request) -> tuple[str, str]:
    return request.match_info["hookGroupId"], request.match_info["hookId"]


def _fire_body(task_id: str | None) -> Body:
    """triggerHook's answer: the taskId, also where Taskcluster before v42 put it; ``{}`` when
    the template declined."""
    return {} if task_id is None else {"taskId": task_id, "status": {"taskId": task_id}}


def _status_body(hook: Hook, fire: LastFire | None) -> Body:
    if fire is None:
        last: Body = {"result": "no-fire"}
    elif fire.result == "success":
        last = {"result": "success", "taskId": fire.task_id, "time": to_iso(fire.task_create_time)}
    else:
        last = {
            "result": "error",
            "error": {"message": fire.error},
            "time": to_iso(fire.task_create_time),
        }
    body: Body = {"lastFire": last}
    if hook.next_due is not None:
        body["nextScheduledDate"] = to_iso(hook.next_due)
    return body


class HookHandlers:
    """The hooks endpoints, mixed into :class:`~coordinator.api.handlers.Handlers`.

    :param hooks: the hook service.
    """

    hooks: HookService
    auth: Authorizer

    if TYPE_CHECKING:

        async def authorize(self, request: web.Request, **params: object) -> RequestAuth: ...

    async def listHookGroups(self, request: web.Request, body: Any) -> Body:
        return {"groups": await self.hooks.groups()}

    async def listHooks(self, request: web.Request, body: Any) -> Body:
        group = await self.hooks.group(request.match_info["hookGroupId"])
        return {"hooks": [hook.definition() for hook in group]}

    async def hook(self, request: web.Request, body: Any) -> Body:
        return (await self.hooks.get(*_hook_of(request))).definition()

    async def getHookStatus(self, request: web.Request, body: Any) -> Body:
        hook = await self.hooks.get(*_hook_of(request))
        return _status_body(hook, await self.hooks.last_fire(hook))

    async def createHook(self, request: web.Request, body: Any) -> Body:
        scopes = await self._caller_scopes(request)
        return (await self.hooks.create(*_hook_of(request), body, scopes=scopes)).definition()

    async def updateHook(self, request: web.Request, body: Any) -> Body:
        scopes = await self._caller_scopes(request)
        return (await self.hooks.update(*_hook_of(request), body, scopes=scopes)).definition()

    async def removeHook(self, request: web.Request, body: Any) -> Body:
        await self.hooks.remove(*_hook_of(request))
        return {}

    async def triggerHook(self, request: web.Request, body: Any) -> Body:
        hook = await self.hooks.get(*_hook_of(request))
        caller = await self.auth.caller(request)
        client_id = caller.client_id if isinstance(caller, Auth) else None
        try:
            task_id = await self.hooks.trigger(
                hook, body, fired_by="triggerHook", client_id=client_id
            )
        except Forbidden as error:
            raise InsufficientScopes(
                f"The role `hook-id:{hook.hook_group_id}/{hook.hook_id}` does not have "
                f"sufficient scopes to create the task:\n\n{error}"
            ) from None
        return _fire_body(task_id)

    async def triggerHookWithToken(self, request: web.Request, body: Any) -> Body:
        hook = await self.hooks.get(*_hook_of(request))
        if not hmac.compare_digest(
            request.match_info["token"].encode(), hook.trigger_token.encode()
        ):
            raise AuthenticationFailed("invalid hook token")
        return _fire_body(await self.hooks.trigger(hook, body, fired_by="triggerHookWithToken"))

    async def getTriggerToken(self, request: web.Request, body: Any) -> Body:
        return {"token": (await self.hooks.get(*_hook_of(request))).trigger_token}

    async def resetTriggerToken(self, request: web.Request, body: Any) -> Body:
        return {"token": await self.hooks.reset_trigger_token(*_hook_of(request))}

    async def listLastFires(self, request: web.Request, body: Any) -> Body:
        limit = keyset.limit(request)
        after = keyset.after(request, (int, str))
        before = None if after is None else (int(after[0]), str(after[1]))
        fires = await self.hooks.last_fires(*_hook_of(request), limit=limit + 1, before=before)
        result: Body = {
            "lastFires": [
                {
                    "hookGroupId": fire.hook_group_id,
                    "hookId": fire.hook_id,
                    "firedBy": fire.fired_by,
                    "taskId": fire.task_id,
                    "taskCreateTime": to_iso(fire.task_create_time),
                    "result": fire.result,
                    "error": fire.error,
                    "taskState": state or "unknown",
                }
                for fire, state in fires[:limit]
            ]
        }
        if len(fires) > limit:
            last = fires[limit - 1][0]
            result["continuationToken"] = keyset.token(
                request, (last.task_create_time, last.task_id)
            )
        return result

    async def _caller_scopes(self, request: web.Request) -> tuple[str, ...]:
        """The scopes of the (authorized) caller: what the hook's tasks will be created with."""
        caller = await self.auth.caller(request)
        assert not isinstance(caller, Rejected)  # the route dispatch authorized it
        return caller.scopes
