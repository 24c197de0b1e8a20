"""The management API (not Taskcluster methods): its routes and handlers, and its listings,
listTasks and listTaskSummaries, as pages or as an NDJSON stream.

A stream (``Accept: application/x-ndjson``) writes each match as one line as the service
yields it, a page of the store at a time, flushing about every :data:`FLUSH_BYTES`; its lines
are rendered exactly as a page's items, whose schema the paged answer is checked against.
Once the first byte is out an error cannot become a JSON error body: the connection is then
closed mid-stream, so the client sees a truncated chunked body, never a short listing that
looks complete.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from coordinator.api import keyset
from coordinator.api.endpoints import BOUNDED_PAGED, MANAGEMENT_FILTERS, STREAMING, Endpoint
from coordinator.api.errors import InputValidationError
from coordinator.api.filters import task_filter
from coordinator.api.pipeline import ApiServices, Body, Handlers, Routes
from coordinator.domain.json_text import compact_bytes
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_filters import TaskFilter
from coordinator.service.management import TaskManagement
from coordinator.store.errors import StoreUnavailable

NDJSON = "application/x-ndjson"
FLUSH_BYTES = 64 * 1024

log = logging.getLogger(__name__)


def _item(record: TaskRecord, *, summary: bool) -> dict[str, Any]:
    task: Mapping[str, Any] = record.definition
    if summary:
        task = {key: value for key, value in task.items() if key not in ("payload", "extra")}
    return {"status": record.status(), "task": dict(task)}


def _limit(request: web.Request) -> int:
    """``limit``; beyond :data:`~coordinator.api.keyset.LIST_LIMIT` a 400 (these methods are
    ours, so they need not cap silently as Taskcluster's listings do)."""
    limit = int(request.query.get("limit", keyset.LIST_LIMIT))
    if limit > keyset.LIST_LIMIT:
        raise InputValidationError(f"limit={limit} is out of range: 1 to {keyset.LIST_LIMIT}")
    return limit


async def list_tasks(
    request: web.Request, management: TaskManagement, *, summary: bool
) -> dict[str, Any] | web.StreamResponse:
    """listTasks (``summary`` false) or listTaskSummaries: a page, or every match streamed."""
    matching = task_filter(request.query)
    if NDJSON in request.headers.get("Accept", ""):
        return await _stream(request, management, matching, summary=summary)
    key = keyset.after(request, (str,))
    page = await management.list_tasks(
        matching, limit=_limit(request), after=None if key is None else str(key[0])
    )
    body: dict[str, Any] = {"tasks": [_item(record, summary=summary) for record in page.items]}
    if page.next_after is not None:
        body["continuationToken"] = keyset.token(request, (page.next_after,))
    return body


async def _stream(
    request: web.Request, management: TaskManagement, matching: TaskFilter, *, summary: bool
) -> web.StreamResponse:
    if "continuationToken" in request.query or "limit" in request.query:
        raise InputValidationError(
            "an NDJSON listing streams every match: limit and continuationToken are for pages"
        )
    response = web.StreamResponse(headers={"Content-Type": NDJSON})
    response.enable_chunked_encoding()
    await response.prepare(request)
    buffer = bytearray()
    streamed = 0
    try:
        async for record in management.stream_tasks(matching):
            buffer += compact_bytes(_item(record, summary=summary)) + b"\n"
            streamed += 1
            if len(buffer) >= FLUSH_BYTES:
                await response.write(bytes(buffer))
                buffer.clear()
        await response.write(bytes(buffer))
        await response.write_eof()
    except ConnectionError:
        log.info("NDJSON listing ended by the client after %d tasks", streamed)
    except StoreUnavailable:
        # An outage, logged once by the store; the 200 is already sent, so break it off.
        log.info("NDJSON listing broken off by a store outage after %d tasks", streamed)
        if request.transport is not None:
            request.transport.close()
    except Exception:
        incident = uuid.uuid4().hex
        log.exception("NDJSON listing broken off incidentId=%s after %d tasks", incident, streamed)
        if request.transport is not None:
            request.transport.close()
    return response


MANAGEMENT_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        name="listTasks",
        method="GET",
        route="/tasks",
        input=None,
        output="list-tasks-response",
        title="List Tasks",
        description="One page of the tasks that match the filters, by taskId, with their "
        "statuses. " + MANAGEMENT_FILTERS + STREAMING,
        stability="experimental",
        query=BOUNDED_PAGED,
        filters="optional",
    ),
    Endpoint(
        name="listTaskSummaries",
        method="GET",
        route="/tasks/summary",
        input=None,
        output="list-task-summaries-response",
        title="List Task Summaries",
        description="As listTasks, without each task's `payload` and `extra`. "
        + MANAGEMENT_FILTERS
        + STREAMING,
        stability="experimental",
        query=BOUNDED_PAGED,
        filters="optional",
    ),
    Endpoint(
        name="countTasks",
        method="GET",
        route="/tasks/count",
        input=None,
        output="count-tasks-response",
        title="Count Tasks",
        description="How many tasks match the filters, by state (`delayed`: pending, not "
        "claimable yet; the states are disjoint and add up to `total`). " + MANAGEMENT_FILTERS,
        stability="experimental",
        filters="optional",
    ),
    Endpoint(
        name="cancelTasks",
        method="POST",
        route="/tasks/cancel",
        input=None,
        output="cancel-tasks-response",
        title="Cancel Tasks",
        description="cancelTask for every unresolved task that matches the filters, in bounded "
        "batches; `cancelled` counts the tasks this call resolved. Needs "
        "`queue:manage:cancel-tasks`; at least one filter is required. " + MANAGEMENT_FILTERS,
        stability="experimental",
        filters="required",
        scopes="queue:manage:cancel-tasks",
    ),
    Endpoint(
        name="rerunTasks",
        method="POST",
        route="/tasks/rerun",
        input=None,
        output="rerun-tasks-response",
        title="Rerun Tasks",
        description="rerunTask for every failed or exception task that matches the filters, in "
        "bounded batches; `rerun` counts the tasks this call reran, `matched` the failed and "
        "exception tasks it found (one past its deadline or at its maximum of runs is not "
        "rerun). Needs `queue:manage:rerun-tasks`; at least one filter is required. "
        + MANAGEMENT_FILTERS,
        stability="experimental",
        filters="required",
        scopes="queue:manage:rerun-tasks",
    ),
    Endpoint(
        name="deleteTasks",
        method="DELETE",
        route="/tasks",
        input=None,
        output="delete-tasks-response",
        title="Delete Tasks",
        description="Remove the tasks that match the filters, in bounded batches; their hints "
        "become stale, and a worker holding one of their runs gets 404 when it reports. Needs "
        "`queue:manage:delete-tasks`; at least one filter is required. " + MANAGEMENT_FILTERS,
        stability="experimental",
        filters="required",
        scopes="queue:manage:delete-tasks",
    ),
)
"""The management API."""


class ManagementHandlers(Handlers):
    """The management API over :class:`~coordinator.service.management.TaskManagement`."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.management = services.management

    async def listTasks(self, request: web.Request, body: Any) -> Body | web.StreamResponse:
        return await list_tasks(request, self.management, summary=False)

    async def listTaskSummaries(self, request: web.Request, body: Any) -> Body | web.StreamResponse:
        return await list_tasks(request, self.management, summary=True)

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


ROUTES = Routes(MANAGEMENT_ENDPOINTS, ManagementHandlers)
