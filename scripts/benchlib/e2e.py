"""Row 2, end to end: create -> SDK poll -> claim -> delete hint -> report, two ways.

A ``queue-coordinator serve`` process (SQLite or PostgreSQL store, Azurite for hints) and
``workers`` separate ``queue-worker`` processes (capacity ``batch``, no-op handler
:func:`benchlib.noop.handle`, run in the worker unless :func:`measure` is asked for
``--isolation process``), the harness producing while it keeps the hint queue ``depth`` deep
(read from Azurite every 20-100 ms):

* ``e2e-<store>``: the way the SDK works by default: the producer sends createTasks
  (``create_requests`` concurrent requests, each with as many tasks as the depth has room
  for, at most ``create_batch``); the workers claim each Azure get's hints in one claimRuns,
  coalesce reports into resolveRuns and skip empty queues for a while.
* ``e2e-<store>-single``: one request per step: ``producers`` concurrent createTask calls,
  workers with ``--no-batching --empty-queue-skip 0 --polls-in-flight 1`` (claimTask per
  hint, a report per run, every priority polled every round, one get at a time).
* ``e2e-sqlite-runlog``: ``e2e-sqlite`` with the workers' run log on (the SDK's default since
  issue 25): every run also uploads its ``public/logs/live_backing.log`` (createArtifact, then
  a PUT of its gzipped lines to the coordinator's directory backend) before its report.
* ``e2e-sqlite-app``: ``e2e-sqlite`` with tasks as Python functions: each task's payload
  calls :func:`benchlib.noop_app.noop` and the workers run ``queue-worker --app
  benchlib.noop_app:app``, which routes the call and binds its arguments; the function
  returns ``None``, so the run uploads no ``result.json`` (a value would cost createArtifact
  + PUT, as the run log does in ``e2e-sqlite-runlog``).
* ``index-lag``: ``store-sqlite`` with every task indexed on completion
  (:mod:`benchlib.index`: its rate, and how soon after completing a task is found).
* ``store-<store>``: ``e2e-<store>`` under store dispatch (docs/dispatch.md): no Azurite;
  the workers, given no mode, find that pollTaskUrls answers 404 and claim through claimWork
  (batched, up to their free capacity per call), reporting through resolveRuns. The pacer
  reads the depth (claimable pending runs) from the store itself, on a connection of the
  harness, not through the coordinator.
* ``store-<store>-defaults``: ``store-<store>`` with what a deployment runs with by default:
  Hawk authentication on (a producer and a worker pool with their own clients,
  :func:`benchlib.authn.deployment_clients`), the workers' run log on, and a handler that
  logs one line (:func:`benchlib.noop.handle_logging`), so every run sends its log (in its
  report: it is small).
* ``store-<store>-events``: ``store-<store>`` with Pulse publishing on
  (``COORDINATOR_PULSE_URL`` straight to the broker :data:`benchlib.events.AMQP_URL`; the
  messages go to exchanges nobody need be bound to).
* ``store-postgres-vacuum-held``: ``store-postgres`` while a connection of the harness holds
  a transaction open (``BEGIN; SELECT txid_current()``) from before the workers start to the
  row's end, so that vacuum can clean none of the dead rows the row leaves. Its warm-up is
  what the window leaves of ``Settings.hold`` (``--hold``), so the window measures the hold's
  last seconds (45 to 60 s with the defaults).
* ``store-postgres-processes``: ``store-postgres`` with ``COORDINATOR_PROCESSES=2``: two serve
  processes on the coordinator's port (their CPU counted with the coordinator's).

Every other row but ``store-<store>-defaults`` runs its workers with ``--no-run-log``, so
that they measure hint, claim and report throughput as they did before workers uploaded run
logs, and stay comparable with earlier rounds; ``e2e-sqlite-runlog`` / ``e2e-sqlite`` is the
run log's cost. The run-log rows' handler logs a line: a run that logged nothing uploads no
log.

Latency is the create request sent -> the run's ``resolved`` time as the coordinator stored it;
throughput counts runs resolved inside the window, which opens once every worker has logged
that it started (and its process pool, under ``--isolation process``), the queue filled to its
depth has had its first task done, and the warm-up has passed. With ``latency`` (the batched
rows), the same workers then take open-loop load at 50 % and 80 % of that rate, and the row
adds pending time (createTasks sent -> the handler's start) at each (:mod:`benchlib.latency`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
import asyncpg

from benchlib import authn, azure_rest, latency, noop_app
from benchlib.common import (
    PYTHON,
    CpuMeter,
    DepthPacer,
    Row,
    Settings,
    azurite_group,
    latency_fields,
    metered_window,
    metric_samples,
    own_process,
    pids,
    postgres_backends,
    serve_group,
)
from benchlib.coordproc import (
    PROVISIONER_ID,
    Coordinator,
    NewTask,
    StoreKind,
    TaskClient,
    coordinator,
    new_task_id,
    profiled,
    render_profile,
)
from benchlib.events import AMQP_URL, broker_processes
from benchlib.index import LagSampler
from benchlib.noop import STARTS_ENV
from coordinator.azure.names import queue_name
from coordinator.domain.task_queues import priority_level
from devharness.azurite import AzuriteProcess
from devharness.processes import child_env, end_processes, spawn
from devharness.waiting import WaitTimeout, wait_until
from worker_sdk.options import Isolation

WORKER_GROUP = "bench"
"""The ``--worker-group`` of every worker."""


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    """How the row's ``queue-worker`` processes run.

    :param batching: claimRuns and resolveRuns (else one request per step, see above).
    :param isolation: ``queue-worker --isolation``.
    :param run_log: upload each run's log (else ``--no-run-log``), and run the handler that
        logs a line (:func:`benchlib.noop.handle_logging`), so that there is one to upload.
    :param app: serve :mod:`benchlib.noop_app` with ``--app`` (the tasks call its function).
    :param latency: measure pending time under load after the rate.
    """

    batching: bool
    isolation: Isolation = "none"
    run_log: bool = False
    app: bool = False
    latency: bool = False


async def run(
    settings: Settings,
    azurite: AzuriteProcess | None,
    store: StoreKind,
    *,
    batching: bool,
    run_log: bool = False,
    app: bool = False,
) -> Row:
    """One row under Azure dispatch."""
    label = LABELS[store]
    if app:
        row = Row(
            key=f"e2e-{store}-app",
            title=f"end to end, {label} store, batching, tasks as Python functions: createTasks "
            "-> queue-worker --app: claimRuns -> call (returns None: no result.json) -> "
            "resolveRuns",
            unit="tasks/s",
        )
    elif run_log:
        row = Row(
            key=f"e2e-{store}-runlog",
            title=f"end to end, {label} store, batching, run log on: createTasks -> SDK "
            "poll/claimRuns/delete -> resolveRuns carrying the log",
            unit="tasks/s",
        )
    elif batching:
        row = Row(
            key=f"e2e-{store}",
            title=f"end to end, {label} store, batching: createTasks -> SDK poll/claimRuns/"
            "delete -> resolveRuns",
            unit="tasks/s",
        )
    else:
        row = Row(
            key=f"e2e-{store}-single",
            title=f"end to end, {label} store, one request per step: createTask -> SDK "
            "poll/claimTask/delete -> reportCompleted",
            unit="tasks/s",
        )
    return await measure(
        settings,
        azurite,
        store,
        row,
        batching=batching,
        run_log=run_log,
        app=app,
        latency=batching and not (run_log or app),
    )


StoreVariant = Literal["bare", "defaults", "events", "vacuum-held", "processes"]
"""The store-dispatch rows: ``store-<store>`` (bare) and ``store-<store>-<variant>``."""

LABELS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}

_STORE_TITLES: dict[StoreVariant, str] = {
    "bare": ": createTasks -> SDK claimWork (batched) -> resolveRuns",
    "defaults": ", the defaults on (Hawk auth, run log, a handler that logs a line): createTasks "
    "-> SDK claimWork -> log a line -> resolveRuns carrying the log",
    "events": ", Pulse publishing on: createTasks -> SDK claimWork -> resolveRuns (+ 4 messages)",
    "vacuum-held": ", a transaction held open for the warm-up and the window (--hold s in "
    "all): createTasks -> SDK claimWork -> resolveRuns",
    "processes": ", two serve processes on one port: createTasks -> SDK claimWork (batched) -> "
    "resolveRuns",
}

_STORE_ENV: dict[StoreVariant, dict[str, str]] = {
    "events": {"COORDINATOR_PULSE_URL": AMQP_URL},
    "processes": {"COORDINATOR_PROCESSES": "2"},
}
"""The coordinator's further settings of a variant."""


