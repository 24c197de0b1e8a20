"""Row 3, the coordinator alone: no Azure in the path.

A ``queue-coordinator serve`` process without an Azure connection string (so creating a task
puts no hint), driven two ways, each in two measured phases bounded by ``duration``:

* ``coord-<store>-single``: ``producers`` concurrent createTask calls pre-create up to
  ``lifecycle_tasks`` pending runs; then ``workers x batch`` concurrent clients take them one
  by one through claimTask + reportCompleted with the worker SDK's HTTP client.
* ``coord-<store>``: ``create_requests`` concurrent createTasks of ``create_batch`` tasks
  pre-create ten times as many; then ``workers x 2`` concurrent clients take them ``batch``
  at a time through one claimRuns and one resolveRuns.

The coordinator process's CPU time comes from psutil; the lifecycle row's note adds both
phases up into lifecycles per second per coordinator core.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable

import aiohttp

from benchlib.common import (
    CpuMeter,
    Row,
    Settings,
    latency_fields,
    own_process,
    pids,
    postgres_backends,
)
from benchlib.coordproc import Coordinator, StoreKind, TaskClient, coordinator, new_task_id
from worker_sdk.client import CoordinatorClient
from worker_sdk.errors import RequestFailed


def _meter(running: Coordinator, store: StoreKind) -> CpuMeter:
    groups = {"coordinator": pids(running.process), "client": own_process}
    if store == "postgres":
        groups["postgres"] = postgres_backends(running.database)
    return CpuMeter(groups)


BATCH_TASK_FACTOR = 10
"""The batch rows take ``lifecycle_tasks`` times this many tasks through (each phase still
bounded by ``duration``): they go through them about that much faster."""


async def run(settings: Settings, store: StoreKind, *, batching: bool) -> list[Row]:
    label = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[store]
    key = f"coord-{store}" if batching else f"coord-{store}-single"
    if batching:
        create_title = (
            f"coordinator alone, {label}: createTasks, {settings.create_batch} per request "
            "(no Azure)"
        )
        lifecycle_title = (
            f"coordinator alone, {label}: claimRuns + resolveRuns, {settings.batch} runs per "
            "request"
        )
    else:
        create_title = f"coordinator alone, {label}: createTask (no Azure)"
        lifecycle_title = f"coordinator alone, {label}: claimTask + reportCompleted"
    create_row = Row(key=f"{key}-create", title=create_title, unit="tasks/s")
    lifecycle_row = Row(key=key, title=lifecycle_title, unit="lifecycles/s")
    workdir = settings.workdir / key
    profile = workdir / "coordinator.pyisession" if settings.profile else None
    async with (
        coordinator(
            settings, store=store, workdir=workdir, azure_connection_string=None, profile=profile
        ) as running,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=settings.workers * settings.batch + 8)
        ) as session,
    ):
        tasks = TaskClient(session, running)
        task_ids = await _create(settings, running, store, tasks, create_row, batching=batching)
        if batching:
            await _batch_lifecycles(settings, running, store, tasks, task_ids, lifecycle_row)
        else:
            await _lifecycles(settings, running, store, session, task_ids, lifecycle_row)
    if create_row.cpu_ms and lifecycle_row.cpu_ms:
        total = create_row.cpu_ms["coordinator"] + lifecycle_row.cpu_ms["coordinator"]
        lifecycle_row.notes.append(
            f"coordinator CPU per whole task (create + claim + report, no Azure): {total:.2f} "
            f"ms, so {1000 / total:,.0f} lifecycles/s per coordinator core"
        )
    return [create_row, lifecycle_row]


async def _phase(
    running: Coordinator,
    store: StoreKind,
    row: Row,
    clients: list[Awaitable[None]],
) -> None:
    """Run ``clients`` to the end, metering the coordinator (and PostgreSQL) meanwhile."""
    meter = _meter(running, store)
    meter.start()
    begin = time.monotonic()
    await asyncio.gather(*clients)
    row.window = time.monotonic() - begin
    meter.stop()
    row.rate = row.count / row.window
    meter.fill(row)


async def _create(
    settings: Settings,
    running: Coordinator,
    store: StoreKind,
    tasks: TaskClient,
    row: Row,
    *,
    batching: bool,
) -> list[str]:
    """Create the pending runs the lifecycle phase takes: ``producers`` concurrent createTask
    calls, or ``create_requests`` concurrent createTasks of ``create_batch`` (ten times as many
    tasks in all); the row counts tasks, its latency is per request."""
    worker_type = f"wt-{uuid.uuid4().hex[:8]}"
    group = new_task_id()
    per_request = settings.create_batch if batching else 1
    clients = settings.create_requests if batching else settings.producers
    wanted = settings.lifecycle_tasks * (BATCH_TASK_FACTOR if batching else 1)
    created: list[str] = []
    latencies: list[float] = []
    started = 0
    give_up = time.monotonic() + settings.duration

    async def producer() -> None:
        nonlocal started
        while started < wanted and time.monotonic() < give_up:
            count = min(per_request, wanted - started)
            started += count
            items = tasks.new_tasks(
                count, worker_type=worker_type, task_group_id=group, priority=settings.priority
            )
            sent = time.monotonic()
            if await tasks.send(items, batch=batching) != count:
                raise RuntimeError("createTasks refused some of the bench's tasks")
            latencies.append(time.monotonic() - sent)
            created.extend(task_id for task_id, _ in items)
            row.count += count

    await _phase(running, store, row, [producer() for _ in range(clients)])
    latency_fields(row, latencies)
    what = f"createTasks requests of {per_request}" if batching else "createTask clients"
    row.notes.append(f"{clients} concurrent {what}; CPU ms per task; latency per request")
    return created


async def _lifecycles(
    settings: Settings,
    running: Coordinator,
    store: StoreKind,
    session: aiohttp.ClientSession,
    task_ids: list[str],
    row: Row,
) -> None:
    client = CoordinatorClient(
        session=session, root_url=running.url, credentials=running.credentials
    )
    pending = iter(task_ids)
    latencies: list[float] = []
    errors = 0
    give_up = time.monotonic() + settings.duration

    async def worker(k: int) -> None:
        nonlocal errors
        for task_id in pending:
            if time.monotonic() >= give_up:
                return
            sent = time.monotonic()
            try:
                claim = await client.claim_task(
                    task_id, 0, worker_group="bench", worker_id=f"client-{k}"
                )
                await client.report_completed(task_id, 0, credentials=claim.credentials)
            except RequestFailed:
                errors += 1
                continue
            latencies.append(time.monotonic() - sent)
            row.count += 1

    concurrency = settings.workers * settings.batch
    await _phase(running, store, row, [worker(k) for k in range(concurrency)])
    latency_fields(row, latencies)
    row.notes.append(
        f"{concurrency} concurrent clients, 2 requests per lifecycle; CPU ms per lifecycle; "
        "latency = claim + report"
    )
    if errors:
        row.notes.append(f"{errors} lifecycles failed")


async def _batch_lifecycles(
    settings: Settings,
    running: Coordinator,
    store: StoreKind,
    tasks: TaskClient,
    task_ids: list[str],
    row: Row,
) -> None:
    batches = iter(
        [task_ids[i : i + settings.batch] for i in range(0, len(task_ids), settings.batch)]
    )
    latencies: list[float] = []
    refused = 0
    give_up = time.monotonic() + settings.duration

    async def worker(k: int) -> None:
        nonlocal refused
        for batch in batches:
            if time.monotonic() >= give_up:
                return
            runs = [{"taskId": task_id, "runId": 0} for task_id in batch]
            sent = time.monotonic()
            claims = await tasks.claim_runs(runs, worker_group="bench", worker_id=f"client-{k}")
            held = [run for run, claim in zip(runs, claims, strict=True) if "error" not in claim]
            reports = await tasks.resolve_runs([{**run, "resolution": "completed"} for run in held])
            done = sum(1 for report in reports if "error" not in report)
            refused += len(runs) - done
            latencies.append(time.monotonic() - sent)
            row.count += done

    concurrency = settings.workers * 2
    await _phase(running, store, row, [worker(k) for k in range(concurrency)])
    latency_fields(row, latencies)
    row.notes.append(
        f"{concurrency} concurrent clients, one claimRuns and one resolveRuns of "
        f"{settings.batch} runs per round; CPU ms per lifecycle; latency per round"
    )
    if refused:
        row.notes.append(f"{refused} runs refused")
