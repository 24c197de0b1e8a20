"""What every row of the benchmark shares: settings, the row record, CPU accounting per
process group, percentiles, depth pacing, reading a ``/metrics`` page, and the machine
description. Child processes, waiting and the coordinator process come from
:mod:`devharness`."""

from __future__ import annotations

import asyncio
import contextlib
import platform
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from devharness.postgres import ADMIN_DSN
from devharness.processes import REPO

PYTHON = sys.executable

TIMES = "\N{MULTIPLICATION SIGN}"
"""The sign after a ratio written as a factor ("3.2 times"), spelled by its name: ruff's
RUF001 takes the character itself for an x."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The knobs of one bench run; every row uses the same ones.

    :param duration: seconds measured per row (after ``warmup``).
    :param warmup: seconds each row runs before measuring.
    :param workers: worker processes (end to end, RQ) = consumer processes (raw row).
    :param batch: messages per Azure get = capacity of each SDK worker.
    :param producers: concurrent put / createTask / enqueue requests of the producer.
    :param depth: queue depth the producer keeps (messages in the Azure queue, jobs in the
        Redis list).
    :param drain: seconds a row may take after the window to finish what was created in it.
    :param create_batch: tasks per createTasks request (the create-batch row).
    :param create_requests: concurrent createTasks requests (the create-batch row).
    :param artifact_count: artifacts each way per phase of the ``artifacts-*`` rows.
    :param artifact_mib: the size of each of them, in MiB.
    :param big_artifact_mib: the size of the ``artifact-1gib`` row's one upload, in MiB.
    :param create_rate: createTask calls per second started (open loop) by the
        ``artifact-1gib`` row during and after its upload.
    :param latency_duration: seconds of open-loop sending at each load of the pending-time
        measurements (:mod:`benchlib.latency`).
    :param hold: seconds ``store-postgres-vacuum-held`` has held its transaction open when its
        window ends (its warm-up is what the window leaves of them).
    """

    duration: float = 15.0
    warmup: float = 3.0
    workers: int = 2
    batch: int = 32
    producers: int = 16
    depth: int = 100
    drain: float = 10.0
    priority: str = "lowest"
    auth: bool = False
    worker_log_level: str = "INFO"
    coordinator_log_level: str = "INFO"
    postgres_dsn: str = ADMIN_DSN
    redis_url: str = "redis://127.0.0.1:6379/0"
    lifecycle_tasks: int = 3000
    create_batch: int = 500
    create_requests: int = 4
    artifact_count: int = 8
    artifact_mib: int = 64
    big_artifact_mib: int = 1024
    create_rate: float = 50.0
    latency_duration: float = 10.0
    hold: float = 60.0
    profile: bool = False
    workdir: Path = Path("/tmp/qc-bench")


@dataclass(frozen=True, kw_only=True)
class LoadLatency:
    """Pending time (enqueue call -> handler start) at ``load`` percent of a row's measured
    rate: ``count`` jobs sent at ``offered`` a second; percentiles in ms. ``unstarted`` of the
    jobs had not started when the row stopped waiting, and count as pending until then: the
    percentiles are then lower bounds."""

    load: int
    offered: float
    count: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    unstarted: int = 0

    @classmethod
    def of(
        cls, load: int, offered: float, pending_s: Sequence[float], *, unstarted: int = 0
    ) -> LoadLatency:
        return cls(
            load=load,
            offered=offered,
            count=len(pending_s),
            p50_ms=_ms(percentile(pending_s, 50)),
            p95_ms=_ms(percentile(pending_s, 95)),
            p99_ms=_ms(percentile(pending_s, 99)),
            unstarted=unstarted,
        )


