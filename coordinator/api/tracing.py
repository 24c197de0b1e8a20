"""The coordinator's spans of a task's way (docs/operations.md#tracing), the HTTP layer's part:
createTask and createTasks continue the trace of the request's ``traceparent`` header (a new
root without one) and store their span's traceparent with the tasks; each run a claim hands out
gets a span under its task's stored traceparent, whose own traceparent the claim answer
carries to the worker; each run a report resolves gets one under the report's header, else
under the task's.

The handlers hold ``None`` for the tracer when tracing is off, and then call nothing here but
the functions that return at once on ``None``.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from aiohttp import web

from coordinator.domain.records import TaskRecord
from otlp_tracing import TRACEPARENT, Attributes, Tracer

if TYPE_CHECKING:
    from opentelemetry.trace import Span


def creating(
    tracer: Tracer, request: web.Request, name: str, attributes: Attributes
) -> AbstractContextManager[Span]:
    """The span of a createTask or createTasks request, under the producer's span."""
    return tracer.span(
        name, parent=request.headers.get(TRACEPARENT), kind="server", attributes=attributes
    )


def started_ns(tracer: Tracer | None) -> int | None:
    """When a claim or report request began, for the spans made once it is answered."""
    return None if tracer is None else time.time_ns()


def claim_traceparent(tracer: Tracer | None, record: TaskRecord, started: int | None) -> str | None:
    """The span of the run ``record``'s last run that a claim just handed out, from the
    request's start (``started``) to now, under the task's span; its traceparent, for the
    claim answer. ``None`` without a tracer."""
    if tracer is None:
        return None
    run = record.runs[-1]
    span = tracer.start(
        "claim",
        parent=record.traceparent,
        kind="server",
        attributes={
            **_task_attributes(record),
            "runId": run.run_id,
            "workerGroup": run.worker_group or "",
            "workerId": run.worker_id or "",
        },
        start_ns=started,
    )
    span.end()
    return tracer.traceparent(span)


def report_span(
    tracer: Tracer | None,
    name: str,
    record: TaskRecord,
    run_id: int,
    started: int | None,
    *,
    request: web.Request | None,
) -> None:
    """The span of a report that resolved run ``run_id`` of ``record``: under the
    ``traceparent`` of ``request`` (a single report's), else the task's span (a batch's item,
    or a report sent without one)."""
    if tracer is None:
        return
    run = record.runs[run_id]
    header = request.headers.get(TRACEPARENT) if request is not None else None
    tracer.start(
        name,
        parent=header or record.traceparent,
        kind="server",
        attributes={
            **_task_attributes(record),
            "runId": run_id,
            "workerId": run.worker_id or "",
            "state": run.state,
            "reasonResolved": run.reason_resolved or "",
        },
        start_ns=started,
    ).end()


def _task_attributes(record: TaskRecord) -> dict[str, str | int]:
    return {"taskId": record.task_id, "taskQueueId": record.task_queue_id}
