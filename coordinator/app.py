"""Assembles the coordinator: store, Azure queues, artifact blob store, services, background
actors and the app.

:func:`build_app` is what ``queue-coordinator serve`` runs and what tests start on a free
port. It builds the aiohttp application, registers the routes of the endpoint table and hands
aiohttp a lifespan: start-up opens the blob store and the store (applying migrations),
connects the queue layer under Azure dispatch, builds the services
over them and starts the background actors of :data:`ACTORS` (and, with Pulse on, the event
publisher: its own process, :mod:`coordinator.cli.publish_events`, unless
``COORDINATOR_PULSE_IN_PROCESS``); clean-up stops them and closes everything in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from email.utils import formatdate

from aiohttp import hdrs, web
from prometheus_client import CollectorRegistry

from coordinator.api import keyset, openapi, validation
from coordinator.api.artifacts import ArtifactUrls
from coordinator.api.auth import UNRESTRICTED, Authorizer
from coordinator.api.endpoints import API_PREFIX, MAX_REQUEST_LINE
from coordinator.api.hooks import HookTasks
from coordinator.api.http import Handler, error_middleware, json_response
from coordinator.api.metrics import HttpMetrics, metrics_handler, metrics_middleware
from coordinator.api.pipeline import HANDLERS, ApiServices, bind, route_handler
from coordinator.api.services import PARTS, SERVICES, Service
from coordinator.api.ui import add_ui_routes
from coordinator.azure.queues import QueueService, QueueSettings
from coordinator.blobs import BlobStore
from coordinator.blobs.factory import open_blob_store
from coordinator.cli.publish_events import PublisherProcess
from coordinator.config import Config, ConfigurationError
from coordinator.domain.lifecycle import Timing
from coordinator.domain.urls import without_credentials
from coordinator.pulse.publisher import BrokerRefused, PulsePublisher
from coordinator.resolvers import (
    auth_refresher,
    claim_resolver,
    client_sweeper,
    deadline_resolver,
    dependency_resolver,
    event_publisher,
    expiry_sweeper,
    hint_keeper,
    hook_scheduler,
    inbox_ingester,
    index_sweeper,
    last_fire_sweeper,
    purge_request_sweeper,
    quarantine_refresher,
    queue_controls_refresher,
    queue_gauges,
    queue_sweeper,
    reconciler,
    secret_sweeper,
    sightings_flusher,
    worker_sweeper,
)
from coordinator.resolvers.runner import Actor, Runner
from coordinator.service.artifacts import ArtifactService
from coordinator.service.auth import EXPIRY_BATCH, AuthService
from coordinator.service.claims import ClaimPolicy, CreatePolicy
from coordinator.service.client_directory import ClientDirectory
from coordinator.service.clock import wall_clock
from coordinator.service.dispatch import WorkDispatch
from coordinator.service.encryption import Cipher, load_key
from coordinator.service.event_outbox import EventOutbox
from coordinator.service.hooks import DUE_BATCH, HookService
from coordinator.service.inbox import BATCH as INBOX_BATCH
from coordinator.service.inbox import InboxService, ScopesOf
from coordinator.service.index import IndexService
from coordinator.service.management import ResolvedTTLs, TaskManagement
from coordinator.service.metrics import ServiceMetrics
from coordinator.service.purge_cache import EXPIRY_BATCH as PURGE_EXPIRY_BATCH
from coordinator.service.purge_cache import PurgeCacheService
from coordinator.service.queue_controls import QueueControlService
from coordinator.service.secrets import EXPIRY_BATCH as SECRET_EXPIRY_BATCH
from coordinator.service.secrets import SecretService
from coordinator.service.tasks import TaskService
from coordinator.service.workers import WorkerService
from coordinator.store.base import Store
from coordinator.store.factory import POSTGRESQL, open_store, store_kind
from otlp_tracing import open_tracer

log = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class Coordinator:
    """The running parts of one coordinator process (kept on the app for tests)."""

    config: Config
    store: Store
    service: TaskService
    azure_queues: QueueService | None
    artifacts: ArtifactService
    management: TaskManagement
    dispatch: WorkDispatch
    workers: WorkerService
    hooks: HookService
    auth: AuthService
    index: IndexService
    secrets: SecretService
    purge_cache: PurgeCacheService
    controls: QueueControlService
    claims: ClaimPolicy
    creates: CreatePolicy
    inbox: InboxService
    metrics: ServiceMetrics
    events: EventOutbox | None = None
    """The outbox this process publishes (``COORDINATOR_PULSE_IN_PROCESS``)."""
    publisher_process: PublisherProcess | None = None
    """The child that publishes the outbox otherwise."""

    @property
    def azure(self) -> QueueService:
        """The Azure queue layer, for the actors that run only with it."""
        if self.azure_queues is None:
            raise RuntimeError("this coordinator runs without Azure queues")
        return self.azure_queues


COORDINATOR = web.AppKey("coordinator", Coordinator)

ROOT_ENDPOINTS = frozenset({"heartbeat", "lbheartbeat", "version"})
"""Served at the service root as well, where load balancers and deployment checks look."""


def _resolver_interval(config: Config) -> float:
    return config.resolver_interval_ms / 1000


@dataclass(frozen=True, kw_only=True, slots=True)
class ActorSpec:
    """One background actor: a pass of its ``coordinator.resolvers`` module on an interval.

    :param name: in logs and in the resolver metrics.
    :param run_once: one pass over the running parts; returns how many things it acted on.
    :param interval: seconds between idle passes, given the configuration; default:
        ``COORDINATOR_RESOLVER_INTERVAL``.
    :param needs_azure: runs only when Azure queues are configured.
    :param busy_at: a pass acting on at least this many runs again at once.
    :param needs_inbox: runs only on PostgreSQL, whose store has the task inbox.
    :param log_passes: an INFO line for each pass that acted.
    """

    name: str
    run_once: Callable[[Coordinator], Awaitable[int]]
    interval: Callable[[Config], float] = _resolver_interval
    needs_azure: bool = False
    busy_at: int = 100
    needs_inbox: bool = False
    log_passes: bool = True


ACTORS: tuple[ActorSpec, ...] = (
    ActorSpec(
        name="claim-resolver",
        run_once=lambda c: claim_resolver.run_once(c.service),
    ),
    ActorSpec(
        name="deadline-resolver",
        run_once=lambda c: deadline_resolver.run_once(
            c.service, delay_ms=c.config.deadline_delay_ms
        ),
    ),
    ActorSpec(
        name="dependency-resolver",
        run_once=lambda c: dependency_resolver.run_once(c.service),
    ),
    ActorSpec(
        name="hint-keeper",
        run_once=lambda c: hint_keeper.run_once(c.service, grace_ms=c.config.hint_grace_ms),
    ),
    ActorSpec(
        name="expiry-sweeper",
        run_once=lambda c: expiry_sweeper.run_once(c.management),
        busy_at=1000,
    ),
    ActorSpec(
        name="reconciler",
        run_once=lambda c: reconciler.run_once(c.service, c.azure),
        interval=lambda config: config.reconcile_interval_ms / 1000,
        needs_azure=True,
        busy_at=500,
    ),
    ActorSpec(
        name="queue-sweeper",
        run_once=lambda c: queue_sweeper.run_once(c.azure, now=c.service.clock()),
        interval=lambda config: 3600.0,
        needs_azure=True,
    ),
    ActorSpec(
        name="sightings-flusher",
        run_once=lambda c: sightings_flusher.run_once(c.workers),
    ),
    ActorSpec(
        name="quarantine-refresher",
        run_once=lambda c: quarantine_refresher.run_once(c.workers),
    ),
    ActorSpec(
        name="queue-controls-refresher",
        run_once=lambda c: queue_controls_refresher.run_once(c.controls),
    ),
    ActorSpec(
        name="worker-sweeper",
        run_once=lambda c: worker_sweeper.run_once(c.workers),
        interval=lambda config: max(_resolver_interval(config), 60.0),
        busy_at=1000,
    ),
    ActorSpec(
        name="queue-gauges",
        run_once=lambda c: queue_gauges.run_once(c.workers, c.metrics),
        interval=lambda config: queue_gauges.INTERVAL,
    ),
    ActorSpec(
        name="hook-scheduler",
        run_once=lambda c: hook_scheduler.run_once(c.hooks),
        interval=lambda config: hook_scheduler.INTERVAL,
        busy_at=DUE_BATCH,
        log_passes=False,  # the hook service logs each fire
    ),
    ActorSpec(
        name="auth-refresher",
        run_once=lambda c: auth_refresher.run_once(c.auth.directory),
        interval=lambda config: auth_refresher.INTERVAL,
        log_passes=False,
    ),
    ActorSpec(
        name="client-sweeper",
        run_once=lambda c: client_sweeper.run_once(c.auth),
        interval=lambda config: client_sweeper.INTERVAL,
        busy_at=EXPIRY_BATCH,
    ),
    ActorSpec(
        name="index-sweeper",
        run_once=lambda c: index_sweeper.run_once(c.index),
        interval=lambda config: index_sweeper.INTERVAL,
        busy_at=index_sweeper.BATCH,
    ),
    ActorSpec(
        name="last-fire-sweeper",
        run_once=lambda c: last_fire_sweeper.run_once(c.hooks),
        interval=lambda config: last_fire_sweeper.INTERVAL,
        busy_at=last_fire_sweeper.BATCH,
    ),
    ActorSpec(
        name="secret-sweeper",
        run_once=lambda c: secret_sweeper.run_once(c.secrets),
        interval=lambda config: secret_sweeper.INTERVAL,
        busy_at=SECRET_EXPIRY_BATCH,
    ),
    ActorSpec(
        name="inbox-ingester",
        run_once=lambda c: inbox_ingester.run_once(c.inbox),
        interval=lambda config: 0.0,  # the pass itself waits for a commit, or a second
        busy_at=INBOX_BATCH,
        needs_inbox=True,
    ),
    ActorSpec(
        name="purge-request-sweeper",
        run_once=lambda c: purge_request_sweeper.run_once(c.purge_cache),
        interval=lambda config: purge_request_sweeper.INTERVAL,
        busy_at=PURGE_EXPIRY_BATCH,
    ),
)
"""Every background actor of a coordinator process (docs/architecture.md says what each does),
but the event publisher, which runs in a process of its own unless
``COORDINATOR_PULSE_IN_PROCESS`` (:func:`_runner`)."""


def _runner(coordinator: Coordinator, *, enabled: bool) -> Runner:
    """A runner of the actors of :data:`ACTORS` that this coordinator can run, and of the event
    publisher if it publishes in process (none unless ``enabled``)."""

    def actor(spec: ActorSpec) -> Actor:
        return Actor(
            name=spec.name,
            run_once=lambda: spec.run_once(coordinator),
            interval=spec.interval(coordinator.config),
            busy_at=spec.busy_at,
            log_passes=spec.log_passes,
        )

    with_azure = coordinator.azure_queues is not None
    with_inbox = store_kind(coordinator.config.store_url) == POSTGRESQL
    actors = [
        actor(spec)
        for spec in ACTORS
        if (with_azure or not spec.needs_azure) and (with_inbox or not spec.needs_inbox)
    ]
    if coordinator.events is not None:
        actors.append(event_publisher.actor(coordinator.events))
    return Runner(actors if enabled else [], on_pass=coordinator.metrics.resolver_acted)


def _queue_service(config: Config) -> QueueService | None:
    """The Azure queue layer under Azure dispatch, else ``None`` (store dispatch needs no
    queue, even where a storage account holds the artifacts).

    :raises ConfigurationError: the connection string or the queue prefix is unusable.
    """
    if config.dispatch_mode != "azure" or not config.azure_connection_string:
        return None
    try:
        return QueueService(
            config.azure_connection_string,
            QueueSettings(
                prefix=config.queue_prefix,
                poll_visibility_s=max(1, config.poll_visibility_ms // 1000),
                pending_cache_s=config.pending_cache_ms / 1000,
                request_timeout_s=config.queue_request_timeout_ms / 1000,
            ),
        )
    except ValueError as error:
        raise ConfigurationError(
            f"{error} (AZURE_STORAGE_CONNECTION_STRING needs AccountName, AccountKey and an "
            "endpoint; COORDINATOR_QUEUE_PREFIX lowercase letters, digits and hyphens)"
        ) from None


async def _open(
    config: Config,
    clock: Callable[[], int],
    metrics: ServiceMetrics,
    directory: ClientDirectory,
    *,
    unrestricted: bool,
) -> Coordinator:
    """The store (migrated), the queue layer, the blob store and the services over them,
    ready to serve.

    :param clock: epoch-milliseconds clock for every transition.
    :param metrics: what the service layer counts into.
    :param directory: the authorizer's clients, to which the store's are added.
    :param unrestricted: authentication is off: every client holds ``*`` (the task inbox's
        rows too).
    """
    async with contextlib.AsyncExitStack() as opened:  # closes what opened if a later step fails
        azure_queues = _queue_service(config)
        if azure_queues is not None:
            opened.push_async_callback(azure_queues.close)
        blobs = await open_blob_store(config)
        opened.push_async_callback(blobs.close)
        store = await open_store(config.store_url)
        opened.push_async_callback(store.close)
        coordinator = await _serve_over(
            config, clock, metrics, azure_queues, blobs, store, directory, unrestricted
        )
        opened.pop_all()  # open until _close
        return coordinator


async def _serve_over(
    config: Config,
    clock: Callable[[], int],
    metrics: ServiceMetrics,
    azure_queues: QueueService | None,
    blobs: BlobStore,
    store: Store,
    directory: ClientDirectory,
    unrestricted: bool,
) -> Coordinator:
    """The services over the open queue layer, blob store and store (see :func:`_open`)."""
    cipher = Cipher(load_key(value=config.encryption_key, path=config.encryption_key_file))
    await cipher.check_against(store)
    await directory.attach(store, cipher)
    artifacts = ArtifactService(
        store=store, blobs=blobs, clock=clock, publish_events=config.pulse_url is not None
    )
    service = TaskService(
        store=store,
        hints=azure_queues,
        timing=Timing(
            claim_timeout_ms=config.claim_timeout_ms, retry_delay_base_ms=config.retry_delay_base_ms
        ),
        max_deadline_ms=config.max_deadline_ms,
        clock=clock,
        metrics=metrics,
        publish_events=config.pulse_url is not None,
    )
    events = publisher_process = None
    if config.pulse_url is not None:
        publisher = PulsePublisher(config.pulse_url)
        try:
            await publisher.check()
        except BrokerRefused as error:
            raise ConfigurationError(
                f"COORDINATOR_PULSE_URL={publisher.name}: {error}; fix the URL (host, user, "
                "password) or unset it to publish nothing"
            ) from None
        if config.pulse_in_process:
            events = EventOutbox(store=store, publisher=publisher, metrics=metrics, clock=clock)
        else:
            await publisher.close()  # checked; the child connects on its own
            publisher_process = PublisherProcess(config, metrics)
    workers = WorkerService(store=store, clock=clock)
    # Before the first request: a quarantined worker must not claim in the first second, nor
    # a paused or limited queue be claimed from.
    await workers.refresh_quarantines()
    controls = QueueControlService(store=store, service=service, metrics=metrics, clock=clock)
    await controls.refresh()
    dispatch = WorkDispatch(
        service=service,
        azure_queues=azure_queues,
        controls=controls,
        claim_work_timeout_s=config.claim_work_timeout_ms / 1000,
    )
    await dispatch.start()
    creates = CreatePolicy(service=service, workers=workers)
    inbox = InboxService(
        store=store,
        create_task=HookTasks(creates, whose="The scopes of the client the inbox row names"),
        scopes_of=_inbox_scopes(directory, clock, unrestricted=unrestricted),
        metrics=metrics,
    )
    await inbox.listen()
    return Coordinator(
        config=config,
        store=store,
        service=service,
        azure_queues=azure_queues,
        artifacts=artifacts,
        management=TaskManagement(
            service=service,
            store=store,
            artifacts=artifacts,
            ttls=ResolvedTTLs(completed_ms=config.completed_ttl_ms, failed_ms=config.failed_ttl_ms),
        ),
        dispatch=dispatch,
        workers=workers,
        hooks=HookService(
            store=store,
            create_task=HookTasks(creates),
            clock=clock,
            metrics=metrics,
            publish_events=config.pulse_url is not None,
        ),
        auth=AuthService(
            store=store,
            cipher=cipher,
            directory=directory,
            clock=clock,
            publish_events=config.pulse_url is not None,
        ),
        index=IndexService(store=store, clock=clock),
        secrets=SecretService(store=store, cipher=cipher, clock=clock),
        purge_cache=PurgeCacheService(store=store, clock=clock),
        controls=controls,
        claims=ClaimPolicy(service=service, dispatch=dispatch, controls=controls, workers=workers),
        creates=creates,
        inbox=inbox,
        metrics=metrics,
        events=events,
        publisher_process=publisher_process,
    )


def _inbox_scopes(
    directory: ClientDirectory, clock: Callable[[], int], *, unrestricted: bool
) -> ScopesOf:
    """What the client an inbox row names holds, as its createTask request would."""

    def scopes_of(client_id: str) -> Sequence[str] | None:
        if unrestricted:
            return UNRESTRICTED.scopes
        client = directory.lookup(client_id)
        if client is None or client.disabled:
            return None
        if client.expires is not None and client.expires < clock():
            return None
        return client.scopes

    return scopes_of


async def _close(coordinator: Coordinator, runner: Runner) -> None:
    """Stop the actors, finish the background work, and close Azure, the blob store and the
    store."""
    coordinator.inbox.stop()  # its pass waits for commits, up to a second
    await runner.stop()
    if coordinator.publisher_process is not None:
        await coordinator.publisher_process.stop()
    await coordinator.service.drain()
    await coordinator.service.run_watches.aclose()
    await coordinator.dispatch.drain()
    try:
        await coordinator.workers.flush()  # the sightings of the last second
    except Exception as error:
        log.warning("sightings not written at shutdown error=%r", error)
    if coordinator.azure_queues is not None:
        await coordinator.azure_queues.close()
    if coordinator.events is not None:
        await coordinator.events.publisher.close()
    await coordinator.artifacts.blobs.close()
    await coordinator.store.close()


def _lifespan(
    config: Config,
    *,
    clock: Callable[[], int],
    metrics: ServiceMetrics,
    authorizer: Authorizer,
    run_resolvers: bool,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The app's start-up and clean-up (see :func:`build_app` for the parameters)."""

    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        coordinator = await _open(
            config, clock, metrics, authorizer.directory, unrestricted=authorizer.unrestricted
        )
        tracer = open_tracer("queue-coordinator")
        app[keyset.TOKEN_KEY] = await coordinator.management.token_key()
        app[COORDINATOR] = coordinator
        services = ApiServices(
            tasks=coordinator.service,
            claims=coordinator.claims,
            creates=coordinator.creates,
            dispatch=coordinator.dispatch,
            workers=coordinator.workers,
            controls=coordinator.controls,
            management=coordinator.management,
            artifacts=coordinator.artifacts,
            artifact_urls=ArtifactUrls(
                key=await coordinator.artifacts.url_key(),
                public_url=config.public_url,
                max_bytes=config.artifact_max_bytes,
            ),
            hooks=coordinator.hooks,
            auth=coordinator.auth,
            index=coordinator.index,
            secrets=coordinator.secrets,
            purge_cache=coordinator.purge_cache,
            inbox=coordinator.inbox,
            authorizer=authorizer,
            deployment=config.deployment,
            tracer=tracer,
        )
        app[HANDLERS] = {handlers: handlers(services) for handlers in {p.handlers for p in PARTS}}
        runner = _runner(coordinator, enabled=run_resolvers)
        runner.start()
        if coordinator.publisher_process is not None and run_resolvers:
            coordinator.publisher_process.start()
        log.info(
            "coordinator started url=%s store=%s dispatch=%s artifacts=%s auth=%s pulse=%s "
            "tracing=%s",
            config.public_url,
            config.store_url.split("@")[-1],
            config.dispatch_mode,
            config.artifacts,
            config.auth_enabled,
            None if config.pulse_url is None else without_credentials(config.pulse_url),
            tracer is not None,
        )
        try:
            yield
        finally:
            await _close(coordinator, runner)
            if tracer is not None:
                await asyncio.to_thread(tracer.shutdown)  # exports the last spans

    return lifespan


