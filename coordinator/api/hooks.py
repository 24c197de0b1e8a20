"""The hooks service's endpoints (Taskcluster's ``Hooks`` client, at ``/api/hooks/v1``,
docs/hooks.md), and createTask as a hook calls it.

:class:`HookHandlers` handles the routes of :data:`HOOK_ENDPOINTS`, by name, as every
service's handlers do. :class:`HookTasks` is the :class:`~coordinator.service.hooks.TaskCreator`
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
from coordinator.api.endpoints import HOOKS_PREFIX, PAGED, Endpoint
from coordinator.api.errors import AuthenticationFailed, InputValidationError, InsufficientScopes
from coordinator.api.pipeline import ApiServices, Handlers, Routes
from coordinator.domain.errors import Forbidden, InputError
from coordinator.domain.hooks import Hook, LastFire
from coordinator.domain.records import to_iso
from coordinator.domain.scopes import (
    CREATE_TASK_SCOPES,
    Template,
    create_task_params,
    expand,
    render,
)
from coordinator.domain.scopes import unsatisfied as unsatisfied_scopes
from coordinator.service.claims import CreatePolicy

if TYPE_CHECKING:
    pass

Body = dict[str, Any]


class HookTasks:
    """createTask for a hook's fire (or a task inbox row): what the createTask endpoint checks
    of a request, with the hook's scopes (those of the client that last created or updated it;
    for the inbox, those of the client the row names) in the caller's place, then
    :meth:`CreatePolicy.create_task`, as every create.

    :param whose: says whose scopes fell short, in the refusal.
    """

    def __init__(
        self,
        creates: CreatePolicy,
        *,
        whose: str = "The hook's scopes (those of the client that last created or updated it)",
    ) -> None:
        self._creates = creates
        self._whose = whose

    async def __call__(self, task_id: str, task: dict[str, Any], *, scopes: Sequence[str]) -> None:
        try:
            validation.validate("create-task-request", task, where="task")
        except InputValidationError as error:
            raise InputError(str(error)) from None
        expression = expand(CREATE_TASK_SCOPES, create_task_params(task))
        missing = unsatisfied_scopes(scopes, expression)
        if missing is not None:
            raise Forbidden(
                f"{self._whose} do not satisfy createTask's; missing:\n\n```\n"
                f"{render(missing)}\n```"
            )
        await self._creates.create_task(task_id, task)


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


_HOOK = "<hookGroupId>/<hookId>"
_MODIFY_HOOK: Template = {"AllOf": [f"hooks:modify-hook:{_HOOK}", f"assume:hook-id:{_HOOK}"]}
"""createHook's and updateHook's scopes: to change the hook, and to hold what its tasks will
(Taskcluster's role ``hook-id:<hookGroupId>/<hookId>``)."""


HOOK_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="listHookGroups",
        method="GET",
        route="/hooks",
        input=None,
        output="list-hook-groups-response",
        title="List hook groups",
        description="Every hook group with at least one hook.",
        scopes="hooks:list-hooks:",
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="listHooks",
        method="GET",
        route="/hooks/{hookGroupId}",
        input=None,
        output="list-hooks-response",
        title="List hooks in a given group",
        description="Every hook definition of the group; 404 for a group without hooks.",
        scopes="hooks:list-hooks:<hookGroupId>",
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="hook",
        method="GET",
        route="/hooks/{hookGroupId}/{hookId}",
        input=None,
        output="hook-definition",
        title="Get hook definition",
        description="The hook's definition.",
        scopes="hooks:get:<hookGroupId>:<hookId>",
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="getHookStatus",
        method="GET",
        route="/hooks/{hookGroupId}/{hookId}/status",
        input=None,
        output="hook-status",
        title="Get hook status",
        description="The hook's last fire and, with a schedule, its next scheduled date "
        "(deprecated in favour of listLastFires).",
        stability="deprecated",
        scopes=f"hooks:status:{_HOOK}",
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="createHook",
        method="PUT",
        route="/hooks/{hookGroupId}/{hookId}",
        input="create-hook-request",
        output="hook-definition",
        title="Create a hook",
        description="Create a hook. Its tasks are created with the scopes of the client that "
        "created it (or last updated it). Repeating the call with the same definition returns "
        "it; another definition under the same id is a 409. Besides the schema, a 400 when the "
        "body's `hookGroupId` or `hookId` differs from the path's, a `schedule` entry is not a "
        "cron pattern (seconds first, 6 fields at most) or never occurs, `triggerSchema` is not "
        "a valid JSON schema, or `task` is not a valid JSON-e template.",
        scopes=_MODIFY_HOOK,
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="updateHook",
        method="POST",
        route="/hooks/{hookGroupId}/{hookId}",
        input="create-hook-request",
        output="hook-definition",
        title="Update a hook",
        description="Replace every field of the hook but its ids and trigger token (bindings "
        "stay when the body has none); its schedule restarts from now. A 400 for what createHook "
        "refuses beyond the schema.",
        scopes=_MODIFY_HOOK,
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="removeHook",
        method="DELETE",
        route="/hooks/{hookGroupId}/{hookId}",
        input=None,
        output=None,
        title="Delete a hook",
        description="Delete the hook and its last fires; `{}` whether it existed or not.",
        scopes=f"hooks:modify-hook:{_HOOK}",
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="triggerHook",
        method="POST",
        route="/hooks/{hookGroupId}/{hookId}/trigger",
        input="trigger-hook",
        output="trigger-hook-response",
        title="Trigger a hook",
        description="Create the hook's task now, its template rendered with this payload "
        "(which must match the hook's triggerSchema: otherwise a 400) as `payload`; a "
        "`payload.taskId` that is not a slugid is a 400. A template that fails to render or "
        "renders something other than an object is a 400, and a task createTask refuses is "
        "answered as createTask would (a 403 when the hook's scopes do not suffice).",
        scopes=f"hooks:trigger-hook:{_HOOK}",
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="getTriggerToken",
        method="GET",
        route="/hooks/{hookGroupId}/{hookId}/token",
        input=None,
        output="trigger-token-response",
        title="Get a trigger token",
        description="The hook's secret token for triggerHookWithToken.",
        scopes=f"hooks:get-trigger-token:{_HOOK}",
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="resetTriggerToken",
        method="POST",
        route="/hooks/{hookGroupId}/{hookId}/token",
        input=None,
        output="trigger-token-response",
        title="Reset a trigger token",
        description="A new trigger token; the previous one stops working.",
        scopes=f"hooks:reset-trigger-token:{_HOOK}",
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="triggerHookWithToken",
        method="POST",
        route="/hooks/{hookGroupId}/{hookId}/trigger/{token}",
        input="trigger-hook",
        output="trigger-hook-response",
        title="Trigger a hook with a token",
        description="triggerHook for whoever holds the hook's trigger token (a webhook): no "
        "credentials; a wrong token is a 401.",
    ),
    Endpoint(
        prefix=HOOKS_PREFIX,
        name="listLastFires",
        method="GET",
        route="/hooks/{hookGroupId}/{hookId}/last-fires",
        input=None,
        output="list-last-fires-response",
        title="Get information about recent hook fires",
        description="The hook's fires, the newest first, each with its task's state now; 404 "
        "when it never fired.",
        query=PAGED,
        scopes=f"hooks:list-last-fires:{_HOOK}",
    ),
)
"""The hooks service, under :data:`~coordinator.api.endpoints.HOOKS_PREFIX`: Taskcluster's 14
methods of the ``Hooks`` client (its four service-status ones are
:func:`coordinator.api.status.status_routes`)."""


class HookHandlers(Handlers):
    """The hooks endpoints, over the hook service."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.hooks = services.hooks

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
        assert not isinstance(caller, Rejected)  # the request pipeline authorized it
        return caller.scopes


ROUTES = Routes(HOOK_ENDPOINTS, HookHandlers)
