"""The service-status endpoints every service answers under its own prefix: ping, the
Dockerflow heartbeats and version, and the OpenAPI document (served by the app, from the same
table).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from aiohttp import web

from coordinator.api.endpoints import (
    Endpoint,
)
from coordinator.api.errors import (
    ServiceUnavailable,
)
from coordinator.api.pipeline import (
    ApiServices,
    Body,
    Handlers,
    Routes,
)
from coordinator.store.errors import StoreUnavailable

log = logging.getLogger(__name__)


STATUS_ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        name="ping",
        method="GET",
        route="/ping",
        input=None,
        output="ping-response",
        title="Ping Server",
        description="Answer whether the server is alive, and for how long it has been.",
    ),
    Endpoint(
        name="heartbeat",
        method="GET",
        route="/__heartbeat__",
        input=None,
        output="heartbeat-response",
        title="Heartbeat",
        description="Answer `{}` when the service and its store answer, 503 otherwise (also at "
        "the service root).",
    ),
    Endpoint(
        name="lbheartbeat",
        method="GET",
        route="/__lbheartbeat__",
        input=None,
        output="heartbeat-response",
        title="Load Balancer Heartbeat",
        description="Answer `{}` while the process serves requests; checks nothing else, so a "
        "load balancer does not drop every replica when the database blinks (also at the root).",
    ),
    Endpoint(
        name="version",
        method="GET",
        route="/__version__",
        input=None,
        output="version-response",
        title="Version",
        description="What is deployed, in the Dockerflow shape (also at the service root).",
    ),
    Endpoint(
        name="openapi",
        method="GET",
        route="/openapi.json",
        input=None,
        output=None,
        title="OpenAPI Document",
        description="This API described as an OpenAPI 3.1 document.",
    ),
)
"""The queue's; :func:`status_endpoints` makes another service's."""


class StatusHandlers(Handlers):
    """ping, the heartbeats and the version."""

    def __init__(self, services: ApiServices) -> None:
        super().__init__(services)
        self.service = services.tasks
        self.started = time.monotonic()
        self._version: Body = services.deployment.to_api()

    async def ping(self, request: web.Request, body: Any) -> Body:
        return {"alive": True, "uptime": time.monotonic() - self.started}

    async def heartbeat(self, request: web.Request, body: Any) -> Body:
        try:
            await self.service.check_store()
        except StoreUnavailable:
            raise  # error_middleware: 503 naming the store, with Retry-After
        except Exception as error:  # whatever else the driver raises, the check fails too
            raise ServiceUnavailable(f"the store does not answer: {error!r}") from error
        return {}

    async def lbheartbeat(self, request: web.Request, body: Any) -> Body:
        return {}

    async def version(self, request: web.Request, body: Any) -> Body:
        return self._version


def status_routes(prefix: str, variant: str) -> Routes:
    """The status endpoints of the service under ``prefix``, handled as the queue's are
    (``variant``: what keeps their OpenAPI operation ids apart from the queue's)."""
    endpoints = tuple(
        dataclasses.replace(endpoint, prefix=prefix, variant=variant)
        for endpoint in STATUS_ENDPOINTS
    )
    return Routes(endpoints, StatusHandlers)


ROUTES = Routes(STATUS_ENDPOINTS, StatusHandlers)