async def run_store(settings: Settings, store: StoreKind, variant: StoreVariant) -> Row:
    """A store-dispatch row (the module's docstring says what each variant adds)."""
    row = Row(
        key=f"store-{store}" + ("" if variant == "bare" else f"-{variant}"),
        title=f"end to end, {LABELS[store]} store, store dispatch{_STORE_TITLES[variant]}",
        unit="tasks/s",
    )
    defaults = variant == "defaults"
    if defaults:
        settings = dataclasses.replace(settings, auth=True)
    elif variant == "vacuum-held":
        # the dead rows a claim may have to pass grow with the time held
        warmup = max(settings.warmup, settings.hold - settings.duration)
        settings = dataclasses.replace(settings, warmup=warmup)
    return await measure(
        settings,
        None,
        store,
        row,
        batching=True,
        run_log=defaults,
        latency=variant in ("bare", "defaults", "processes"),
        coordinator_env=_STORE_ENV.get(variant, {}),
        hold_transaction=variant == "vacuum-held",
    )


async def run_indexed(settings: Settings) -> Row:
    """The ``index-lag`` row: ``store-sqlite``, each task routed to an index path of its own."""
    row = Row(
        key="index-lag",
        title="end to end, SQLite store, store dispatch, every task indexed on completion: "
        "createTasks -> SDK claimWork -> resolveRuns (+ its index entry)",
        unit="tasks/s",
    )
    return await measure(settings, None, "sqlite", row, batching=True, indexed=True)


