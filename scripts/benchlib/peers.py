"""Row 4, the peers: Celery (Redis broker), Dramatiq (Redis), RQ (its default forking
``Worker`` and its ``SimpleWorker``) and procrastinate (PostgreSQL), each with the same no-op
job (:func:`benchlib.noop.job`), ``Settings.workers`` worker processes and, where the peer
runs jobs concurrently within a process, ``Settings.batch`` of them at once (the SDK
worker's capacity); RQ runs one job at a time per process.

Each row measures as the end-to-end rows do: the producer (this process) keeps the queue
``Settings.depth`` deep for warm-up + window, the rate counts the jobs started inside the
window, and the CPU is metered over it; then pending time at 50 % and 80 % of that rate
(:mod:`benchlib.latency`). A job notes its start (:mod:`benchlib.noop`); pending time is the
producer's enqueue call -> the job's start. Every queue, key and database the row made is
removed afterwards.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import asyncpg
import psutil
from redis import Redis

from benchlib import latency, peer_apps
from benchlib.common import (
    PYTHON,
    CpuMeter,
    DepthPacer,
    Row,
    Settings,
    latency_fields,
    metered_window,
    own_process,
    pids,
    postgres_backends,
    processes_named,
)
from benchlib.noop import STARTS_ENV
from devharness.postgres import throwaway_database
from devharness.processes import child_env, end_processes, spawn
from devharness.waiting import WaitTimeout, wait_until

PEERS = ("celery", "dramatiq", "rq", "rq-simple", "procrastinate")

_BIN = Path(PYTHON).parent


class Peer(abc.ABC):
    """One peer's queue and workers for one row."""

    key: str
    title: str
    store_name: str
    """The CPU group's name for the broker or database."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.queue = f"bench-{uuid.uuid4().hex[:8]}"

    @abc.abstractmethod
    def commands(self) -> list[list[str]]:
        """The worker processes' command lines."""

    def environment(self) -> dict[str, str]:
        """What the worker processes' environment adds: ``BENCH_PEER`` names the app
        :mod:`benchlib.peer_apps` builds in them (RQ's workers load none)."""
        return {"BENCH_PEER": self.key}

    @abc.abstractmethod
    async def send(self, sent_at: float, count: int) -> None:
        """Enqueue ``count`` jobs stamped ``sent_at``."""

    @abc.abstractmethod
    async def depth(self) -> int:
        """The jobs waiting in the queue."""

    @abc.abstractmethod
    def store(self) -> Callable[[], Iterable[psutil.Process]]:
        """The CPU group of the broker or database."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Remove what the row made."""


class _RedisPeer(Peer):
    store_name = "redis"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.redis = Redis.from_url(settings.redis_url)

    def store(self) -> Callable[[], Iterable[psutil.Process]]:
        return lambda: processes_named("redis-server")

    def environment(self) -> dict[str, str]:
        return {
            **super().environment(),
            "BENCH_REDIS_URL": self.settings.redis_url,
            "BENCH_QUEUE": self.queue,
        }

    async def depth(self) -> int:
        return int(self.redis.llen(self.list_key()))

    @abc.abstractmethod
    def list_key(self) -> str:
        """The Redis list the waiting jobs are in."""

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            keys = list(self.redis.scan_iter(match=f"*{self.queue}*", count=1000))
            if keys:
                self.redis.delete(*keys)
        self.redis.close()


class Celery(_RedisPeer):
    key = "celery"
    title = "peer: Celery on Redis (threads pool), no-op jobs"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        _, self.task = peer_apps.celery(settings.redis_url, self.queue)

    def commands(self) -> list[list[str]]:
        return [
            [
                str(_BIN / "celery"),
                "-A",
                "benchlib.peer_apps:celery_app",
                "worker",
                "--pool=threads",
                f"--concurrency={self.settings.batch}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=WARNING",
                f"--queues={self.queue}",
                f"--hostname={self.queue}-{i}@bench",
            ]
            for i in range(self.settings.workers)
        ]

    async def send(self, sent_at: float, count: int) -> None:
        for _ in range(count):
            self.task.apply_async(args=(sent_at,), queue=self.queue)

    def list_key(self) -> str:
        return self.queue


class Dramatiq(_RedisPeer):
    key = "dramatiq"
    title = "peer: Dramatiq on Redis, no-op jobs"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        _, self.actor = peer_apps.dramatiq(settings.redis_url, self.queue)

    def commands(self) -> list[list[str]]:
        # one command: Dramatiq starts and supervises its worker processes itself
        return [
            [
                str(_BIN / "dramatiq"),
                "benchlib.peer_apps:dramatiq_broker",
                f"--processes={self.settings.workers}",
                f"--threads={self.settings.batch}",
                f"--queues={self.queue}",
            ]
        ]

    async def send(self, sent_at: float, count: int) -> None:
        for _ in range(count):
            self.actor.send(sent_at)

    def list_key(self) -> str:
        return f"dramatiq:{self.queue}"


