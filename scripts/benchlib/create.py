"""Row 6, creating tasks: ``create-single``, one createTask per request from ``producers``
concurrent clients, against ``create-batch``, createTasks (``PUT /tasks``, the bulk endpoint)
with ``create_batch`` tasks per request from ``create_requests`` concurrent clients; and the
same through tasks as Python functions (:class:`worker_sdk.App`, :mod:`benchlib.noop_app`):
``create-dispatch``, ``fn.dispatch()`` from ``producers`` concurrent callers, and
``create-dispatch-many``, ``fn.dispatch_many()`` of ``create_batch`` calls from
``create_requests`` concurrent callers (the SDK building, checking and signing each
definition, against the harness's one shared definition per request).

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
from typing import Any, Literal

import aiohttp

from benchlib import noop_app
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
from benchlib.coordproc import PROVISIONER_ID, Coordinator, TaskClient, coordinator, new_task_id
from devharness.azurite import AzuriteProcess
from worker_sdk import App, RequestFailed, TaskFunction

Mode = Literal["single", "batch", "dispatch", "dispatch-many"]

Request = tuple[float, float, int]
"""One answered request: sent and answered (epoch seconds), tasks it created."""


async def run(settings: Settings, azurite: AzuriteProcess, mode: Mode) -> Row:
    one = mode in ("single", "dispatch")
    size, concurrency = (
        (1, settings.producers) if one else (settings.create_batch, settings.create_requests)
    )
    method = {
        "single": "createTask",
        "batch": "createTasks",
        "dispatch": "App fn.dispatch() (createTask)",
        "dispatch-many": "App fn.dispatch_many() (createTasks)",
    }[mode]
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
        app, noop = producer_app(running, worker_type)
        requests: list[Request] = []
        failures = 0
        window_start = time.monotonic() + settings.warmup
        stop_at = window_start + settings.duration

        async def send() -> int:
            """One request's worth of tasks, the row's way; how many were created."""
            if mode == "dispatch":
                await noop.dispatch(priority=settings.priority)
                return 1
            if mode == "dispatch-many":
                calls = [()] * size
                return len(await noop.dispatch_many(calls, priority=settings.priority))
            items = tasks.new_tasks(
                size,
                worker_type=worker_type,
                task_group_id=task_group_id,
                priority=settings.priority,
            )
            return await tasks.send(items, batch=mode != "single")

        async def producer() -> None:
            nonlocal failures
            while time.monotonic() < stop_at:
                sent = time.time()
                try:
                    created = await send()
                except (aiohttp.ClientError, TimeoutError, RuntimeError, RequestFailed):
                    failures += size
                    await asyncio.sleep(0.1)
                    continue
                failures += size - created
                requests.append((sent, time.time(), created))

        measured = asyncio.create_task(metered_window(meter, window_start, stop_at))
        async with app:
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


def producer_app(coordinator: Coordinator, worker_type: str) -> tuple[App, TaskFunction[..., Any]]:
    """An app dispatching :func:`benchlib.noop_app.noop` to ``coordinator``'s task queue
    ``worker_type``."""
    made = App(
        root_url=coordinator.url,
        credentials=coordinator.credentials,
        task_queue=f"{PROVISIONER_ID}/{worker_type}",
    )
    return made, made.task(noop_app.noop)