async def measure(
    settings: Settings,
    azurite: AzuriteProcess | None,
    store: StoreKind,
    row: Row,
    *,
    batching: bool,
    isolation: Isolation = "none",
    run_log: bool = False,
    app: bool = False,
    latency: bool = False,
    indexed: bool = False,
    coordinator_env: Mapping[str, str] | None = None,
    hold_transaction: bool = False,
) -> Row:
    """Fill ``row`` (its key names the work directory) with one end-to-end run whose workers
    run as :class:`WorkerOptions` says; without ``azurite``, under store dispatch.
    ``indexed``: each task has a route ``index.<path>`` of its own, and a
    :class:`~benchlib.index.LagSampler` follows some of them. ``coordinator_env``: further
    ``COORDINATOR_*`` variables. ``hold_transaction`` (PostgreSQL): a transaction stays open
    on the row's database from before the workers start to the end (:func:`_held_open`)."""
    options = WorkerOptions(
        batching=batching, isolation=isolation, run_log=run_log, app=app, latency=latency
    )
    workdir = settings.workdir / row.key
    profile = workdir / "coordinator.pyisession" if settings.profile else None
    async with (
        coordinator(
            settings,
            store=store,
            workdir=workdir,
            azure_connection_string=None if azurite is None else azurite.connection_string,
            profile=profile,
            env={
                "COORDINATOR_DISPATCH": "store" if azurite is None else "azure",
                **(coordinator_env or {}),
            },
        ) as running,
        AsyncExitStack() as stack,
    ):
        if hold_transaction:
            await stack.enter_async_context(_held_open(running, row))
        await _measure(
            settings,
            azurite,
            running,
            store,
            row,
            options,
            indexed=indexed,
            broker="COORDINATOR_PULSE_URL" in (coordinator_env or {}),
        )
    if settings.profile:
        row.notes.append(f"profiled under pyinstrument (slower): {workdir}/*.txt")
    return row