def _add_routes(app: web.Application, config: Config, registry: CollectorRegistry) -> None:
    """Every endpoint of the tables under its prefix (``/api/queue/v1``, ``/api/hooks/v1``;
    the queue's root few at the root too), the OpenAPI document, ``/metrics`` and the
    dashboard.

    A path without placeholders answers every other method with a 405 of its own, as OpenAPI
    resolves a request to the concrete path before a templated one: ``GET
    /task-queues/counts`` is not getTaskQueue of a queue named ``counts``, and the ``Allow`` of
    ``/task-queues/counts`` is ``POST`` only.
    """
    for service in SERVICES:
        for part in service.parts:
            for endpoint in part.endpoints:
                route = endpoint.prefix + endpoint.server_route
                if endpoint.name == "openapi":
                    serve = _document_handler(config.public_url, service)
                    app.router.add_route(endpoint.method, route, serve, name=endpoint.operation_id)
                    continue
                max_body = config.max_batch_body_bytes if endpoint.batch else config.max_body_bytes
                handler = route_handler(endpoint, part.handlers, max_body=max_body)
                app.router.add_route(endpoint.method, route, handler)
                if route.endswith("/"):  # upstream's `/clients/`: the Python client strips it
                    app.router.add_route(endpoint.method, route.rstrip("/"), handler)
                if endpoint.name in ROOT_ENDPOINTS and endpoint.prefix == API_PREFIX:
                    app.router.add_route(endpoint.method, endpoint.route, handler)
    _add_method_not_allowed(app)
    app.router.add_get("/metrics", metrics_handler(registry), name="metrics")
    add_ui_routes(app)


