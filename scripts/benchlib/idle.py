"""The idle row: what idle workers cost Azure, and what their backoff costs in pickup time.

A coordinator (SQLite) and a fresh Azurite, :data:`WORKERS` ``queue-worker`` processes of
capacity :data:`CAPACITY` on one task queue with the SDK's defaults (as in issue 29's
measurement), and no work. After :data:`RAMP` seconds (the backoff's 1 + 2 + 4 s of growing
pauses; at most twice the row window, so that a short smoke run stays short) and the
warm-up, the Azure requests the workers sent over twice the row window, and at least
:data:`LONGEST_PAUSE` (their ``worker_azure_requests_total``; a pass every 7 s or so, so a
longer window than the others') give the rate: requests a second per idle worker. Then single
tasks, created one at a time a random 0-2 s apart once the last has started, measure the
pickup: createTask sent -> the handler's start, on workers that had been idle (the row's p50
and p99).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from benchlib import latency
from benchlib.common import PYTHON, Row, Settings, latency_fields, metric_samples
from benchlib.coordproc import PROVISIONER_ID, TaskClient, coordinator, new_task_id
from benchlib.noop import STARTS_ENV
from devharness.azurite import AzuriteProcess
from devharness.ports import free_port
from devharness.processes import child_env, end_processes, spawn
from devharness.waiting import wait_until

WORKERS = 4
CAPACITY = 4
RAMP = 10.0
"""Seconds for the idle backoff to reach its longest pause, not measured."""
LONGEST_PAUSE = 10.5
"""The idle backoff's longest pause with the SDK's defaults (a pass's seven gets at one request
a second, jittered up to 1.5 times): a window this long sees every worker look at least once,
however short the row window (a smoke run's 4 s saw none, now and then)."""
PICKUP_EVERY = 5.0
"""One pickup measured per this many seconds of ``Settings.duration`` (at least one)."""


async def run(settings: Settings) -> Row:
    row = Row(
        key="idle",
        title=f"{WORKERS} idle queue-workers (capacity {CAPACITY}, one task queue): "
        "Azure requests per worker",
        unit="requests/s",
    )
    workdir = settings.workdir / row.key
    starts_dir = workdir / "starts"
    starts_dir.mkdir(parents=True, exist_ok=True)
    worker_type = f"wt-{uuid.uuid4().hex[:8]}"
    ports = [free_port() for _ in range(WORKERS)]
    async with (
        AzuriteProcess() as azurite,
        coordinator(
            settings,
            store="sqlite",
            workdir=workdir,
            azure_connection_string=azurite.connection_string,
        ) as running,
        aiohttp.ClientSession() as session,
    ):
        env = child_env(**{STARTS_ENV: str(starts_dir)})
        workers = [
            await spawn(
                [
                    *(PYTHON, "-m", "worker_sdk.cli", f"--root-url={running.url}"),
                    *(f"--provisioner-id={PROVISIONER_ID}", f"--worker-type={worker_type}"),
                    *(f"--worker-id=idle-{i}", f"--capacity={CAPACITY}", "--no-run-log"),
                    *(f"--metrics-port={port}", "--grace-period=5", "benchlib.noop:handle"),
                ],
                env=env,
                log=workdir / f"worker-{i}.log",
            )
            for i, port in enumerate(ports)
        ]
        try:

            async def requests() -> float:
                counts = await asyncio.gather(*(_requests(session, port) for port in ports))
                return sum(counts)

            await wait_until(_answering(session, ports), within=30, what="the workers' metrics")
            await asyncio.sleep(min(RAMP, 2 * settings.duration) + settings.warmup)
            before, begin = await requests(), time.monotonic()
            await asyncio.sleep(max(2 * settings.duration, LONGEST_PAUSE))
            after, end = await requests(), time.monotonic()
            row.window = end - begin
            row.count = round(after - before)
            row.rate = row.count / row.window / WORKERS
            pickups = await _pickups(
                settings, TaskClient(session, running), worker_type, starts_dir
            )
            latency_fields(row, pickups)
            row.notes.append(
                f"{row.count} Azure requests in {row.window:.1f} s from {WORKERS} workers; "
                f"pickup of a task on idle workers, {len(pickups)} tasks: "
                + ", ".join(f"{value * 1000:.0f}" for value in sorted(pickups))
                + " ms"
            )
        finally:
            await end_processes(workers)
    return row


def _answering(session: aiohttp.ClientSession, ports: list[int]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        try:
            await asyncio.gather(*(_requests(session, port) for port in ports))
        except (aiohttp.ClientError, OSError):
            return False
        return True

    return check


async def _requests(session: aiohttp.ClientSession, port: int) -> float:
    """The Azure requests the worker serving metrics on ``port`` has sent."""
    samples = await metric_samples(session, f"http://127.0.0.1:{port}/metrics")
    return sum(sample.value for sample in samples if sample.name == "worker_azure_requests_total")


async def _pickups(
    settings: Settings, tasks: TaskClient, worker_type: str, starts_dir: Path
) -> list[float]:
    """Create tasks one at a time, each once the last has started; their pending seconds."""
    rng = random.Random()
    pickups: list[float] = []
    group = new_task_id()
    for _ in range(max(1, int(settings.duration // PICKUP_EVERY))):
        await asyncio.sleep(rng.uniform(0, 2))
        sent_at = time.time()
        await tasks.create_many(
            tasks.new_tasks(
                1,
                worker_type=worker_type,
                task_group_id=group,
                priority=settings.priority,
                payload={"sentAt": sent_at},
            )
        )

        def pending(at: float = sent_at) -> list[float]:
            # the start file keeps microseconds
            return latency.pending_between(latency.read_starts(starts_dir), at - 1e-5, at + 1e-5)

        await wait_until(lambda: bool(pending()), within=30, what="the start", interval=0.05)
        pickups += pending()
    return pickups