def _worker_command(
    settings: Settings,
    coordinator: Coordinator,
    worker_type: str,
    i: int,
    workdir: Path,
    options: WorkerOptions,
) -> list[str]:
    command = [PYTHON]
    if settings.profile and i == 0:
        command += profiled(workdir / "worker-0.pyisession")
    return [
        *command,
        "-m",
        "worker_sdk.cli",
        f"--root-url={coordinator.url}",
        f"--provisioner-id={PROVISIONER_ID}",
        f"--worker-type={worker_type}",
        f"--worker-group={WORKER_GROUP}",
        f"--worker-id=worker-{i}",
        f"--capacity={settings.batch}",
        f"--isolation={options.isolation}",
        "--grace-period=5",
        f"--log-level={settings.worker_log_level}",
        *([] if options.run_log else ["--no-run-log"]),
        *(
            []
            if options.batching
            else ["--no-batching", "--empty-queue-skip=0", "--polls-in-flight=1"]
        ),
        *(["--app", "benchlib.noop_app:app"] if options.app else [_handler(options)]),
    ]


def _handler(options: WorkerOptions) -> str:
    return "benchlib.noop:handle_logging" if options.run_log else "benchlib.noop:handle"


async def _measure(
    settings: Settings,
    azurite: AzuriteProcess | None,
    running: Coordinator,
    store: StoreKind,
    row: Row,
    options: WorkerOptions,
    *,
    indexed: bool,
    broker: bool,
) -> None:
    workdir = settings.workdir / row.key
    worker_type = f"wt-{uuid.uuid4().hex[:8]}"
    task_group_id = new_task_id()
    starts_dir = workdir / "starts"
    starts_dir.mkdir(parents=True, exist_ok=True)
    env = child_env(**{STARTS_ENV: str(starts_dir)})
    for credential in ("CLIENT_ID", "ACCESS_TOKEN", "CERTIFICATE"):
        env.pop(f"TASKCLUSTER_{credential}", None)
    producing = running
    if running.credentials is not None:
        for_producer, for_workers = authn.deployment_clients(
            running.clients_file,
            PROVISIONER_ID,
            worker_type,
            WORKER_GROUP,
        )
        producing = dataclasses.replace(running, credentials=for_producer)
        env["TASKCLUSTER_CLIENT_ID"] = for_workers.client_id
        env["TASKCLUSTER_ACCESS_TOKEN"] = for_workers.access_token
    workers = [
        await spawn(
            _worker_command(settings, running, worker_type, i, workdir, options),
            env=env,
            log=workdir / f"worker-{i}.log",
        )
        for i in range(settings.workers)
    ]
    if settings.worker_log_level in ("DEBUG", "INFO"):
        # The window measures started workers (and, under process isolation, their
        # pre-forked pools), not their start-up, which a loaded machine can stretch past
        # the warm-up.
        await _workers_started(settings, workdir, options)
    groups = {
        **({} if azurite is None else {"azurite": azurite_group(azurite.port)}),
        "coordinator": serve_group(running.process),
        "publisher": serve_group(running.process, publisher=True),
        "workers": pids(*workers, descendants=True),
        "producer": own_process,
    }
    if broker:
        groups["rabbitmq"] = broker_processes
    if store == "postgres":
        groups["postgres"] = postgres_backends(running.database)
    meter = CpuMeter(groups)
    sent: dict[str, float] = {}
    failures = 0
    try:
        connector = aiohttp.TCPConnector(limit=settings.producers + 8)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            _depth_gauge(session, azurite, running, worker_type, settings.priority) as gauge,
        ):
            tasks = TaskClient(session, running)
            creating = TaskClient(session, producing)
            sampler = LagSampler(session, running) if indexed else None
            pacer = DepthPacer(gauge, target=settings.depth)
            work_payload = noop_app.PAYLOAD if options.app else None

            def new_tasks(count: int, payload: dict[str, Any] | None) -> list[NewTask]:
                return tasks.new_tasks(
                    count,
                    worker_type=worker_type,
                    task_group_id=task_group_id,
                    priority=settings.priority,
                    payload=payload,
                )

            await _primed(
                settings,
                tasks,
                creating,
                worker_type,
                new_tasks(settings.depth + settings.workers * settings.batch, work_payload),
                row,
            )
            begin = time.monotonic()
            window_start = begin + settings.warmup
            stop_at = window_start + settings.duration

            async def producer() -> None:
                nonlocal failures
                while count := await pacer.acquire_many(
                    stop_at, settings.create_batch if options.batching else 1
                ):
                    items = new_tasks(count, work_payload)
                    if sampler is not None:
                        items = [(t, {**d, "routes": [sampler.route(t)]}) for t, d in items]
                    now = time.time()
                    sent.update((task_id, now) for task_id, _ in items)
                    try:
                        await creating.send(items, batch=options.batching)
                    except (aiohttp.ClientError, TimeoutError, RuntimeError):
                        failures += 1
                        for task_id, _ in items:
                            sent.pop(task_id, None)
                        await asyncio.sleep(0.1)
                    finally:
                        pacer.release(count)

            reading = asyncio.create_task(pacer.run(stop_at))
            measured = asyncio.create_task(metered_window(meter, window_start, stop_at))
            counted = asyncio.create_task(
                _requests_in_window(session, running, window_start, stop_at)
            )
            sampling = None if sampler is None else asyncio.create_task(sampler.run(sent, stop_at))
            producers = settings.create_requests if options.batching else settings.producers
            await asyncio.gather(*(producer() for _ in range(producers)))
            wall_start, wall_end = await measured
            requests = await counted
            await reading
            row.depth_mean, row.depth_max = pacer.depth(window_start, stop_at)
            # Let the workers finish what was created, so late tasks count in the latency.
            left = (-1, -1)

            async def drained() -> bool:
                nonlocal left
                left = await tasks.counts(worker_type)
                return left == (0, 0)

            try:
                await wait_until(drained, within=settings.drain, what="the drain", interval=0.2)
            except WaitTimeout:
                row.notes.append(f"not drained: pending, running = {left}")
            resolved = await tasks.resolved_times(task_group_id)
            published = await _events_published(session, running)
            if published:
                row.notes.append(
                    f"{published:,.0f} Pulse messages confirmed by the broker by the drain's end"
                )
            # before the loads: the rate is what they are shares of
            completed = _rate(row, resolved, wall_start, wall_end)
            if sampler is not None and sampling is not None:
                await sampling
                sampler.fill(row, completed)
            if options.latency:

                async def send(sent_at: float, count: int) -> None:
                    await creating.create_in_batches(
                        new_tasks(count, {"sentAt": sent_at}), settings.create_batch
                    )

                await latency.under_load(settings, row, send, starts_dir)
    finally:
        await end_processes(workers, wait=30.0 if settings.profile else 10.0)
        if settings.profile:
            render_profile(workdir / "worker-0.pyisession")
    latency_fields(
        row,
        [
            completed[task_id] - at
            for task_id, at in sent.items()
            if wall_start <= at < wall_end and task_id in completed
        ],
    )
    meter.fill(row)
    if row.count and requests:
        row.notes.append(
            "coordinator requests per task in the window, and their mean time to answer: "
            + ", ".join(
                f"{name} {r.count / row.count:.3f} ({r.seconds / r.count * 1000:.1f} ms)"
                for name, r in requests.items()
            )
        )
    not_completed = sum(1 for state, _ in resolved.values() if state != "completed")
    if not_completed:
        row.notes.append(f"{not_completed} tasks not completed at the end")
    if failures:
        row.notes.append(f"{failures} create requests failed")


