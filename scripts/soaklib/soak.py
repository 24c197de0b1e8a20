"""One soak run: start everything, run the chaos phase, drain, settle, check.

Phases, each bounded:

1. **chaos** (``seconds``): tasks are created at ``rate``; a random worker (mostly one that
   is running a handler) is SIGKILLed (or SIGTERMed) every ``kill_interval`` on average and
   restarted as a new incarnation; the coordinator is restarted ``coordinator_restarts``
   times (SIGKILL first, then SIGTERM, alternating; down for up to a claim timeout and a bit
   so running claims expire), Azurite is restarted ``azurite_restarts`` times (graceful
   stop, same port, persistent ``--location``) and SIGKILLed ``azurite_kills`` times (a
   crash: what it changed since its last save, every 5 s, is lost; restarted on the same
   port and ``--location``); duplicate hints of live runs and garbage messages are put into
   the queues.
2. **drain** (at most ``drain``): no more chaos; the workers go on until every task is
   resolved. A hint Azurite lost comes back through the coordinator's reconciler (every
   ``reconcile_interval``), so the drain waits long enough for it.
3. **settle** (at most ``settle``): the workers go on until no soak queue has a visible
   message (stale duplicates are fetched, refused and deleted by the workers).
4. **check**: workers are stopped, the final statuses, the journals and every message left
   in the queues are read, and :mod:`soaklib.checks` applies the invariants.

Under ``--everything`` (:attr:`Settings.everything`) the store is a private PostgreSQL
cluster (:func:`devharness.postgres.throwaway_cluster`) under two coordinator replicas (store
dispatch; the soak's client and the workers use both), the coordinators publish Pulse events
through a :class:`devharness.tcp_proxy.TcpProxy` in front of the broker, a hook fires every
few seconds, a share of the tasks are function calls (:mod:`soaklib.functions`) and every run
uploads an artifact and its run log. The chaos adds broker cuts (the proxy stops listening
and drops its connections for a few seconds) and PostgreSQL restarts (``pg_ctl restart -m
fast`` and a crash, ``stop -m immediate`` then start, in turn); the coordinator restarts are
SIGKILLs of one replica at a time. The checks add the events (:mod:`soaklib.events` listens
to the broker directly), the hook's due times, the function tasks' retries and the
artifacts.

Every wait is bounded. A child that has to be SIGKILLed after not exiting on SIGTERM is a
``stuck-process`` violation, one still running when the soak ends a ``process-left``; a worker
slot's restarts are exclusive (:class:`soaklib.processes.Fleet`), and two incarnations of a
slot alive at once would be a ``slot-overlap``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import random
import re
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import slugid

from coordinator.service.clients_file import ensure_root_client
from devharness.azurite import AzuriteProcess
from devharness.postgres import Cluster, postgres_bindir, throwaway_cluster
from devharness.processes import KILL_WAIT, ServeProcess, child_env, processes_mentioning
from devharness.rss import MIB, Curve, Growth, RssRecorder
from devharness.tasks import task_definition
from devharness.tcp_proxy import TcpProxy
from hawk_signing import Credentials
from soaklib import checks, functions
from soaklib.api import Api, ApiError
from soaklib.events import EventLog
from soaklib.handler import ARTIFACT, LOG_LINE, artifact_text
from soaklib.hints import Hints, QueueCensus
from soaklib.journal import read_journals
from soaklib.processes import (
    PROVISIONER_ID,
    STOP_WAIT,
    WORKER_TYPE,
    Fleet,
    worker_command,
)
from soaklib.settings import Settings

log = logging.getLogger("soak")

PRIORITIES = ("high", "low", "lowest")
"""Three of the seven queues get tasks, so workers walk several queues in order."""
DOWN = (0.3, 2.0)
"""How long a killed worker's slot stays empty (seconds, drawn uniformly)."""
RESTARTS_WAIT = STOP_WAIT + KILL_WAIT + DOWN[1] + 30.0
"""The longest the worker restarts still going at the end of the chaos may take."""
COORDINATOR = "coordinator"
"""The coordinator's name among the processes whose RSS is sampled (the workers go by their
workerIds, ``soak-w<slot>-<incarnation>``)."""
WORKER_PREFIX = "soak-w"
RSS_INTERVAL = 5.0
"""Seconds between two RSS samples."""
SOAK_METADATA = {
    "name": "soak task",
    "description": "created by scripts/soak",
    "owner": "soak@example.com",
    "source": "https://example.com/soak",
}
"""The metadata of every soak task."""
HOOK_GROUP = "soak"
"""The hookGroupId of the ``--everything`` hook."""
STORE_SLACK = (1.0, 10.0)
"""Seconds before a PostgreSQL restart began and after it ended during which a hook due time
may be skipped (the coordinators' connections are re-made on their next use)."""
ARTIFACTS_READ = 300
"""How many completed runs' artifacts and run logs ``--everything`` reads back at most (a
random choice: reading every one of a long soak's would take minutes)."""
EVENTS_WAIT = 120.0
"""How long the check waits for the last Pulse messages (published from the outbox)."""
HOOKS_API = "/api/hooks/v1"
"""The hooks service's path (the soak's client calls the queue's unless told)."""
RUN_LOG = "public/logs/live_backing.log"
"""The run log's artifact name (Taskcluster's), which the workers upload."""


class SetupError(Exception):
    """The soak cannot run here; the message says why and what to do."""