def _document_handler(public_url: str, service: Service) -> Handler:
    """The handler answering the OpenAPI document of ``service``."""
    document = openapi.build_openapi(public_url, service)

    async def serve(request: web.Request) -> web.Response:
        return json_response(document)

    return serve


def _add_method_not_allowed(app: web.Application) -> None:
    """On each path without placeholders, after its routes, one for any other method: a 405
    naming the path's own methods (aiohttp would try the templated routes the path also
    matches, and its 405 would add their methods)."""
    endpoints = [endpoint for service in SERVICES for endpoint in service.endpoints]
    for path in {e.prefix + e.route for e in endpoints if not e.path_parameters}:
        methods: set[str] = {e.method for e in endpoints if e.prefix + e.route == path}

        async def refuse(request: web.Request, methods: set[str] = methods) -> web.Response:
            raise web.HTTPMethodNotAllowed(request.method, methods)

        app.router.add_route(hdrs.METH_ANY, path, refuse)


def _dated_by(
    clock: Callable[[], int],
) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """A response hook that sets the ``Date`` header from ``clock``."""

    async def date(request: web.Request, response: web.StreamResponse) -> None:
        response.headers[hdrs.DATE] = formatdate(clock() / 1000, usegmt=True)

    return date


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
    app = web.Application(
        middlewares=[metrics_middleware(HttpMetrics(registry)), error_middleware],
        client_max_size=max(config.max_body_bytes, config.max_batch_body_bytes),
        # auto_decompress off: an artifact upload's bytes are stored as sent (gzip or not),
        # and a Hawk payload hash covers the body as sent.
        handler_args={"max_line_size": MAX_REQUEST_LINE, "auto_decompress": False},
    )
    app.cleanup_ctx.append(
        _lifespan(
            config,
            clock=clock,
            metrics=ServiceMetrics(registry),
            # Verify credentials on the clock their certificates are issued on (the runs').
            authorizer=Authorizer.from_config(config, clock=lambda: clock() / 1000),
            run_resolvers=run_resolvers,
        )
    )
    if clock is not wall_clock:
        # Workers and producers time takenUntil and wait= by the answers' Date: it must be
        # the clock the lifecycle runs on (with the wall clock, aiohttp's own Date is).
        app.on_response_prepare.append(_dated_by(clock))
    bind(PARTS)
    _add_routes(app, config, registry)
    validation.preload(endpoint for part in PARTS for endpoint in part.endpoints)
    return app