@asynccontextmanager
async def _held_open(running: Coordinator, row: Row) -> AsyncIterator[None]:
    """A transaction open on the row's PostgreSQL database while the context lasts, as a
    forgotten session leaves one: vacuum must keep every row version it began before. The
    row's note says how long it was held and the dead row versions the busiest tables had
    then (the statistics lag by up to a second)."""
    connection = await asyncpg.connect(running.store_url)
    try:
        transaction = connection.transaction()
        await transaction.start()
        txid = await connection.fetchval("SELECT txid_current()")
        began = time.monotonic()
        yield
        held = time.monotonic() - began
        dead = await connection.fetch(
            "SELECT relname, n_dead_tup FROM pg_stat_user_tables ORDER BY n_dead_tup DESC LIMIT 3"
        )
        await transaction.rollback()
        row.notes.append(
            f"transaction {txid} held open {held:.0f} s (warm-up, window, drain); dead row "
            "versions at the end: " + ", ".join(f"{r['relname']} {r['n_dead_tup']:,}" for r in dead)
        )
    finally:
        await connection.close()


async def _events_published(session: aiohttp.ClientSession, running: Coordinator) -> float:
    """The Pulse messages the broker confirmed to the coordinator so far."""
    return sum(
        sample.value
        for sample in await metric_samples(session, f"{running.url}/metrics")
        if sample.name == "queue_events_published_total"
    )


