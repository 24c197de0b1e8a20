"""OpenTelemetry tracing over OTLP/HTTP, switched on by ``OTEL_EXPORTER_OTLP_ENDPOINT``: the
tracer provider a process exports its spans through, and spans started from, and read back as,
W3C ``traceparent`` values. Shared by the coordinator and the worker SDK; imports neither.

Nothing of OpenTelemetry is imported until :func:`open_tracer` finds the variable set, so a
process without it holds ``None`` for its tracer and pays one ``None`` check per traced call.
The other standard variables (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_HEADERS`` ...) are read by the
OpenTelemetry SDK itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from opentelemetry.trace import Span

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACEPARENT = "traceparent"
"""The W3C Trace Context header, and the claim answer's field of the same name."""

SpanKindName = Literal["server", "client", "producer", "consumer", "internal"]
Attributes = Mapping[str, str | int]


def open_tracer(service_name: str, environ: Mapping[str, str] | None = None) -> Tracer | None:
    """A tracer exporting to ``OTEL_EXPORTER_OTLP_ENDPOINT``, or ``None`` when it is unset (and
    then nothing of OpenTelemetry is imported).

    :param service_name: ``service.name`` unless ``OTEL_SERVICE_NAME`` (or
        ``OTEL_RESOURCE_ATTRIBUTES``) names one.
    """
    environ = os.environ if environ is None else environ
    if not environ.get(ENDPOINT_VARIABLE):
        return None
    return Tracer(service_name)


class Tracer:
    """One process's spans: its own tracer provider (never the global one, which belongs to
    the application embedding the worker SDK), batching spans to the OTLP/HTTP exporter."""

    def __init__(self, service_name: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind, use_span
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        named = "service.name" in OTELResourceDetector().detect().attributes
        resource = Resource.create({} if named else {"service.name": service_name})
        # shutdown_on_exit: the last batch is exported when the process exits
        self._provider = TracerProvider(resource=resource, shutdown_on_exit=True)
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self._provider.get_tracer("queue-coordinator")
        self._propagator = TraceContextTextMapPropagator()
        self._use_span = use_span
        self._kinds = {
            "server": SpanKind.SERVER,
            "client": SpanKind.CLIENT,
            "producer": SpanKind.PRODUCER,
            "consumer": SpanKind.CONSUMER,
            "internal": SpanKind.INTERNAL,
        }

    def start(
        self,
        name: str,
        *,
        parent: str | None,
        kind: SpanKindName,
        attributes: Attributes,
        start_ns: int | None = None,
    ) -> Span:
        """A span (the caller ends it) under the span ``parent`` names; with ``parent``
        ``None``, under the span current in the caller, else a new trace's root (as for a
        ``parent`` that is no valid traceparent).

        :param start_ns: when it started (epoch nanoseconds), if before now.
        """
        context = self._propagator.extract({TRACEPARENT: parent}) if parent else None
        return self._tracer.start_span(
            name,
            context=context,
            kind=self._kinds[kind],
            attributes=attributes,
            start_time=start_ns,
        )

    @contextmanager
    def span(
        self, name: str, *, parent: str | None, kind: SpanKindName, attributes: Attributes
    ) -> Iterator[Span]:
        """:meth:`start`'s span, current while the block runs (so spans the block starts
        through OpenTelemetry's API nest under it), ended with the block; an exception leaving
        the block is recorded on it and marks it an error."""
        span = self.start(name, parent=parent, kind=kind, attributes=attributes)
        with self._use_span(span, end_on_exit=True):
            yield span

    @staticmethod
    def traceparent(span: Span) -> str:
        """The W3C traceparent naming ``span``, for a child in another process."""
        context = span.get_span_context()
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"

    def shutdown(self) -> None:
        """Export what is batched and stop; later spans are dropped."""
        self._provider.shutdown()
