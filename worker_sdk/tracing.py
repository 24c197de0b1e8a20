"""The worker SDK's spans of a task's way (docs/operations.md#tracing): a producer's dispatch,
whose ``traceparent`` its createTask (or createTasks) request carries to the coordinator, and
on the worker each run's handler and its report, under the claim's span that the claim answer
names.

One tracer per process, opened at its first use: ``None`` while ``OTEL_EXPORTER_OTLP_ENDPOINT``
is unset, and then nothing of OpenTelemetry is imported and a traced call costs a ``None``
check.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from otlp_tracing import SpanKindName, Tracer, open_tracer

if TYPE_CHECKING:
    from opentelemetry.trace import Span

SERVICE_NAME = "worker-sdk"
"""The spans' ``service.name`` unless ``OTEL_SERVICE_NAME`` names one."""


@functools.cache
def tracer() -> Tracer | None:
    """This process's tracer, ``None`` when tracing is off."""
    return open_tracer(SERVICE_NAME)


def dispatching(
    tracer: Tracer, name: str, function: str, task_queue_id: str, **attributes: str | int
) -> AbstractContextManager[Span]:
    """The producer's span of one dispatch of ``function`` (``dispatch``, ``dispatch_many``),
    under the span current in the caller, if any."""
    return tracer.span(
        name,
        parent=None,
        kind="producer",
        attributes={"function": function, "taskQueueId": task_queue_id, **attributes},
    )


def run_span(
    tracer: Tracer,
    name: str,
    kind: SpanKindName,
    *,
    task_id: str,
    run_id: int,
    task: Mapping[str, Any],
    worker_id: str,
    traceparent: str | None,
) -> AbstractContextManager[Span]:
    """A worker's span of one run (``handler``, ``report``), under the claim's."""
    return tracer.span(
        name,
        parent=traceparent,
        kind=kind,
        attributes={
            "taskId": task_id,
            "runId": run_id,
            "taskQueueId": str(task.get("taskQueueId", "")),
            "workerId": worker_id,
        },
    )
