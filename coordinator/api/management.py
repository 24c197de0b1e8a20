"""The management API's listings: listTasks and listTaskSummaries as pages or as an NDJSON
stream (countTasks, cancelTasks and deleteTasks are one-line handlers in
:mod:`coordinator.api.handlers`).

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
from coordinator.api.errors import InputValidationError
from coordinator.api.filters import task_filter
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
