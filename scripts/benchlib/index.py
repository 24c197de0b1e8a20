"""Index rows (docs/index-service.md):

* ``index-find-<store>``: findTask against a coordinator whose index holds
  :data:`ENTRIES` entries (100 namespaces of 1,000, written into the store before it starts):
  ``producers`` concurrent clients each asking for a random one, back to back, give the rate;
  then findTask sent open loop at :data:`LOAD` of that rate, each request's latency (sent ->
  answered, p50 and p99). The entries are written with SQL
  (:data:`_SEED`), not through the API: the row measures reads.
* ``index-lag``: ``store-sqlite`` (end to end under store dispatch) with each task routed to
  ``index.bench.lag.<taskId>``, so every completion writes an index entry: the rate is the
  completion rate with indexing on, and :class:`LagSampler` measures how long after its
  completion (the run's stored ``resolved``) an entry is found, for a task sampled every
  :data:`SAMPLE_EVERY` seconds while the producer runs flat out.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping

import aiohttp
import asyncpg

from benchlib.common import (
    CpuMeter,
    Row,
    Settings,
    latency_fields,
    metered_window,
    own_process,
    percentile,
    pids,
)
from benchlib.coordproc import Coordinator, StoreKind, coordinator
from coordinator.service.clock import wall_clock
from coordinator.store.factory import open_store, sqlite_path
from devharness.api import call

INDEX_API = "/api/index/v1"
ENTRIES = 100_000
PER_NAMESPACE = 1000
LAG_PREFIX = "bench.lag"
SAMPLE_EVERY = 0.2
"""Seconds between the tasks :class:`LagSampler` follows."""
POLL_EVERY = 0.01
"""Seconds between one sampled task's findTask calls until it is found."""
GIVE_UP_AFTER = 30.0
LOAD = 0.5
"""The share of findTask's rate at which its latency is measured."""


def _path(i: int) -> str:
    return f"bench.ns{i // PER_NAMESPACE}.e{i}"


_SEED = (
    # One statement per table, the same text for SQLite and PostgreSQL: 100 namespaces of
    # 1,000 entries each, written in a second where 100,000 insertTask calls would take a
    # minute.
    "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {count}) "
    "INSERT INTO indexed_tasks (namespace, name, rank, task_id, data, expires) "
    "SELECT 'bench.ns' || (i / {per}), 'e' || i, 0, 'fN1SbArXTPSVFNUvaOlinQ', '{{}}', {expires} "
    "FROM n",
    "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {spaces}) "
    "INSERT INTO index_namespaces (parent, name, expires) "
    "SELECT 'bench', 'ns' || i, {expires} FROM n",
    "INSERT INTO index_namespaces (parent, name, expires) VALUES ('', 'bench', {expires})",
)


async def _seed(store_url: str) -> None:
    """Write :data:`ENTRIES` entries (and their namespaces) into the store at ``store_url``,
    migrated first by opening it."""
    await (await open_store(store_url)).close()
    statements = [
        sql.format(
            count=ENTRIES,
            per=PER_NAMESPACE,
            spaces=ENTRIES // PER_NAMESPACE,
            expires=wall_clock() + 86_400_000,
        )
        for sql in _SEED
    ]
    if store_url.startswith("sqlite:"):

        def write() -> None:
            with sqlite3.connect(sqlite_path(store_url)) as connection:
                for statement in statements:
                    connection.execute(statement)

        await asyncio.to_thread(write)
        return
    connection = await asyncpg.connect(store_url)
    try:
        async with connection.transaction():
            for statement in statements:
                await connection.execute(statement)
    finally:
        await connection.close()


async def run_find(settings: Settings, store: StoreKind) -> Row:
    label = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[store]
    row = Row(
        key=f"index-find-{store}",
        title=f"index findTask at {ENTRIES:,} entries, {label} store",
        unit="requests/s",
    )
    async with (
        coordinator(
            settings,
            store=store,
            workdir=settings.workdir / row.key,
            azure_connection_string=None,
            seed=_seed,
        ) as running,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=settings.producers + 4)
        ) as session,
    ):
        meter = CpuMeter({"coordinator": pids(running.process), "client": own_process})
        window_start = time.monotonic() + settings.warmup
        stop_at = window_start + settings.duration
        answered: list[tuple[float, float]] = []  # (answered at, seconds it took)
        find = _finder(session, running)
        picks = random.Random(0)

        async def client() -> None:
            while time.monotonic() < stop_at:
                answered.append(await find(picks.randrange(ENTRIES)))

        metering = asyncio.create_task(metered_window(meter, window_start, stop_at))
        await asyncio.gather(*(client() for _ in range(settings.producers)))
        wall_start, wall_end = await metering
        inside = [took for at, took in answered if wall_start <= at < wall_end]
        row.count, row.window = len(inside), wall_end - wall_start
        row.rate = row.count / row.window if row.window else None
        meter.fill(row)
        # The latency at half that rate, sent open loop as requests come to a service: at the
        # full rate it would be the closed loop's queueing (16 clients waiting on each other).
        rate = (row.rate or 0) * LOAD
        latencies = await _open_loop(find, picks, rate=rate, duration=settings.duration)
    latency_fields(row, latencies)
    row.notes.append(
        f"the rate: {settings.producers} concurrent clients, back to back, each findTask of a "
        f"random entry of {ENTRIES:,} ({ENTRIES // PER_NAMESPACE} namespaces); p50/p99 (sent "
        f"-> answered): {len(latencies)} requests sent open loop at {LOAD:.0%} of that rate "
        f"({rate:,.0f}/s)"
    )
    return row


