"""Request metrics and ``GET /metrics``.

:func:`metrics_middleware` counts every request once, outside the error middleware so it sees
the final status: ``http_requests_total{method,name,status}``,
``http_request_duration_seconds{name}`` and ``auth_failure_total`` (answers 401 and 403, which
only authentication and scope checks give). ``name`` is the API method name, so label values
stay a small fixed set whatever the paths. :func:`metrics_handler` serves the app's registry
(these plus the service's, :mod:`coordinator.service.metrics`) in Prometheus' text format.
"""

from __future__ import annotations

import time

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from coordinator.api.http import ENDPOINT, Handler

UNMATCHED = "unmatched"
"""The ``name`` of a request no route matched."""


class HttpMetrics:
    """The request metrics of one app, registered on its registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._requests = Counter(
            "http_requests",
            "Requests answered, by method, API method name and status.",
            ["method", "name", "status"],
            registry=registry,
        )
        self._duration = Histogram(
            "http_request_duration_seconds",
            "Time to answer a request, by API method name.",
            ["name"],
            registry=registry,
        )
        self._auth_failures = Counter(
            "auth_failure", "Requests refused by authentication or scopes.", registry=registry
        )

    def observe(self, method: str, name: str, status: int, seconds: float) -> None:
        self._requests.labels(method, name, str(status)).inc()
        self._duration.labels(name).observe(seconds)
        if status in (401, 403):
            self._auth_failures.inc()


def _name(request: web.Request) -> str:
    """The API method name the route handler recorded, else the route's own name (``metrics``,
    ``openapi``)."""
    return request.get(ENDPOINT) or request.match_info.route.name or UNMATCHED


def metrics_middleware(metrics: HttpMetrics) -> Middleware:
    """The middleware that feeds ``metrics``; list it first, before the error middleware."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as error:
            status = error.status
            raise
        finally:
            metrics.observe(request.method, _name(request), status, time.perf_counter() - started)

    return middleware


def metrics_handler(registry: CollectorRegistry) -> Handler:
    """``GET /metrics`` over ``registry``."""

    async def serve(request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    return serve