def watched_growths(
    rss: RssRecorder, warm_up: float
) -> dict[str, tuple[Curve | None, Growth | None]]:
    """What the soak holds to ``--max-rss-growth`` and reports, by label: the longest-lived
    coordinator's curve and growth after ``warm_up``, and the worker's that grew most."""
    coordinator = rss.longest(COORDINATOR)
    worker = rss.largest_growth(WORKER_PREFIX, warm_up)
    return {
        "coordinator": (coordinator, coordinator.growth(warm_up) if coordinator else None),
        "worker (grew most)": worker or (None, None),
    }


@dataclass(kw_only=True)
class Result:
    settings: Settings
    seed: int
    workdir: Path
    findings: checks.Findings
    timings: dict[str, float]
    events: list[str] = field(default_factory=list)
    census: QueueCensus | None = None
    rss: RssRecorder | None = None

    @property
    def ok(self) -> bool:
        return not self.findings.violations


class Soak:
    def __init__(self, settings: Settings, seed: int, workdir: Path) -> None:
        self.settings = settings
        self.seed = seed
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.events: list[str] = []
        self.counts: dict[str, int] = {}
        self.extra_violations = checks.Findings()
        self.created: dict[str, str] = {}
        """taskId -> priority, for every createTask answered 200."""
        self.group_id: str = slugid.nice()
        self.started = time.monotonic()
        self.chaos_end = self.started + settings.seconds
        self.background: set[asyncio.Task[None]] = set()
        self.azurite_killed: list[float] = []
        """Epoch times of the Azurite SIGKILLs."""
        self.coordinator_locks = [asyncio.Lock() for _ in range(settings.replicas)]
        """Held by whoever stops or starts a coordinator (the service loop, the monitor)."""
        self.function_kinds: dict[str, str] = {}
        """taskId -> kind (:data:`soaklib.functions.FUNCTIONS`) of the function tasks."""
        self.store_outages: list[tuple[float, float]] = []
        """Epoch times (from, to) when PostgreSQL was being restarted."""
        self.route = f"soak.{uuid.uuid4().hex[:12]}"
        """The route every ``--everything`` task carries (the Pulse listener binds it)."""
        self.hook_group_id = slugid.nice()
        """The taskGroupId of the hook's tasks."""
        self.hook_id = f"h{uuid.uuid4().hex[:8]}"
        self.hook_window: tuple[float, float] | None = None
        """Epoch times between which the hook's due times are checked."""
        self.cluster: Cluster | None = None
        self.proxy: TcpProxy | None = None
        self.event_log: EventLog | None = None

    # --- bookkeeping ---------------------------------------------------------------------

    def event(self, text: str) -> None:
        line = f"{time.monotonic() - self.started:7.1f}s {text}"
        self.events.append(line)
        log.info("%s", line)

    def count(self, name: str, by: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + by

    def chaos_left(self) -> float:
        return self.chaos_end - time.monotonic()

    async def pause(self, seconds: float) -> None:
        """Sleep, but never past the end of the chaos phase."""
        await asyncio.sleep(max(0.0, min(seconds, self.chaos_left())))

    def spawn(self, coroutine: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # --- the run -------------------------------------------------------------------------

    async def run(self) -> Result:
        async with contextlib.AsyncExitStack() as stack:
            store_url = self.settings.store_url
            pulse_url = self.settings.pulse_url
            if self.settings.everything:
                bindir = postgres_bindir()
                if bindir is None:
                    raise SetupError(
                        "--everything needs PostgreSQL's server programs (initdb, pg_ctl) on "
                        "PATH or in /usr/lib/postgresql/<version>/bin: install the server "
                        "package (postgresql)"
                    )
                self.cluster = await stack.enter_async_context(throwaway_cluster(bindir))
                stack.push_async_callback(self._keep_postgres_log, self.cluster)
                store_url = self.cluster.dsn
                assert pulse_url is not None  # parse_args sets it under --everything
                self.proxy = TcpProxy.in_front_of(pulse_url, default_port=5672)
                await self.proxy.start()
                stack.push_async_callback(self.proxy.close)
                self.event_log = EventLog(pulse_url, self.route)
                await self.event_log.start()
                stack.push_async_callback(self.event_log.close)
                pulse_url = self.proxy.url_through(pulse_url)
            result = await self._run(store_url, pulse_url)
        if self.cluster is not None:
            left = processes_mentioning(str(self.cluster.data))
            if left:
                result.findings.add(
                    "process-left", f"PostgreSQL processes still running: {sorted(left)}"
                )
        return result

    async def _keep_postgres_log(self, cluster: Cluster) -> None:
        """Copy the private cluster's log into the workdir (the cluster's directory goes)."""
        with contextlib.suppress(OSError):
            shutil.copyfile(cluster.log, self.workdir / "postgres.log")

    def _serve_process(
        self,
        replica: int,
        store_url: str,
        pulse_url: str | None,
        azure_connection_string: str,
        shared: dict[str, str],
    ) -> ServeProcess:
        """Replica ``replica``'s coordinator; the replicas share the data directory (its
        encryption key and artifacts), the store and everything in ``shared``."""
        name = "coordinator.log" if replica == 0 else f"coordinator-{replica}.log"
        process = ServeProcess(
            data_dir=self.workdir / "coordinator",
            store_url=store_url,
            clients_file=self.workdir / "clients.json",
            log=self.workdir / name,
            azure_connection_string=azure_connection_string,
            interpreter_args=self._memtrace() if replica == 0 else (),
        )
        process.env.update(shared)
        if pulse_url:
            process.env["COORDINATOR_PULSE_URL"] = pulse_url
        return process

    async def _run(self, store_url: str | None, pulse_url: str | None) -> Result:
        settings = self.settings
        timings: dict[str, float] = {}
        azurite = AzuriteProcess(location=self.workdir / "azurite")
        prefix = f"s{uuid.uuid4().hex[:8]}-"
        credentials: Credentials | None = None
        clients_file = self.workdir / "clients.json"
        if settings.auth:
            credentials = ensure_root_client(clients_file)
        self.coordinators = [
            self._serve_process(
                replica,
                store_url or f"sqlite:///{self.workdir / 'coordinator' / 'coordinator.db'}",
                pulse_url,
                azurite.connection_string,
                dict(
                    COORDINATOR_AUTH="true" if settings.auth else "false",
                    COORDINATOR_QUEUE_PREFIX=prefix,
                    COORDINATOR_CLAIM_TIMEOUT=str(settings.claim_timeout),
                    COORDINATOR_POLL_VISIBILITY=str(settings.poll_visibility),
                    COORDINATOR_HINT_GRACE="5",
                    COORDINATOR_RESOLVER_INTERVAL="0.5",
                    COORDINATOR_RECONCILE_INTERVAL=str(settings.reconcile_interval),
                    COORDINATOR_LOG_LEVEL="INFO",
                    COORDINATOR_DISPATCH=settings.dispatch,
                ),
            )
            for replica in range(settings.replicas)
        ]
        (self.workdir / "coordinator").mkdir(parents=True, exist_ok=True)
        worker_env = child_env()
        if credentials is not None:
            worker_env["TASKCLUSTER_CLIENT_ID"] = credentials.client_id
            worker_env["TASKCLUSTER_ACCESS_TOKEN"] = credentials.access_token
        self.fleet = Fleet(
            command=worker_command(
                root_urls=[coordinator.url for coordinator in self.coordinators],
                capacity=settings.capacity,
                isolation=settings.isolation,
            ),
            workdir=self.workdir,
            env=worker_env,
        )
        self.hints = Hints(azurite.connection_string, prefix)
        self.azurite = azurite
        self.rss = RssRecorder(self._processes, interval=RSS_INTERVAL)
        try:
            await azurite.start()
            async with aiohttp.ClientSession() as session:
                self.api = Api(
                    session, [coordinator.url for coordinator in self.coordinators], credentials
                )
                for coordinator in self.coordinators:
                    await coordinator.start()
                for slot in range(settings.workers):
                    await self.fleet.start(slot)
                self.started = time.monotonic()
                self.chaos_end = self.started + settings.seconds
                ports = ", ".join(f":{coordinator.port}" for coordinator in self.coordinators)
                self.event(
                    f"started: coordinator {ports} ({settings.dispatch} "
                    f"dispatch), azurite :{azurite.port}, {settings.workers} workers, "
                    f"seed {self.seed}"
                    + (
                        f", postgres :{self.cluster.port}, broker proxy :{self.proxy.port}"
                        if self.cluster is not None and self.proxy is not None
                        else ""
                    )
                )
                if settings.hook_interval > 0:
                    await self._create_hook()
                monitor = asyncio.create_task(self._monitor())
                sampler = asyncio.create_task(self.rss.run())
                try:
                    await asyncio.gather(
                        self._create(),
                        self._kill_workers(),
                        self._restart_services(),
                        self._noise(),
                    )
                    await self._restarts_over()
                    if settings.hook_interval > 0:
                        await self._remove_hook()
                    timings["chaos"] = time.monotonic() - self.started
                    # The load ends here; the drain's listings of the whole group are the
                    # soak's own reading, not what the memory figures are about.
                    sampler.cancel()
                    self._check_rss()
                    self.event("chaos over: draining")
                    phase = time.monotonic()
                    await self._drain()
                    timings["drain"] = time.monotonic() - phase
                    phase = time.monotonic()
                    await self._settle()
                    timings["settle"] = time.monotonic() - phase
                finally:
                    for task in (monitor, sampler):
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
                    await self.fleet.stop_all()
                self.event("workers stopped: checking")
                statuses = await self._final_statuses()
                hook_fires = await self._hook_fires(statuses)
                census = await self.hints.census()
                everything = await self._check_everything(statuses, hook_fires)
        finally:
            await self.hints.close()
            await self.fleet.stop_all()
            for replica in range(len(self.coordinators)):
                await self._stop_coordinator(replica, signal.SIGTERM)
            await azurite.stop()
            self._check_gone()
        timings["total"] = time.monotonic() - self.started
        findings = checks.merge(
            checks.check_tasks(
                [*self.created, *hook_fires],
                statuses,
                retries=settings.retries,
                retries_of={
                    task_id: functions.FUNCTIONS[kind].options.retries or 0
                    for task_id, kind in self.function_kinds.items()
                },
            ),
            checks.check_executions(
                read_journals(self.workdir / "journals"),
                statuses,
                self.fleet.incarnations,
                now=time.time(),
            ),
            checks.check_hints(census.visible, statuses),
            checks.check_workers(self.fleet.incarnations),
            everything,
            self.extra_violations,
        )
        for name, value in self.counts.items():
            findings.count(name, value)
        findings.count("tasks created", len(self.created))
        findings.count("hints in flight", max(0, census.approximate - len(census.visible)))
        for name, value in scan_logs(self.workdir).items():
            findings.count(name, value)
        findings.count(
            "pending at azurite sigkill", len(pending_at(self.workdir, self.azurite_killed))
        )
        return Result(
            settings=settings,
            seed=self.seed,
            workdir=self.workdir,
            findings=findings,
            timings=timings,
            events=self.events,
            census=census,
            rss=self.rss,
        )

    # --- memory --------------------------------------------------------------------------

    def _memtrace(self) -> list[str]:
        """The coordinator's interpreter arguments under ``--memtrace``."""
        every = self.settings.memtrace
        if every is None:
            return []
        directory = self.workdir / "memtrace"
        return ["-m", "devharness.memtrace", "run", str(directory), "--every", str(every)]

    def _processes(self) -> dict[str, int]:
        """What the RSS recorder samples: the coordinator and every running worker."""
        running = self.fleet.live()
        for replica, coordinator in enumerate(self.coordinators):
            process = coordinator.process
            if process is not None and process.returncode is None:
                running[COORDINATOR if replica == 0 else f"{COORDINATOR}-{replica}"] = process.pid
        return running

    def _check_rss(self) -> None:
        """``memory-growth``: the longest-lived coordinator or any worker grew more than
        ``max_rss_growth`` percent after its warm-up."""
        limit = self.settings.max_rss_growth
        if limit is None:
            return
        for curve, growth in watched_growths(self.rss, self.settings.warm_up).values():
            if curve is None:
                continue
            if growth is None:
                self.extra_violations.add(
                    "memory-growth", f"{curve.name} was not sampled twice after its warm-up"
                )
            elif growth.percent > limit:
                self.extra_violations.add(
                    "memory-growth",
                    f"{curve.name} RSS grew {growth.percent:.1f} % after its warm-up "
                    f"({growth.warm / MIB:.1f} -> {growth.end / MIB:.1f} MiB), over {limit:g} %",
                )

    # --- chaos loops ---------------------------------------------------------------------

    def _definition(self, priority: str, sleep: float) -> dict[str, Any]:
        settings = self.settings
        lifetime = settings.seconds + settings.drain_limit + settings.settle + 1800
        fields: dict[str, Any] = {
            "retries": settings.retries,
            "payload": {
                "sleep": round(sleep, 3),
                **({"fail": True} if settings.handler == "fail" else {}),
            },
        }
        if settings.everything:
            fields["routes"] = [self.route]
            fields["payload"]["artifact"] = True
        return task_definition(
            lifetime_ms=int(lifetime * 1000),
            provisionerId=PROVISIONER_ID,
            workerType=WORKER_TYPE,
            taskGroupId=self.group_id,
            priority=priority,
            metadata=SOAK_METADATA,
            **fields,
        )

    def _item(self, priority: str) -> tuple[str, dict[str, Any], str | None]:
        """A task to create: its taskId, its definition and, for a function call, the
        function's kind (``function_share`` of the tasks: a quarter of them give up). A
        function call uploads no artifact of the soak's: its payload is the call alone."""
        task_id = slugid.nice()
        definition = self._definition(priority, self._sleep_for())
        if self.rng.random() >= self.settings.function_share:
            return task_id, definition, None
        kind = "gives-up" if self.rng.random() < 0.25 else "recovers"
        payload, fields = functions.call(kind)
        definition.update(fields)
        definition["payload"] = payload  # a function call's payload holds the call alone
        return task_id, definition, kind

    def _sleep_for(self) -> float:
        if self.settings.handler != "sleep":
            return 0.0
        draw = self.rng.random()
        if draw < 0.05:  # outlives several claims: must be reclaimed
            return self.rng.uniform(1.2, 2.0) * self.settings.claim_timeout
        if draw < 0.15:
            return self.rng.uniform(1.0, 3.0)
        return self.rng.uniform(0.05, 1.0)

    async def _create(self) -> None:
        """Create tasks at ``rate``, ``batch`` at a time (catching up after a coordinator
        restart)."""
        number = 0
        batch = self.settings.batch
        while self.chaos_left() > 0:
            due = self.started + number / self.settings.rate
            if due > time.monotonic():
                await self.pause(due - time.monotonic())
                continue
            priority = self.rng.choice(PRIORITIES)
            made = [self._item(priority) for _ in range(batch)]
            items = [(task_id, definition) for task_id, definition, _ in made]
            until = time.monotonic() + 120
            try:
                if batch == 1:
                    await self.api.create_task(*items[0], until=until)
                    refused = {}
                else:
                    refused = await self.api.create_tasks(items, until=until)
            except (ApiError, aiohttp.ClientError, TimeoutError) as error:
                refused = {task_id: str(error) for task_id, _ in items}
            for task_id, _, kind in made:
                if task_id in refused:
                    self.extra_violations.add(
                        "create-refused", f"createTask {task_id}: {refused[task_id]}"
                    )
                else:
                    self.created[task_id] = priority
                    if kind is not None:
                        self.function_kinds[task_id] = kind
            number += batch

    async def _kill_workers(self) -> None:
        settings = self.settings
        while settings.kill_interval > 0:
            await self.pause(self.rng.uniform(0.5, 1.5) * settings.kill_interval)
            if self.chaos_left() <= 0:
                return
            # Mostly a worker in the middle of a run: killing an idle one tests little.
            busy = self.fleet.busy_slots()
            slots = busy if busy and self.rng.random() < 0.8 else self.fleet.alive_slots()
            if not slots:
                continue
            slot = self.rng.choice(slots)
            graceful = self.rng.random() < settings.term_share
            self.spawn(self._kill_and_restart(slot, graceful, self.rng.uniform(*DOWN)))

    async def _kill_and_restart(self, slot: int, graceful: bool, down: float) -> None:
        how = "sigterm" if graceful else "sigkill"
        signum = signal.SIGTERM if graceful else signal.SIGKILL
        restart = await self.fleet.kill_and_restart(slot, signum, end=how, down=down)
        if restart is None:
            return  # another restart of the slot came first
        started = restart.started.worker_id if restart.started else "no new worker"
        self.event(f"worker {restart.ended.worker_id} {how}, down {down:.1f} s: {started}")

    async def _restarts_over(self) -> None:
        """Wait for the worker restarts still going; one that outlives its bound (which
        cannot happen: every wait in it is bounded) is cancelled and reported."""
        if not self.background:
            return
        _, late = await asyncio.wait(set(self.background), timeout=RESTARTS_WAIT)
        for task in late:
            task.cancel()
            self.extra_violations.add(
                "stuck-process", f"a worker restart still going after {RESTARTS_WAIT:.0f} s"
            )

    async def _stop_coordinator(self, replica: int, signum: int) -> None:
        """Stop coordinator ``replica`` (SIGKILL after ``STOP_WAIT``); a SIGTERM it outlived
        is a ``stuck-process``."""
        if await self.coordinators[replica].stop(signum, wait=STOP_WAIT):
            self.extra_violations.add(
                "stuck-process",
                f"coordinator {replica} outlived {signal.Signals(signum).name} for "
                f"{STOP_WAIT:.0f} s and was SIGKILLed",
            )

    def _check_gone(self) -> None:
        """Every process the soak started is gone (the workers are checked from their
        incarnations by :func:`checks.check_workers`, PostgreSQL's by :meth:`run`)."""
        for replica, coordinator in enumerate(self.coordinators):
            if coordinator.running:
                self.extra_violations.add(
                    "process-left", f"coordinator {replica} was still running"
                )
        if self.azurite.running:
            self.extra_violations.add("process-left", "Azurite was still running")

    def _service_schedule(self) -> list[tuple[float, str]]:
        settings = self.settings
        kinds = [
            ((index + 0.5) / settings.coordinator_restarts, "coordinator")
            for index in range(settings.coordinator_restarts)
        ]
        kinds += [
            ((index + 0.5) / settings.azurite_restarts, "azurite")
            for index in range(settings.azurite_restarts)
        ]
        # A little later than the graceful restarts' spots, so the two kinds interleave.
        kinds += [
            ((index + 0.6) / settings.azurite_kills, "azurite-kill")
            for index in range(settings.azurite_kills)
        ]
        kinds += [
            ((index + 0.3) / settings.broker_cuts, "broker")
            for index in range(settings.broker_cuts)
        ]
        kinds += [
            ((index + 0.7) / settings.postgres_restarts, "postgres")
            for index in range(settings.postgres_restarts)
        ]
        kinds.sort()
        # Spread over the middle 80 % of the chaos phase, each jittered a little.
        total = len(kinds)
        return [
            (
                settings.seconds * (0.1 + 0.8 * (index + 0.5) / total)
                + self.rng.uniform(-0.03, 0.03) * settings.seconds,
                kind,
            )
            for index, (_, kind) in enumerate(kinds)
        ]

    async def _restart_services(self) -> None:
        coordinator_restarts = 0
        postgres_restarts = 0
        for at, kind in self._service_schedule():
            await asyncio.sleep(max(0.0, self.started + at - time.monotonic()))
            if kind == "coordinator":
                # One replica at a time, in turn; SIGKILL and SIGTERM in turn with one.
                replica = coordinator_restarts % len(self.coordinators)
                kill = self.settings.replicas > 1 or coordinator_restarts % 2 == 0
                coordinator_restarts += 1
                async with self.coordinator_locks[replica]:
                    await self._stop_coordinator(
                        replica, signal.SIGKILL if kill else signal.SIGTERM
                    )
                    down = self.rng.uniform(0.5, self.settings.claim_timeout + 1.0)
                    how = "sigkill" if kill else "sigterm"
                    self.event(f"coordinator {replica} {how}, down {down:.1f} s")
                    self.count(f"coordinator {how}")
                    await asyncio.sleep(down)
                    await self.coordinators[replica].start()
                self.event(f"coordinator {replica} started")
            elif kind == "broker" and self.proxy is not None:
                down = self.rng.uniform(2.0, 8.0)
                await self.proxy.sever()
                self.event(f"broker connections cut, down {down:.1f} s")
                self.count("broker cuts")
                await asyncio.sleep(down)
                await self.proxy.restore()
                self.event("broker reachable again")
            elif kind == "postgres" and self.cluster is not None:
                crash = postgres_restarts % 2 == 1
                postgres_restarts += 1
                began = time.time()
                if crash:
                    await self.cluster.stop("immediate")
                    down = self.rng.uniform(1.0, 3.0)
                    self.event(f"postgres crash (stop -m immediate), down {down:.1f} s")
                    self.count("postgres crashes")
                    await asyncio.sleep(down)
                    await self.cluster.start()
                else:
                    self.event("postgres restart (-m fast)")
                    self.count("postgres restarts")
                    await self.cluster.restart("fast")
                self.store_outages.append((began - STORE_SLACK[0], time.time() + STORE_SLACK[1]))
                self.event("postgres started")
            else:
                kill = kind == "azurite-kill"
                how = "sigkill" if kill else "sigterm"
                if kill:
                    self.azurite_killed.append(time.time())
                await self.azurite.stop(signum=signal.SIGKILL if kill else signal.SIGTERM)
                down = self.rng.uniform(0.5, 3.0)
                self.event(f"azurite {how}, down {down:.1f} s")
                self.count(f"azurite {how}")
                await asyncio.sleep(down)
                await self.azurite.start()
                self.event("azurite started")

    async def _noise(self) -> None:
        """Duplicate hints of recent tasks' last runs, and every third time a garbage one."""
        interval = self.settings.noise_interval
        if interval <= 0:
            return
        number = 0
        while True:
            await self.pause(self.rng.uniform(0.5, 1.5) * interval)
            if self.chaos_left() <= 0 or not self.created:
                if self.chaos_left() <= 0:
                    return
                continue
            task_id = self.rng.choice(list(self.created)[-30:])
            priority = self.created[task_id]
            try:
                status = await self.api.status(task_id, until=time.monotonic())
                if status is None or not status["runs"]:
                    continue
                run_id = len(status["runs"]) - 1
                await asyncio.wait_for(self.hints.put_duplicate(task_id, run_id, priority), 15)
                self.count("noise duplicate hints")
                if number % 3 == 2:
                    await asyncio.wait_for(self.hints.put_garbage(priority, number), 15)
                    self.count("noise garbage hints")
            except Exception as error:  # the coordinator or Azurite is down: skip this one
                log.debug("noise skipped error=%r", error)
            number += 1

    async def _monitor(self) -> None:
        """Restart workers that exited by themselves (counted as violations by the checks)
        and the coordinator if it died unasked."""
        while True:
            await asyncio.sleep(1.0)
            for slot in self.fleet.dead_unasked():
                started = await self.fleet.restart_dead(slot)
                if started is not None:
                    self.event(f"worker slot {slot} exited unasked: {started.worker_id} started")
            for replica, coordinator in enumerate(self.coordinators):
                lock = self.coordinator_locks[replica]
                if lock.locked():
                    continue  # stopped on purpose, or being started
                async with lock:
                    process = coordinator.process
                    if process is not None and process.returncode is not None:
                        self.extra_violations.add(
                            "coordinator-crash",
                            f"coordinator {replica} exited {process.returncode} unasked",
                        )
                        self.event(f"coordinator {replica} exited unasked: restarting")
                        await coordinator.start()

    # --- after the chaos -----------------------------------------------------------------

    def _unresolved(self, statuses: dict[str, dict[str, Any]]) -> list[str]:
        return [
            task_id
            for task_id in self.created
            if task_id not in statuses or statuses[task_id]["state"] not in checks.RESOLVED
        ]

    async def _drain(self) -> None:
        give_up = time.monotonic() + self.settings.drain_limit
        await self._counts_drained(give_up)
        last_report = 0.0
        while True:
            statuses = await self.api.task_group(self.group_id, until=time.monotonic() + 60)
            unresolved = self._unresolved(statuses)
            if not unresolved:
                self.event(f"all {len(self.created)} tasks resolved")
                return
            if time.monotonic() >= give_up:
                self.event(f"drain gave up: {len(unresolved)} tasks unresolved")
                return
            if time.monotonic() - last_report >= 30:
                last_report = time.monotonic()
                states = sorted({statuses[t]["state"] for t in unresolved if t in statuses})
                kept = kept_hints(self.workdir)
                waiting = sum(
                    1
                    for t in unresolved
                    if t in statuses and (t, len(statuses[t]["runs"]) - 1) in kept
                )
                self.event(
                    f"waiting for {len(unresolved)} tasks ({', '.join(states)}); {waiting} of "
                    "them have a hint a worker kept after a failed claim (visible again "
                    f"{self.settings.poll_visibility:.0f} s after it was fetched); "
                    f"{reconciled(self.workdir)} hints put again by the reconciler so far"
                )
            await asyncio.sleep(1.0)

    async def _counts_drained(self, give_up: float) -> None:
        """Wait, by the queue's counts (one cheap request a second), until no run is pending,
        delayed or running, or until ``give_up``: listing a group of hundreds of thousands of
        tasks every second would take longer than the drain itself."""
        task_queue = f"{PROVISIONER_ID}/{WORKER_TYPE}"
        last_report = time.monotonic()
        while time.monotonic() < give_up:
            try:
                left = await self.api.unresolved_runs(task_queue, until=time.monotonic() + 60)
            except (ApiError, aiohttp.ClientError, TimeoutError) as error:
                log.warning("counts failed error=%r", error)
                return  # the listing below decides
            if left == 0:
                return
            if time.monotonic() - last_report >= 30:
                last_report = time.monotonic()
                self.event(f"waiting for {left} runs pending or running")
            await asyncio.sleep(1.0)

    async def _settle(self) -> None:
        give_up = time.monotonic() + self.settings.settle
        while True:
            try:
                visible = await self.hints.visible_count()
            except Exception as error:
                log.warning("peek failed error=%r", error)
                visible = -1
            if visible == 0:
                self.event("no visible hints left")
                return
            if time.monotonic() >= give_up:
                self.event(f"settle gave up: {visible} visible hints")
                return
            await asyncio.sleep(1.0)

    async def _final_statuses(self) -> dict[str, dict[str, Any] | None]:
        listed = await self.api.task_group(self.group_id, until=time.monotonic() + 60)
        statuses: dict[str, dict[str, Any] | None] = dict(listed)
        for task_id in self.created:
            if task_id not in statuses:
                statuses[task_id] = await self.api.status(task_id, until=time.monotonic() + 60)
        return statuses

    # --- everything ----------------------------------------------------------------------

    async def _create_hook(self) -> None:
        """The hook firing every ``hook_interval`` seconds, its tasks in their own group."""
        settings = self.settings
        body = {
            "metadata": {
                "name": "soak hook",
                "description": "fired by scripts/soak --everything",
                "owner": SOAK_METADATA["owner"],
            },
            "schedule": [f"*/{settings.hook_interval:g} * * * * *"],
            "task": {
                "provisionerId": PROVISIONER_ID,
                "workerType": WORKER_TYPE,
                "taskGroupId": self.hook_group_id,
                "routes": [self.route],
                "retries": settings.retries,
                "payload": {"sleep": 0.1, "artifact": True},
                "metadata": SOAK_METADATA,
            },
        }
        status, answer = await self.api.retrying(
            "PUT",
            f"/hooks/{HOOK_GROUP}/{self.hook_id}",
            body,
            until=time.monotonic() + 60,
            service=HOOKS_API,
        )
        if status != 200:
            raise RuntimeError(f"createHook -> {status}: {str(answer)[:300]}")
        # Due times from the next whole interval on; each is checked.
        self.hook_window = (time.time() + settings.hook_interval, float("inf"))
        self.event(f"hook {HOOK_GROUP}/{self.hook_id} every {settings.hook_interval:g} s")

    async def _remove_hook(self) -> None:
        """Remove the hook once the chaos is over; due times up to two intervals before then
        are checked (a fire takes up to a scheduler pass)."""
        assert self.hook_window is not None
        status, answer = await self.api.retrying(
            "DELETE",
            f"/hooks/{HOOK_GROUP}/{self.hook_id}",
            until=time.monotonic() + 120,
            service=HOOKS_API,
        )
        if status != 200:
            self.extra_violations.add("hook-missed", f"removeHook -> {status}: {answer}")
        chaos_end = time.time() - (time.monotonic() - self.chaos_end)
        self.hook_window = (self.hook_window[0], chaos_end - 2 * self.settings.hook_interval)
        self.event("hook removed")

    async def _hook_fires(self, statuses: dict[str, dict[str, Any] | None]) -> dict[str, float]:
        """taskId -> ``created`` (epoch) of every task the hook created; their statuses are
        added to ``statuses``."""
        if self.hook_window is None:
            return {}
        entries = await self.api.task_group_entries(self.hook_group_id, until=time.monotonic() + 60)
        fired: dict[str, float] = {}
        for task_id, entry in entries.items():
            statuses[task_id] = entry["status"]
            created = datetime.datetime.fromisoformat(entry["task"]["created"])
            fired[task_id] = created.timestamp()
        return fired

    async def _check_everything(
        self, statuses: dict[str, dict[str, Any] | None], hook_fires: dict[str, float]
    ) -> checks.Findings:
        """The ``--everything`` checks: hook due times, function retries, Pulse events,
        artifacts and run logs."""
        found = checks.Findings()
        if not self.settings.everything:
            return found
        if self.hook_window is not None:
            start, end = self.hook_window
            interval = self.settings.hook_interval
            first = int(start // interval + 1) * interval
            due = [float(moment) for moment in range(int(first), int(end) + 1, int(interval))]
            found = checks.merge(
                found, checks.check_hook_fires(hook_fires, due, self.store_outages)
            )
        found = checks.merge(
            found,
            checks.check_functions(
                self.function_kinds,
                statuses,
                failures=functions.RECOVERS_FAILURES,
                retries={
                    kind: function.options.retries or 0
                    for kind, function in functions.FUNCTIONS.items()
                },
            ),
        )
        if self.event_log is not None:
            wanted = {
                task_id: checks.expected_events(status)
                for task_id, status in statuses.items()
                if status is not None
            }
            await self.event_log.wait_for(wanted, within=EVENTS_WAIT)
            found = checks.merge(found, checks.check_events(statuses, self.event_log.seen))
            found.count("pulse messages received", self.event_log.received)
        return checks.merge(found, await self._read_artifacts(statuses))

    async def _read_artifacts(self, statuses: dict[str, dict[str, Any] | None]) -> checks.Findings:
        """``artifact-unreadable``: a random choice of completed runs' artifact and run log,
        read back through the coordinators."""
        found = checks.Findings()
        completed = sorted(
            (task_id, len(status["runs"]) - 1)
            for task_id, status in statuses.items()
            if status is not None
            and status["state"] == "completed"
            and task_id not in self.function_kinds  # its artifact is result.json
        )
        chosen = self.rng.sample(completed, min(ARTIFACTS_READ, len(completed)))
        given_up = logs_not_uploaded(self.workdir)
        for task_id, run_id in chosen:
            base = f"{self.api.base}/task/{task_id}/runs/{run_id}/artifacts/"
            until = time.monotonic() + 60
            try:
                artifact = await self.api.read(base + ARTIFACT, until=until)
                # A worker reports a run whose log it could not upload in time (the store
                # down: docs/worker-sdk.md, The run log), and says so in its log.
                run_log = (
                    None
                    if (task_id, run_id) in given_up
                    else await self.api.read(base + RUN_LOG, until=until)
                )
            except (ApiError, aiohttp.ClientError, TimeoutError) as error:
                found.add("artifact-unreadable", f"task {task_id} run {run_id}: {error}")
                continue
            if artifact.decode(errors="replace") != artifact_text(task_id, run_id):
                found.add(
                    "artifact-unreadable",
                    f"task {task_id} run {run_id}: {ARTIFACT} says {artifact[:100]!r}",
                )
            elif run_log is None:
                found.count("run logs the worker gave up on")
            elif f"{LOG_LINE} {task_id} {run_id}" not in run_log.decode(errors="replace"):
                found.add(
                    "artifact-unreadable",
                    f"task {task_id} run {run_id}: its run log lacks the handler's line",
                )
            else:
                found.count("artifacts and run logs read back")
        return found


_KEPT = re.compile(r"claim failed, hint kept taskId=(\S+) runId=(\d+)")


def kept_hints(workdir: Path) -> set[tuple[str, int]]:
    """(taskId, runId) of every hint a worker fetched and kept because its claim failed
    with a network error or 5xx (docs/protocol.md, worker protocol step 5): invisible for the
    poll visibility timeout."""
    kept: set[tuple[str, int]] = set()
    for path in sorted((workdir / "workers").glob("*.log")):
        with contextlib.suppress(OSError):
            for match in _KEPT.finditer(path.read_text(errors="replace")):
                kept.add((match[1], int(match[2])))
    return kept


_NOT_UPLOADED = re.compile(r"run log not uploaded taskId=(\S+) runId=(\d+)")


def logs_not_uploaded(workdir: Path) -> set[tuple[str, int]]:
    """(taskId, runId) of every run whose log the worker did not upload in time and reported
    all the same (it logs a warning saying so)."""
    given_up: set[tuple[str, int]] = set()
    for path in sorted((workdir / "workers").glob("*.log")):
        with contextlib.suppress(OSError):
            for match in _NOT_UPLOADED.finditer(path.read_text(errors="replace")):
                given_up.add((match[1], int(match[2])))
    return given_up


_RECONCILED = re.compile(r"hints missing, putting them again .*?pending=(\d+) inAzure=(\d+)")


def reconciled(workdir: Path) -> int:
    """How many hints the coordinator's reconciler found missing in Azure (and put again),
    from its log: the sum of ``pending - inAzure`` over its passes."""
    missing = 0
    with contextlib.suppress(OSError):
        text = (workdir / "coordinator.log").read_text(errors="replace")
        missing = sum(int(match[1]) - int(match[2]) for match in _RECONCILED.finditer(text))
    return missing


_TRANSITION = re.compile(r"transitions .*?taskId=(\S+) runId=(\d+) state=(pending|running)")
_NOT_PUT = re.compile(r"hint not put, .*?taskId=(\S+) runId=(\d+)")


def _log_time(line: str) -> float | None:
    try:
        when = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    except ValueError:
        return None
    return when.timestamp()


def pending_at(workdir: Path, moments: list[float]) -> set[tuple[str, int]]:
    """(taskId, runId) of the runs that were pending, their hint put, at one of ``moments``
    (the Azurite SIGKILLs), from the coordinator's log: the runs whose hint the crash could
    lose (a hint put within Azurite's last 5 s is lost; an older one survives)."""
    became: dict[tuple[str, int], float] = {}
    claimed: dict[tuple[str, int], float] = {}
    not_put: set[tuple[str, int]] = set()
    with contextlib.suppress(OSError), (workdir / "coordinator.log").open(errors="replace") as log:
        for line in log:
            if match := _TRANSITION.search(line):
                when = _log_time(line)
                if when is not None:
                    seen = became if match[3] == "pending" else claimed
                    seen.setdefault((match[1], int(match[2])), when)
            elif match := _NOT_PUT.search(line):
                not_put.add((match[1], int(match[2])))
    return {
        run
        for run, when in became.items()
        if run not in not_put
        and any(when < moment < claimed.get(run, float("inf")) for moment in moments)
    }


_LOG_PATTERNS: dict[str, Callable[[str], bool]] = {
    "log hints kept": lambda line: "claim failed, hint kept" in line,
    "log duplicate claims ignored": lambda line: "duplicate claim ignored" in line,
    "log stale hints refused": lambda line: "hint not claimable" in line,
    "log dequeue warnings": lambda line: "hint dequeued too often" in line,
    "log report not accepted": lambda line: "report not accepted" in line,
    "log claim lost": lambda line: "claim lost taskId" in line,
    "log hints not put": lambda line: "hint not put, hint keeper will retry" in line,
    "log reconciler passes": lambda line: "hints missing, putting them again" in line,
    "log 500 incidents": lambda line: bool(re.search(r"incidentId=", line)),
    "log tracebacks": lambda line: line.startswith("Traceback"),
}


def scan_logs(workdir: Path) -> dict[str, int]:
    """Lines worth knowing about in the coordinator's and the workers' logs."""
    counts: dict[str, int] = {}
    paths = [workdir / "coordinator.log", *sorted((workdir / "workers").glob("*.log"))]
    for path in paths:
        with contextlib.suppress(OSError), path.open(errors="replace") as lines:
            for line in lines:
                for name, matches in _LOG_PATTERNS.items():
                    if matches(line):
                        counts[name] = counts.get(name, 0) + 1
    counts["log reconciler hints missing"] = reconciled(workdir)
    return counts


async def run_soak(settings: Settings) -> Result:
    seed = settings.seed if settings.seed is not None else random.randrange(1 << 31)
    if settings.workdir is not None:
        workdir = settings.workdir
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="qc-soak-"))
    result = await Soak(settings, seed, workdir).run()
    if not settings.keep and settings.workdir is None and result.ok:
        shutil.rmtree(workdir, ignore_errors=True)
    return result