class Rq(_RedisPeer):
    def __init__(self, settings: Settings, *, simple: bool) -> None:
        super().__init__(settings)
        from rq import Queue

        self.worker_class = "rq.worker.SimpleWorker" if simple else "rq.worker.Worker"
        self.key = "rq-simple" if simple else "rq"
        self.title = f"peer: RQ {self.worker_class.rsplit('.', 1)[-1]} on Redis, no-op jobs"
        self.rq_queue = Queue(self.queue, connection=self.redis)

    def commands(self) -> list[list[str]]:
        return [
            [
                str(_BIN / "rq"),
                "worker",
                f"--url={self.settings.redis_url}",
                f"--worker-class={self.worker_class}",
                f"--name={self.queue}-{i}",
                "--logging_level=WARNING",
                "--disable-job-desc-logging",
                self.queue,
            ]
            for i in range(self.settings.workers)
        ]

    async def send(self, sent_at: float, count: int) -> None:
        self.rq_queue.enqueue_many(
            [
                self.rq_queue.prepare_data("benchlib.noop.job", args=(sent_at,), result_ttl=0)
                for _ in range(count)
            ]
        )

    def list_key(self) -> str:
        return str(self.rq_queue.key)

    async def close(self) -> None:
        # RQ's own removal first: the jobs still queued (their hashes are not named after the
        # queue) and the queue's member of rq:queues (not a key the scan finds).
        with contextlib.suppress(Exception):
            self.rq_queue.delete(delete_jobs=True)
        await super().close()


class Procrastinate(Peer):
    key = "procrastinate"
    title = "peer: procrastinate on PostgreSQL, no-op jobs"
    store_name = "postgres"

    def __init__(self, settings: Settings, dsn: str) -> None:
        super().__init__(settings)
        self.dsn = dsn
        self.app, self.task = peer_apps.procrastinate(dsn, self.queue)
        self.database = dsn.rsplit("/", 1)[-1]
        self.pool: asyncpg.Pool | None = None

    async def open(self) -> None:
        await self.app.open_async()
        await self.app.schema_manager.apply_schema_async()
        self.pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=2)

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "BENCH_POSTGRES_DSN": self.dsn}

    def commands(self) -> list[list[str]]:
        return [
            [
                str(_BIN / "procrastinate"),
                "--app=benchlib.peer_apps.procrastinate_app",
                "--log-level=warning",
                "worker",
                f"--queues={self.queue}",
                f"--concurrency={self.settings.batch}",
                f"--name={self.queue}-{i}",
                "--delete-jobs=successful",
            ]
            for i in range(self.settings.workers)
        ]

    async def send(self, sent_at: float, count: int) -> None:
        await self.task.batch_defer_async(*({"sent_at": sent_at} for _ in range(count)))

    async def depth(self) -> int:
        assert self.pool is not None
        value = await self.pool.fetchval(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo' AND queue_name = $1",
            self.queue,
        )
        return int(value)

    def store(self) -> Callable[[], Iterable[psutil.Process]]:
        return postgres_backends(self.database)

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        await self.app.close_async()


@contextlib.asynccontextmanager
async def _peer(settings: Settings, key: str) -> AsyncIterator[Peer]:
    async with contextlib.AsyncExitStack() as stack:
        made: Peer
        if key == "procrastinate":
            dsn = await stack.enter_async_context(
                throwaway_database(settings.postgres_dsn, "qc_bench_procrastinate")
            )
            made = Procrastinate(settings, dsn)
            await made.open()
        elif key == "celery":
            made = Celery(settings)
        elif key == "dramatiq":
            made = Dramatiq(settings)
        else:
            made = Rq(settings, simple=key == "rq-simple")
        stack.push_async_callback(made.close)
        yield made


async def run(settings: Settings, key: str) -> Row:
    async with _peer(settings, key) as peer:
        row = Row(key=peer.key, title=peer.title, unit="jobs/s")
        await _measure(settings, peer, row)
        return row


async def _measure(settings: Settings, peer: Peer, row: Row) -> None:
    workdir = settings.workdir / row.key
    starts_dir = workdir / "starts"
    starts_dir.mkdir(parents=True, exist_ok=True)
    env = child_env(**{STARTS_ENV: str(starts_dir)}, **peer.environment())
    workers = [
        await spawn(command, env=env, log=workdir / f"worker-{i}.log")
        for i, command in enumerate(peer.commands())
    ]
    try:
        # A first job through: the workers are up (the warm-up covers the rest).
        await peer.send(0.0, 1)

        def first_started() -> bool:
            if any(w.returncode is not None for w in workers):
                raise RuntimeError(f"a {row.key} worker exited; see {workdir}")
            return bool(latency.read_starts(starts_dir))

        await wait_until(first_started, within=60, what=f"{row.key}'s first job", interval=0.1)
        meter = CpuMeter(
            {
                f"{row.key} workers": pids(*workers, descendants=True),
                peer.store_name: peer.store(),
                "producer": own_process,
            }
        )
        pacer = DepthPacer(peer.depth, target=settings.depth)
        begin = time.monotonic()
        window_start = begin + settings.warmup
        stop_at = window_start + settings.duration
        sent = 0

        async def producer() -> None:
            nonlocal sent
            while count := await pacer.acquire_many(stop_at, settings.producers * 8):
                try:
                    await peer.send(time.time(), count)
                    sent += count
                finally:
                    pacer.release(count)

        gauge = asyncio.create_task(pacer.run(stop_at))
        measured = asyncio.create_task(metered_window(meter, window_start, stop_at))
        await producer()
        wall_start, wall_end = await measured
        await gauge
        row.depth_mean, row.depth_max = pacer.depth(window_start, stop_at)

        def drained() -> bool:
            return len(latency.read_starts(starts_dir)) >= sent + 1

        with contextlib.suppress(WaitTimeout):
            await wait_until(drained, within=settings.drain, what="the drain", interval=0.2)
        starts = latency.read_starts(starts_dir)
        row.window = wall_end - wall_start
        row.count = latency.started_between(starts, wall_start, wall_end)
        row.rate = row.count / row.window
        latency_fields(row, latency.pending_between(starts, wall_start, wall_end))
        meter.fill(row)
        if len(starts) < sent + 1:
            row.notes.append(f"{sent + 1 - len(starts)} of {sent} jobs not started at the end")
        await latency.under_load(settings, row, peer.send, starts_dir)
    finally:
        await end_processes(workers)