@dataclass(kw_only=True)
class Row:
    """One line of the table.

    :param count: items finished inside the measured window.
    :param cpu_ms: CPU milliseconds per item, by process group, over the window.
    :param busy_cores: machine-wide CPU use over the window, in cores (2.0 = both saturated).
    :param other_cores: the part of ``busy_cores`` not used by the row's processes.
    :param ceiling: the rate the row's CPU cost per item allows on this machine with nothing
        else running (see :meth:`CpuMeter.ceiling`); comparable across rows even when other
        users loaded the machine differently during each.
    :param figures: what a row measures besides its rate, by name (the ``artifact-1gib``
        row's coordinator RSS in MiB).
    :param latency: pending time at shares of the measured rate (:mod:`benchlib.latency`).
    :param rss_mib: each process group's resident memory in MiB at the start of the measured
        window (after the warm-up) and at its end.
    """

    key: str
    title: str
    unit: str
    rate: float | None = None
    count: int = 0
    window: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    depth_mean: float | None = None
    depth_max: int | None = None
    cpu_ms: dict[str, float] = field(default_factory=dict)
    ceiling: float | None = None
    busy_cores: float | None = None
    other_cores: float | None = None
    figures: dict[str, float] = field(default_factory=dict)
    latency: list[LoadLatency] = field(default_factory=list)
    rss_mib: dict[str, tuple[float, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) by the nearest-rank method; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def latency_fields(row: Row, latencies_s: Sequence[float]) -> None:
    row.p50_ms = _ms(percentile(latencies_s, 50))
    row.p99_ms = _ms(percentile(latencies_s, 99))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


# --- CPU accounting ---------------------------------------------------------------------------


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    # children_*: forked work horses (RQ) once their parent has waited for them.
    return times.user + times.system + times.children_user + times.children_system


def processes_named(*names: str) -> list[psutil.Process]:
    """Running processes with one of these names (PostgreSQL backends, redis-server)."""
    found = []
    for process in psutil.process_iter(["name"]):
        if process.info["name"] in names:
            found.append(process)
    return found


def postgres_backends(database: str) -> Callable[[], list[psutil.Process]]:
    """A CPU group of the PostgreSQL backends serving ``database`` (not other users')."""
    marker = f" {database} "

    def group() -> list[psutil.Process]:
        found = []
        for process in processes_named("postgres"):
            with contextlib.suppress(psutil.Error):
                if marker in " ".join(process.cmdline()) + " ":
                    found.append(process)
        return found

    return group


class CpuMeter:
    """CPU seconds used by named groups of processes between :meth:`start` and :meth:`stop`,
    and each group's RSS at both ends.

    A group is a function returning its processes, called at both ends: processes that appear
    in between count from zero, processes that vanish count until their last reading.
    """

    def __init__(self, groups: Mapping[str, Callable[[], Iterable[psutil.Process]]]) -> None:
        self._groups = groups
        self._start: dict[str, dict[int, float]] = {}
        self._rss_start: dict[str, int] = {}
        self.rss: dict[str, tuple[int, int]] = {}
        """Group -> its RSS in bytes at :meth:`start` and at :meth:`stop`."""
        self._system_start: tuple[float, float] = (0.0, 0.0)
        self.used: dict[str, float] = {}
        self.processes: dict[str, int] = {}
        self.busy_cores = 0.0
        self.other_cores = 0.0
        """Machine-wide CPU use by processes outside the groups (other users, the kernel)."""

    @staticmethod
    def _read(processes: Iterable[psutil.Process]) -> tuple[dict[int, float], int]:
        """Each process's CPU seconds, and their RSS summed."""
        readings = {}
        rss = 0
        for process in processes:
            with contextlib.suppress(psutil.Error), process.oneshot():
                readings[process.pid] = _cpu_seconds(process)
                rss += process.memory_info().rss
        return readings, rss

    @staticmethod
    def _system() -> tuple[float, float]:
        times = psutil.cpu_times()
        idle = times.idle + getattr(times, "iowait", 0.0)
        return time.monotonic(), sum(times) - idle

    def start(self) -> None:
        self._start = {}
        for name, group in self._groups.items():
            self._start[name], self._rss_start[name] = self._read(group())
        self._system_start = self._system()

    def stop(self) -> None:
        wall, busy = self._system()
        elapsed = max(1e-9, wall - self._system_start[0])
        self.busy_cores = (busy - self._system_start[1]) / elapsed
        for name, group in self._groups.items():
            before = self._start.get(name, {})
            after, rss = self._read(group())
            self.rss[name] = (self._rss_start.get(name, 0), rss)
            self.processes[name] = len(after)
            self.used[name] = sum(
                max(0.0, after.get(pid, before.get(pid, 0.0)) - before.get(pid, 0.0))
                for pid in set(before) | set(after)
            )
        self.other_cores = max(0.0, self.busy_cores - sum(self.used.values()) / elapsed)

    def per_item_ms(self, count: int) -> dict[str, float]:
        return {name: used * 1000 / count for name, used in self.used.items()} if count else {}

    def ceiling(self, count: int) -> float | None:
        """Items/s the row's processes could reach on this machine's cores if nothing else ran:
        all cores divided by the CPU time per item, or a single-threaded process's one core
        (a group of N processes gets N cores) if that binds first."""
        per_item = self.per_item_ms(count)
        total = sum(per_item.values())
        if not total:
            return None
        cores = psutil.cpu_count() or 1
        limits = [cores * 1000 / total]
        for name, ms in per_item.items():
            if ms > 0:
                limits.append(min(cores, max(1, self.processes.get(name, 1))) * 1000 / ms)
        return min(limits)

    def fill(self, row: Row, *, rate_per_item: int = 1) -> None:
        """Put CPU per item (for ``row.count`` items), the CPU ceiling and the machine's load
        on ``row``; ``rate_per_item`` converts items to the row's rate unit (2 requests per
        claim + report)."""
        row.cpu_ms = self.per_item_ms(row.count)
        ceiling = self.ceiling(row.count)
        row.ceiling = None if ceiling is None else ceiling * rate_per_item
        row.busy_cores = self.busy_cores
        row.other_cores = self.other_cores
        row.rss_mib = {
            name: (start / 2**20, end / 2**20) for name, (start, end) in self.rss.items() if end
        }


def own_process() -> list[psutil.Process]:
    return [psutil.Process()]


def pids(
    *children: asyncio.subprocess.Process | None, descendants: bool = False
) -> Callable[[], list[psutil.Process]]:
    """A CPU group of child processes started with :func:`devharness.processes.spawn`; with
    ``descendants``, the processes they started too (a ``queue-worker --isolation process``'s
    fork server, whose own figures include the pool processes it has reaped, and the pool
    processes still running)."""

    def group() -> list[psutil.Process]:
        found = []
        for child in children:
            if child is not None:
                with contextlib.suppress(psutil.Error):
                    process = psutil.Process(child.pid)
                    found.append(process)
                    if descendants:
                        found += process.children(recursive=True)
        return found

    return group


def serve_group(
    child: asyncio.subprocess.Process | None, *, publisher: bool = False
) -> Callable[[], list[psutil.Process]]:
    """A CPU group of a ``serve`` process ``child``: itself and the serve processes it started
    (``COORDINATOR_PROCESSES``), or with ``publisher`` only the event publisher processes
    they started."""
    everything = pids(child, descendants=True)

    def group() -> list[psutil.Process]:
        found = []
        for process in everything():
            with contextlib.suppress(psutil.Error):
                if ("publish_events" in " ".join(process.cmdline())) == publisher:
                    found.append(process)
        return found

    return group


def azurite_group(port: int) -> Callable[[], list[psutil.Process]]:
    """A CPU group of the Azurite processes we started listening on ``port``."""

    def group() -> list[psutil.Process]:
        found = []
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                command = " ".join(process.cmdline())
                if "azurite" in command and f"--queuePort {port}" in command:
                    found.append(process)
        return found

    return group


async def metric_samples(session: aiohttp.ClientSession, url: str) -> list[Sample]:
    """Every sample of the Prometheus text exposition at ``url`` (a ``/metrics`` endpoint)."""
    async with session.get(url) as response:
        text = await response.text()
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


async def metered_window(meter: CpuMeter, start: float, stop: float) -> tuple[float, float]:
    """Wait until monotonic ``start``, meter the CPU until monotonic ``stop``; the window's
    ends as epoch seconds (what the coordinator's stored times compare with)."""
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    meter.start()
    start_wall = time.time()
    await asyncio.sleep(max(0.0, stop - time.monotonic()))
    meter.stop()
    return start_wall, time.time()


# --- pacing the producer --------------------------------------------------------------------


class DepthPacer:
    """Lets producers add work only while the queue holds fewer than ``target`` items.

    A gauge reads the real depth; producers may add ``target - depth`` items (less those
    already on their way) before they wait for the next reading. The next reading comes as
    soon as they wait, but no sooner than ``min_interval`` after the last one, and at the
    latest ``max_interval`` after it; so the gauge never caps the rate below
    ``(target - depth) / min_interval``. The readings give the row's depth.
    """

    def __init__(
        self,
        gauge: Callable[[], Awaitable[int]],
        *,
        target: int,
        min_interval: float = 0.02,
        max_interval: float = 0.1,
    ) -> None:
        self._gauge = gauge
        self._target = target
        self._min_interval = min_interval
        self._max_interval = max_interval
        self._budget = 0
        self._in_flight = 0
        self._changed = asyncio.Event()
        self._starved = asyncio.Event()
        self.samples: list[tuple[float, int]] = []

    async def run(self, until: float) -> None:
        """Read the gauge until monotonic ``until``."""
        while time.monotonic() < until:
            read_at = time.monotonic()
            try:
                depth = await self._gauge()
            except (aiohttp.ClientError, TimeoutError, OSError):
                await asyncio.sleep(self._max_interval)
                continue
            self.samples.append((read_at, depth))
            self._budget = self._target - depth - self._in_flight
            self._starved.clear()
            self._changed.set()
            await asyncio.sleep(max(0.0, read_at + self._min_interval - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(
                    max(0.0, read_at + self._max_interval - time.monotonic())
                ):
                    await self._starved.wait()
        self._changed.set()

    async def acquire(self, until: float) -> bool:
        """Wait for room for one more item; ``False`` once ``until`` has passed."""
        return await self.acquire_many(until, 1) == 1

    async def acquire_many(self, until: float, most: int) -> int:
        """Wait for room, then take up to ``most`` items of it; 0 once ``until`` has passed."""
        while self._budget <= 0:
            if time.monotonic() >= until:
                return False
            self._changed.clear()
            self._starved.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, until - time.monotonic())):
                    await self._changed.wait()
        if time.monotonic() >= until:
            return 0
        taken = min(most, self._budget)
        self._budget -= taken
        self._in_flight += taken
        return taken

    def release(self, count: int = 1) -> None:
        """``count`` items acquired are in the queue now (or failed)."""
        self._in_flight -= count

    def depth(self, start: float, end: float) -> tuple[float | None, int | None]:
        """Time-weighted mean and maximum depth read between monotonic ``start`` and ``end``."""
        inside = [(at, depth) for at, depth in self.samples if start <= at <= end]
        if not inside:
            return None, None
        edges = [at for at, _ in inside[1:]] + [end]
        weighted = sum(depth * (edge - at) for (at, depth), edge in zip(inside, edges, strict=True))
        span = end - inside[0][0]
        mean = weighted / span if span > 0 else float(inside[0][1])
        return mean, max(depth for _, depth in inside)


# --- the machine ----------------------------------------------------------------------------


def _command_output(command: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (done.stdout or done.stderr).strip().splitlines()[0] if done.returncode == 0 else "?"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "?"


def machine_description() -> list[str]:
    """One line per fact about the machine and the software versions."""
    memory = psutil.virtual_memory().total / 2**30
    azurite_package = REPO / "node_modules" / "azurite" / "package.json"
    azurite = "?"
    with contextlib.suppress(OSError, ValueError):
        import json

        azurite = json.loads(azurite_package.read_text())["version"]
    return [
        f"CPU: {_cpu_model()}, {psutil.cpu_count(logical=True)} logical cores "
        f"({psutil.cpu_count(logical=False)} physical), {memory:.1f} GiB RAM",
        f"OS: {platform.platform()}",
        f"Python {platform.python_version()}, aiohttp {_package_version('aiohttp')}, "
        f"azure-storage-queue {_package_version('azure-storage-queue')}, "
        f"asyncpg {_package_version('asyncpg')}, "
        f"rq {_package_version('rq')}, redis-py {_package_version('redis')}, "
        f"celery {_package_version('celery')}, dramatiq {_package_version('dramatiq')}, "
        f"procrastinate {_package_version('procrastinate')}",
        f"Node {_command_output(['node', '--version'])}, Azurite {azurite} (in-memory)",
        f"PostgreSQL: {_command_output(['psql', '--version'])} client; "
        f"Redis: {_command_output(['redis-server', '--version'])}",
    ]
