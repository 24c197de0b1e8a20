"""Assembles the coordinator: store, Azure queues, task service, resolvers and the aiohttp app.

:func:`build_app` is what ``queue-coordinator serve`` runs and what tests start on a free
port. Start-up opens the store (applying migrations), connects the queue layer when an Azure
connection string is configured, and starts every background actor; clean-up stops them in
reverse order.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry

from coordinator.api import keyset, openapi, validation
from coordinator.api.auth import Authorizer
from coordinator.api.endpoints import API_PREFIX, ENDPOINTS
from coordinator.api.handlers import HANDLERS, Handlers, route_handler
from coordinator.api.http import error_middleware, json_response
from coordinator.api.metrics import HttpMetrics, metrics_handler, metrics_middleware
from coordinator.api.ui import add_ui_routes
from coordinator.azure.queues import QueueService, QueueSettings
from coordinator.config import Config, ConfigurationError
from coordinator.domain.lifecycle import Timing
from coordinator.resolvers import (
    claim_resolver,
    deadline_resolver,
    dependency_resolver,
    expiry_sweeper,
    hint_keeper,
    quarantine_refresher,
    queue_gauges,
    queue_sweeper,
    reconciler,
    sightings_flusher,
    worker_sweeper,
)
from coordinator.resolvers.runner import Actor, Runner
from coordinator.service.clock import wall_clock
from coordinator.service.dispatch import NO_AZURE, WorkDispatch
from coordinator.service.management import ResolvedTTLs, TaskManagement
from coordinator.service.metrics import ServiceMetrics
from coordinator.service.tasks import TaskService
from coordinator.service.workers import WorkerService
from coordinator.store.base import Store
from coordinator.store.factory import open_store

log = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class Coordinator:
    """The running parts of one coordinator process (kept on the app for tests)."""

    config: Config
    store: Store
    service: TaskService
    azure_queues: QueueService | None
    management: TaskManagement
    dispatch: WorkDispatch
    runner: Runner
    workers: WorkerService


COORDINATOR = web.AppKey("coordinator", Coordinator)

ROOT_ENDPOINTS = frozenset({"heartbeat", "lbheartbeat", "version"})
"""Served at the service root as well, where load balancers and deployment checks look."""


def _actors(
    config: Config,
    service: TaskService,
    management: TaskManagement,
    azure_queues: QueueService | None,
) -> list[Actor]:
    seconds = config.resolver_interval_ms / 1000
    actors = [
        Actor(
            name="claim-resolver",
            run_once=lambda: claim_resolver.run_once(service),
            interval=seconds,
        ),
        Actor(
            name="deadline-resolver",
            run_once=lambda: deadline_resolver.run_once(service, delay_ms=config.deadline_delay_ms),
            interval=seconds,
        ),
        Actor(
            name="dependency-resolver",
            run_once=lambda: dependency_resolver.run_once(service),
            interval=seconds,
        ),
        Actor(
            name="hint-keeper",
            run_once=lambda: hint_keeper.run_once(service, grace_ms=config.hint_grace_ms),
            interval=seconds,
        ),
        Actor(
            name="expiry-sweeper",
            run_once=lambda: expiry_sweeper.run_once(service, management),
            interval=seconds,
            busy_at=1000,
        ),
    ]
    if azure_queues is not None:
        actors.append(
            Actor(
                name="reconciler",
                run_once=lambda: reconciler.run_once(service, azure_queues),
                interval=config.reconcile_interval_ms / 1000,
                busy_at=500,
            )
        )
        actors.append(
            Actor(
                name="queue-sweeper",
                run_once=lambda: queue_sweeper.run_once(azure_queues, now=service.clock()),
                interval=3600.0,
            )
        )
    return actors


def _worker_actors(config: Config, workers: WorkerService) -> list[Actor]:
    seconds = config.resolver_interval_ms / 1000
    return [
        Actor(
            name="sightings-flusher",
            run_once=lambda: sightings_flusher.run_once(workers),
            interval=seconds,
        ),
        Actor(
            name="quarantine-refresher",
            run_once=lambda: quarantine_refresher.run_once(workers),
            interval=seconds,
        ),
        Actor(
            name="worker-sweeper",
            run_once=lambda: worker_sweeper.run_once(workers),
            interval=max(seconds, 60.0),
            busy_at=1000,
        ),
    ]


def _queue_service(config: Config) -> QueueService | None:
    """The Azure queue layer, or ``None`` without a connection string.

    :raises ConfigurationError: the connection string or the queue prefix is unusable.
    """
    if not config.azure_connection_string:
        return None
    try:
        return QueueService(
            config.azure_connection_string,
            QueueSettings(
                prefix=config.queue_prefix,
                poll_visibility_s=max(1, config.poll_visibility_ms // 1000),
                pending_cache_s=config.pending_cache_ms / 1000,
            ),
        )
    except ValueError as error:
        raise ConfigurationError(
            f"{error} (AZURE_STORAGE_CONNECTION_STRING needs AccountName, AccountKey and an "
            "endpoint; COORDINATOR_QUEUE_PREFIX lowercase letters, digits and hyphens)"
        ) from None


def build_app(
    config: Config,
    *,
    clock: Callable[[], int] = wall_clock,
    run_resolvers: bool = True,
) -> web.Application:
    """The aiohttp application for ``config``.

    :param clock: epoch-milliseconds clock for every transition (tests inject one).
    :param run_resolvers: start the background actors (tests of a single pass turn them off
        and call ``run_once`` themselves).
    """
    registry = CollectorRegistry()  # per app: tests run several in one process
    service_metrics = ServiceMetrics(registry)
    app = web.Application(
        middlewares=[metrics_middleware(HttpMetrics(registry)), error_middleware],
        client_max_size=max(config.max_body_bytes, config.max_batch_body_bytes),
    )
    # Verify credentials on the clock their certificates are issued on (the runs').
    authorizer = Authorizer.from_config(config, clock=lambda: clock() / 1000)

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        azure_queues = _queue_service(config)
        store = await open_store(config.store_url)
        service = TaskService(
            store=store,
            hints=azure_queues,
            timing=Timing(
                claim_timeout_ms=config.claim_timeout_ms,
                retry_delay_base_ms=config.retry_delay_base_ms,
            ),
            max_deadline_ms=config.max_deadline_ms,
            clock=clock,
            metrics=service_metrics,
        )
        management = TaskManagement(
            service=service,
            store=store,
            ttls=ResolvedTTLs(completed_ms=config.completed_ttl_ms, failed_ms=config.failed_ttl_ms),
        )
        app[keyset.TOKEN_KEY] = await management.token_key()
        workers = WorkerService(store=store, clock=clock)
        # Before the first request: a quarantined worker must not claim in the first second.
        await workers.refresh_quarantines()
        dispatch = WorkDispatch(
            service=service,
            azure_queues=azure_queues,
            workers=workers,
            claim_work_timeout_s=config.claim_work_timeout_ms / 1000,
        )
        runner = Runner(
            [
                *_actors(config, service, management, azure_queues),
                *_worker_actors(config, workers),
                Actor(
                    name="queue-gauges",
                    run_once=lambda: queue_gauges.run_once(workers, service_metrics),
                    interval=queue_gauges.INTERVAL,
                ),
            ]
            if run_resolvers
            else [],
            on_pass=service_metrics.resolver_acted,
        )
        coordinator = Coordinator(
            config=config,
            store=store,
            service=service,
            azure_queues=azure_queues,
            management=management,
            dispatch=dispatch,
            runner=runner,
            workers=workers,
        )
        app[COORDINATOR] = coordinator
        app[HANDLERS] = Handlers(
            service=service,
            management=management,
            dispatch=dispatch,
            workers=workers,
            authorizer=authorizer,
        )
        runner.start()
        log.info(
            "coordinator started url=%s store=%s azure=%s auth=%s",
            config.public_url,
            config.store_url.split("@")[-1],
            azure_queues is not None,
            config.auth_enabled,
        )
        if azure_queues is None:
            log.warning("%s", NO_AZURE)
        try:
            yield
        finally:
            await runner.stop()
            await service.drain()
            try:
                await workers.flush()  # the sightings of the last second
            except Exception as error:
                log.warning("sightings not written at shutdown error=%r", error)
            if azure_queues is not None:
                await azure_queues.close()
            await store.close()

    app.cleanup_ctx.append(lifespan)

    openapi_document = openapi.build_openapi(config.public_url)

    async def serve_openapi(request: web.Request) -> web.Response:
        return json_response(openapi_document)

    for endpoint in ENDPOINTS:
        route = API_PREFIX + endpoint.route
        if endpoint.name == "openapi":
            app.router.add_route(endpoint.method, route, serve_openapi, name="openapi")
            continue
        max_body = config.max_batch_body_bytes if endpoint.batch else config.max_body_bytes
        handler = route_handler(endpoint, max_body=max_body)
        app.router.add_route(endpoint.method, route, handler)
        if endpoint.name in ROOT_ENDPOINTS:
            app.router.add_route(endpoint.method, endpoint.route, handler)
    app.router.add_get("/metrics", metrics_handler(registry), name="metrics")
    add_ui_routes(app)
    validation.preload()
    return app