Find = Callable[[int], Awaitable[tuple[float, float]]]


def _finder(session: aiohttp.ClientSession, running: Coordinator) -> Find:
    """findTask of the ``i``-th entry: ``(answered at, seconds it took)``."""
    base = f"{running.url}{INDEX_API}/task/"

    async def find(i: int) -> tuple[float, float]:
        started = time.time()
        response = await call(session, "GET", base + _path(i), credentials=running.credentials)
        if response.status != 200:
            raise RuntimeError(f"findTask -> {response.status}: {response.body}")
        finished = time.time()
        return finished, finished - started

    return find


async def _open_loop(
    find: Find, picks: random.Random, *, rate: float, duration: float
) -> list[float]:
    """findTask ``rate`` times a second for ``duration`` seconds, each sent on time whatever
    the others are doing; the seconds each took."""
    latencies: list[float] = []
    sending: set[asyncio.Task[None]] = set()

    async def one(i: int) -> None:
        latencies.append((await find(i))[1])

    start, sent = time.monotonic(), 0
    while sent < rate * duration:
        delay = start + sent / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        request = asyncio.create_task(one(picks.randrange(ENTRIES)))
        sending.add(request)
        request.add_done_callback(sending.discard)
        sent += 1
    await asyncio.gather(*sending)
    return latencies


class LagSampler:
    """Follows one task of those the producer has sent every :data:`SAMPLE_EVERY` seconds:
    calls findTask at its path every :data:`POLL_EVERY` seconds until the entry is there, and
    notes when (epoch seconds)."""

    def __init__(self, session: aiohttp.ClientSession, running: Coordinator) -> None:
        self._session = session
        self._running = running
        self.sampled: set[str] = set()
        self.found: dict[str, float] = {}
        self._followers: set[asyncio.Task[None]] = set()

    @staticmethod
    def route(task_id: str) -> str:
        return f"index.{LAG_PREFIX}.{task_id}"

    async def run(self, sent: dict[str, float], stop_at: float) -> None:
        """Sample ``sent`` (taskId -> when sent, in the order sent) until ``stop_at``
        (monotonic), then wait for the tasks being followed."""
        while time.monotonic() < stop_at:
            await asyncio.sleep(SAMPLE_EVERY)
            if sent:
                task_id = next(reversed(sent))
                self.sampled.add(task_id)
                follower = asyncio.create_task(self._follow(task_id))
                self._followers.add(follower)
                follower.add_done_callback(self._followers.discard)
        await asyncio.gather(*self._followers)

    async def _follow(self, task_id: str) -> None:
        url = f"{self._running.url}{INDEX_API}/task/{LAG_PREFIX}.{task_id}"
        give_up = time.monotonic() + GIVE_UP_AFTER
        while time.monotonic() < give_up:
            response = await call(self._session, "GET", url, credentials=self._running.credentials)
            if response.status == 200:
                self.found[task_id] = time.time()
                return
            await asyncio.sleep(POLL_EVERY)

    def fill(self, row: Row, completed: Mapping[str, float]) -> None:
        """The row's lag figures: found -> the run's resolved, of the sampled tasks that
        completed (a task never found counts as :data:`GIVE_UP_AFTER`)."""
        lags = [
            max(self.found.get(task_id, completed[task_id] + GIVE_UP_AFTER) - completed[task_id], 0)
            for task_id in self.sampled
            if task_id in completed
        ]
        figures = {
            "lag_p50_ms": percentile(lags, 50),
            "lag_p99_ms": percentile(lags, 99),
            "lag_max_ms": max(lags, default=None),
        }
        row.figures.update(
            {name: value * 1000 for name, value in figures.items() if value is not None}
        )
        shown = "/".join(f"{row.figures.get(name, 0):.0f}" for name in figures)
        row.notes.append(
            f"indexing lag (run resolved -> its entry found, findTask every "
            f"{POLL_EVERY * 1000:.0f} ms) p50/p99/max = {shown} ms, of {len(lags)} tasks "
            f"sampled every {SAMPLE_EVERY * 1000:.0f} ms"
        )