@dataclass(frozen=True, kw_only=True)
class _Requests:
    """API requests of one method name: how many, and their total time to answer (s)."""

    count: float
    seconds: float


async def _requests_in_window(
    session: aiohttp.ClientSession, running: Coordinator, start: float, stop: float
) -> dict[str, _Requests]:
    """The API requests the coordinator answered between monotonic ``start`` and ``stop``, by
    method name (its ``http_requests_total`` and ``http_request_duration_seconds``), the most
    frequent first."""
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    before = await _request_totals(session, running)
    await asyncio.sleep(max(0.0, stop - time.monotonic()))
    after = await _request_totals(session, running)
    zero = _Requests(count=0.0, seconds=0.0)
    window = {
        name: _Requests(
            count=total.count - before.get(name, zero).count,
            seconds=total.seconds - before.get(name, zero).seconds,
        )
        for name, total in after.items()
    }
    return dict(
        sorted(((n, r) for n, r in window.items() if r.count), key=lambda item: -item[1].count)
    )


async def _request_totals(
    session: aiohttp.ClientSession, running: Coordinator
) -> dict[str, _Requests]:
    counts: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for sample in await metric_samples(session, f"{running.url}/metrics"):
        name = sample.labels.get("name", "?")
        if name == "metrics":
            continue
        if sample.name == "http_requests_total":
            counts[name] = counts.get(name, 0.0) + sample.value
        elif sample.name == "http_request_duration_seconds_sum":
            seconds[name] = seconds.get(name, 0.0) + sample.value
    return {
        name: _Requests(count=count, seconds=seconds.get(name, 0.0))
        for name, count in counts.items()
    }


def _rate(
    row: Row,
    resolved: dict[str, tuple[str, float | None]],
    wall_start: float,
    wall_end: float,
) -> dict[str, float]:
    """Set the row's window, count and rate from the runs resolved ``completed`` inside the
    window; the completed tasks' resolved times."""
    completed = {
        task_id: at
        for task_id, (state, at) in resolved.items()
        if state == "completed" and at is not None
    }
    row.window = wall_end - wall_start
    row.count = sum(1 for at in completed.values() if wall_start <= at < wall_end)
    row.rate = row.count / row.window
    return completed


FIRST_DONE_WITHIN = 60.0
"""How long :func:`_primed` waits for the first of its tasks to be done (seconds)."""


async def _primed(
    settings: Settings,
    tasks: TaskClient,
    creating: TaskClient,
    worker_type: str,
    items: list[NewTask],
    row: Row,
) -> None:
    """Queue ``items`` (the depth and a full round of every worker: what the workers take
    first leaves the depth) and wait until the first of them is done: the warm-up, then the
    window, start with the workers at work. A worker that finds its queue empty backs off
    (about 1.3 s), and on a loaded machine one started before any task was still paused when
    a fixed window had closed (a smoke run's e2e-postgres-single counted nothing; so did one
    primed with the depth alone, which the workers' first round emptied). The row's producers
    keep the depth from then on; these tasks are the row's work like theirs, outside its
    latency."""
    await creating.create_in_batches(items, settings.create_batch)

    async def one_done() -> bool:
        pending, running = await tasks.counts(worker_type)
        return pending + running < len(items)

    try:
        await wait_until(one_done, within=FIRST_DONE_WITHIN, what="the first task")
    except WaitTimeout:
        row.notes.append(f"no task done within {FIRST_DONE_WITHIN:.0f} s of the first ones")


