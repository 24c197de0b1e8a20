"""The purge-cache service (Taskcluster's purge-cache v1, docs/secrets.md#purge-cache): routes
and handlers over :class:`~coordinator.service.purge_cache.PurgeCacheService`.

A worker pool is named as the queue's task queues are, in either form
(:mod:`coordinator.api.endpoints`): one URL-encoded segment (``prov%2Fwt``, what the
official clients send for upstream's ``workerPoolId``) or two (``prov/wt``, what older
clients send), so each method has a route per form. ``purgeRequests``' scope is upstream's
(``purge-cache:purge-requests::<workerPoolId>``, with its two colons) or the single-colon
form upstream had before, and deployments' anonymous roles still grant
(``purge-cache:purge-requests:*``).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from coordinator.api import keyset
from coordinator.api.auth_clients import caller_id
from coordinator.api.endpoints import (
    NAME_PAGED,
    PURGE_CACHE_PREFIX,
    Endpoint,
    Method,
    Parameter,
    task_queue_of,
)
from coordinator.api.pipeline import ApiServices, Body, Handlers, Routes
from coordinator.domain.purge_cache import PurgeRequest
from coordinator.domain.records import from_iso, to_iso
from coordinator.domain.scopes import Template

SINCE = Parameter(
    name="since",
    schema="date-time-parameter",
    description="Only the requests whose `before` is at or after this date-time (default: "
    "every one).",
)

PURGE_SCOPES = "purge-cache:<taskQueueId>:<cacheName>"
READ_SCOPES: Template = {
    "AnyOf": [
        "purge-cache:purge-requests::<taskQueueId>",
        "purge-cache:purge-requests:<taskQueueId>",
    ]
}

_PURGE = (
    "Ask the worker pool's workers to purge their caches named `cacheName` made before now: "
    "a new request, or the existing one's `before` raised to now. Answers 204. The request is "
    "kept a day after it was last made."
)
_READ = (
    "The worker pool's purge requests whose `before` is at or after `since`: a worker asks "
    "before it starts a task and purges every cache of those names made before their "
    "`before`."
)


def _both_forms(
    name: str,
    method: Method,
    title: str,
    description: str,
    *,
    scopes: Template,
    input: str | None = None,
    output: str | None = None,
    query: tuple[Parameter, ...] = (),
    success: int = 200,
) -> tuple[Endpoint, Endpoint]:
    """The method's route by taskQueueId (one segment) and by provisionerId and workerType."""
    common: dict[str, Any] = {
        "prefix": PURGE_CACHE_PREFIX,
        "name": name,
        "method": method,
        "input": input,
        "output": output,
        "description": description,
        "query": query,
        "scopes": scopes,
        "success": success,
    }
    return (
        Endpoint(route="/purge-cache/{taskQueueId}", title=title, **common),
        Endpoint(
            route="/purge-cache/{provisionerId}/{workerType}",
            title=f"{title} (by provisionerId and workerType)",
            variant="ByProvisionerAndWorkerType",
            **common,
        ),
    )


PURGE_CACHE_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        prefix=PURGE_CACHE_PREFIX,
        name="allPurgeRequests",
        method="GET",
        route="/purge-cache/list",
        input=None,
        output="all-purge-requests-response",
        title="All Open Purge Requests",
        description="Every purge request, by worker pool and cacheName, a page at a time: for "
        "administrators; workers ask purgeRequests for their own pool.",
        query=NAME_PAGED,
        scopes="purge-cache:all-purge-requests",
    ),
    *_both_forms(
        "purgeCache",
        "POST",
        "Purge Worker Cache",
        _PURGE,
        input="purge-cache-request",
        scopes=PURGE_SCOPES,
        success=204,
    ),
    *_both_forms(
        "purgeRequests",
        "GET",
        "Open Purge Requests for a worker pool",
        _READ,
        output="purge-requests-response",
        query=(SINCE,),
        scopes=READ_SCOPES,
    ),
)


def request_body(request: PurgeRequest) -> Body:
    return {
        "provisionerId": request.task_queue.provisioner_id,
        "workerType": request.task_queue.worker_type,
        "cacheName": request.cache_name,
        "before": to_iso(request.before),
    }


class PurgeCacheHandlers(Handlers):
    """The purge-cache methods."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.service = services.purge_cache

    async def purgeCache(self, request: web.Request, body: Body) -> web.StreamResponse:
        auth = await self.authorize(request, cacheName=body["cacheName"])
        await self.service.purge_cache(
            task_queue_of(request.match_info), body["cacheName"], by=caller_id(auth)
        )
        return web.Response(status=204)

    async def purgeRequests(self, request: web.Request, body: None) -> Body:
        since = request.query.get("since")
        requests = await self.service.purge_requests(
            task_queue_of(request.match_info), since=0 if since is None else from_iso(since)
        )
        return {"requests": [request_body(r) for r in requests]}

    async def allPurgeRequests(self, request: web.Request, body: None) -> Body:
        after = keyset.after(request, (str, str, keyset.Name))
        page = await self.service.all_purge_requests(
            limit=keyset.limit(request),
            after=None if after is None else (str(after[0]), str(after[1]), str(after[2])),
        )
        return keyset.page_body(request, "requests", page, request_body)


ROUTES = Routes(PURGE_CACHE_ENDPOINTS, PurgeCacheHandlers)
