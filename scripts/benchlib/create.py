"""Row 6, creating tasks: ``create-single``, one createTask per request from ``producers``
concurrent clients, against ``create-batch``, createTasks (``PUT /tasks``, the bulk endpoint)
with ``create_batch`` tasks per request from ``create_requests`` concurrent clients.

Each row has its own ``queue-coordinator serve`` process (SQLite store) and in-memory Azurite:
the coordinator puts every new task's hint into Azurite before it answers, so both rates
include that cost. Nothing takes the hints (a put does not slow down as Azurite's queue
grows). The producers run from the start of the warm-up to the end of the window; a request
counts with the share of its created tasks that its time overlaps the window (a 500-task
request half inside counts 250), so the rate does not jump with the batch boundaries.
Latency is that of one request, for requests answered inside the window.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Literal

import aiohttp

from benchlib.common import (
    CpuMeter,
    Row,
    Settings,
    azurite_group,
    latency_fields,
    metered_window,
    own_process,
    pids,
)
from benchlib.coordproc import TaskClient, coordinator, new_task_id
from devharness.azurite import AzuriteProcess

Mode = Literal["single", "batch"]

Request = tuple[float, float, int]
"""One answered request: sent and answered (epoch seconds), tasks it created."""


async def run(settings: Settings, azurite: AzuriteProcess, mode: Mode) -> Row:
    if mode == "single":
        size, concurrency, method = 1, settings.producers, "createTask"
    else:
        size, concurrency, method = settings.create_batch, settings.create_requests, "createTasks"
    row = Row(
        key=f"create-{mode}",
        title=f"creating tasks, SQLite + Azurite hints: {method}, {size} per request",
        unit="tasks/s",
    )
    async with (
        coordinator(
            settings,
            store="sqlite",
            workdir=settings.workdir / row.key,
            azure_connection_string=azurite.connection_string,
        ) as running,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency + 4)) as session,
    ):
        meter = CpuMeter(
            {
                "azurite": azurite_group(azurite.port),
                "coordinator": pids(running.process),
                "producer": own_process,
            }
        )
        tasks = TaskClient(session, running)
        worker_type = f"wt-{uuid.uuid4().hex[:8]}"
        task_group_id = new_task_id()
        requests: list[Request] = []
        failures = 0
        window_start = time.monotonic() + settings.warmup
        stop_at = window_start + settings.duration

        async def producer() -> None:
            nonlocal failures
            while time.monotonic() < stop_at:
                items = tasks.new_tasks(
                    size,
                    worker_type=worker_type,
                    task_group_id=task_group_id,
                    priority=settings.priority,
                )
                sent = time.time()
                try:
                    created = await tasks.send(items, batch=mode != "single")
                except (aiohttp.ClientError, TimeoutError, RuntimeError):
                    failures += size
                    await asyncio.sleep(0.1)
                    continue
                failures += size - created
                requests.append((sent, time.time(), created))

        measured = asyncio.create_task(metered_window(meter, window_start, stop_at))
        await asyncio.gather(*(producer() for _ in range(concurrency)))
        wall_start, wall_end = await measured
    row.window = wall_end - wall_start
    created_inside = _created_inside(requests, wall_start, wall_end)
    row.count = round(created_inside)
    row.rate = created_inside / row.window
    latency_fields(
        row,
        [answered - sent for sent, answered, _ in requests if wall_start <= answered < wall_end],
    )
    meter.fill(row)
    row.notes.append(f"{concurrency} concurrent clients; latency per request; CPU ms per task")
    if failures:
        row.notes.append(f"{failures} tasks not created (failed requests or per-item errors)")
    return row


def _created_inside(requests: Sequence[Request], start: float, end: float) -> float:
    """Tasks created between ``start`` and ``end``, each request's spread evenly over its
    time."""
    return sum(
        created * max(0.0, min(answered, end) - max(sent, start)) / max(answered - sent, 1e-9)
        for sent, answered, created in requests
    )