async def _workers_started(settings: Settings, workdir: Path, options: WorkerOptions) -> None:
    """Wait until every worker's log (at INFO) says it started, and under process isolation
    that it started its whole pool of handler processes."""
    pool = settings.batch if options.isolation == "process" else 0

    def started() -> bool:
        for i in range(settings.workers):
            log = workdir / f"worker-{i}.log"
            text = log.read_text() if log.exists() else ""
            if "worker started" not in text or text.count("handler process started") < pool:
                return False
        return True

    await wait_until(started, within=120, what="the workers to start", interval=0.1)


_DEPTH_SLACK_MS = 200
"""How much earlier than its last reading's oldest claimable run (or, if it found none, the
harness's clock) the store-dispatch depth gauge counts from: a create's write stamps its runs'
``visible_at`` before it commits, so a run may become visible after a reading with an earlier
``visible_at`` than the reading's oldest."""


class _DepthFloor:
    """Where the store-dispatch depth gauge's next count starts (a ``visible_at``): a little
    before the oldest claimable run of the last reading. No claimable run is older, but for
    one whose create committed late (:data:`_DEPTH_SLACK_MS`): a run is made visible at its
    ``visible_at`` and stays claimable until a claim takes it."""

    def __init__(self) -> None:
        self.since = 0

    def read(self, oldest: int | None) -> None:
        """After a count whose oldest claimable run was made visible at ``oldest``."""
        if oldest is None:
            oldest = int(time.time() * 1000)
        self.since = max(self.since, oldest - _DEPTH_SLACK_MS)


@asynccontextmanager
async def _depth_gauge(
    session: aiohttp.ClientSession,
    azurite: AzuriteProcess | None,
    running: Coordinator,
    worker_type: str,
    priority: str,
) -> AsyncIterator[Callable[[], Awaitable[int]]]:
    """What the pacer reads every 20-100 ms: the hint queue's depth from Azurite (pendingTasks
    is cached for 20 s, so the harness names the queue itself, as the coordinator does), or
    under store dispatch the claimable pending runs, counted in the store (from its partial
    index) on a connection of the harness, so that the coordinator serves none of the reads.

    The count starts at the oldest claimable run of the last reading (:class:`_DepthFloor`):
    a count from the start of the index would walk every dead entry the row's claims left,
    which under ``store-postgres-vacuum-held`` made the harness's own reads half of the
    database's work; from a fixed 5 s back, still a fifth (docs/performance-history.md)."""
    if azurite is not None:
        name = queue_name(running.queue_prefix, PROVISIONER_ID, worker_type, priority)
        hints = azure_rest.RestQueue(
            session, azurite.endpoint, name, azure_rest.queue_sas(name, "r")
        )
        yield hints.count
        return
    query = (
        "SELECT count(*), min(visible_at) FROM tasks WHERE provisioner_id = {p} "
        "AND worker_type = {w} AND pending_priority = {level} AND visible_at >= {since}"
    )
    level = priority_level(priority)
    floor = _DepthFloor()

    def counted(count: int, oldest: int | None) -> int:
        floor.read(oldest)
        return count

    if running.store_url.startswith("sqlite:"):
        path = running.store_url.removeprefix("sqlite:///")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        sql = query.format(p="?", w="?", level="?", since="?")

        def count() -> int:
            args = (PROVISIONER_ID, worker_type, level, floor.since)
            return counted(*conn.execute(sql, args).fetchone())

        async def sqlite_depth() -> int:
            return await asyncio.to_thread(count)

        try:
            yield sqlite_depth
        finally:
            conn.close()
        return
    pg = await asyncpg.connect(running.store_url)
    sql = query.format(p="$1", w="$2", level="$3", since="$4")

    async def postgres_depth() -> int:
        row = await pg.fetchrow(sql, PROVISIONER_ID, worker_type, level, floor.since)
        assert row is not None
        return counted(int(row[0]), row[1])

    try:
        yield postgres_depth
    finally:
        await pg.close()
