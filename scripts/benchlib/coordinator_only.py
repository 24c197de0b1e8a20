"""Row 3, the coordinator alone: no Azure in the path.

A ``queue-coordinator serve`` process without an Azure connection string (so createTask puts
no hint). First ``producers`` concurrent createTask calls pre-create up to
``lifecycle_tasks`` pending runs (measured too: the create share of a lifecycle); then
``workers x batch`` concurrent clients take them one by one through claimTask +
reportCompleted with the worker SDK's HTTP client. Each phase is bounded by ``duration``.
The coordinator process's CPU time comes from psutil.
"""

from __future__ import annotations

import asyncio
import time
import uuid

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
from coordinator.service.clock import wall_clock
from worker_sdk.client import CoordinatorClient
from worker_sdk.errors import RequestFailed


def _meter(running: Coordinator, store: StoreKind) -> CpuMeter:
    groups = {"coordinator": pids(running.process), "client": own_process}
    if store == "postgres":
        groups["postgres"] = postgres_backends(running.database)
    return CpuMeter(groups)


async def run(settings: Settings, store: StoreKind) -> list[Row]:
    label = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[store]
    create_row = Row(
        key=f"coord-{store}-create",
        title=f"coordinator alone, {label}: createTask (no Azure)",
        unit="req/s",
    )
    lifecycle_row = Row(
        key=f"coord-{store}",
        title=f"coordinator alone, {label}: claimTask + reportCompleted",
        unit="req/s",
    )
    workdir = settings.workdir / f"coord-{store}"
    async with (
        coordinator(
            settings, store=store, workdir=workdir, azure_connection_string=None
        ) as running,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=settings.workers * settings.batch + 8)
        ) as session,
    ):
        task_ids = await _create(settings, running, store, session, create_row)
        await _lifecycles(settings, running, store, session, task_ids, lifecycle_row)
    if create_row.cpu_ms and lifecycle_row.cpu_ms:
        total = create_row.cpu_ms["coordinator"] + lifecycle_row.cpu_ms["coordinator"]
        lifecycle_row.notes.append(
            f"coordinator CPU per whole task (create + claim + report, no Azure): {total:.2f} ms"
        )
    return [create_row, lifecycle_row]


async def _create(
    settings: Settings,
    running: Coordinator,
    store: StoreKind,
    session: aiohttp.ClientSession,
    row: Row,
) -> list[str]:
    tasks = TaskClient(session, running)
    worker_type = f"wt-{uuid.uuid4().hex[:8]}"
    group = new_task_id()
    created: list[str] = []
    latencies: list[float] = []
    started = 0
    give_up = time.monotonic() + settings.duration

    async def producer() -> None:
        nonlocal started
        while started < settings.lifecycle_tasks and time.monotonic() < give_up:
            started += 1
            task_id = new_task_id()
            body = tasks.definition(
                worker_type=worker_type,
                task_group_id=group,
                priority=settings.priority,
                now_ms=wall_clock(),
            )
            sent = time.monotonic()
            await tasks.create(task_id, body)
            latencies.append(time.monotonic() - sent)
            created.append(task_id)

    meter = _meter(running, store)
    meter.start()
    begin = time.monotonic()
    await asyncio.gather(*(producer() for _ in range(settings.producers)))
    row.window = time.monotonic() - begin
    meter.stop()
    row.count = len(created)
    row.rate = row.count / row.window
    latency_fields(row, latencies)
    meter.fill(row)
    row.notes.append(f"{settings.producers} concurrent clients; CPU ms per createTask")
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

    concurrency = settings.workers * settings.batch
    meter = _meter(running, store)
    meter.start()
    begin = time.monotonic()
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    row.window = time.monotonic() - begin
    meter.stop()
    row.count = len(latencies)
    row.rate = 2 * row.count / row.window
    latency_fields(row, latencies)
    meter.fill(row, rate_per_item=2)
    row.notes.append(
        f"{concurrency} concurrent clients; items = lifecycles (2 requests each), "
        f"{row.count / row.window:,.0f} lifecycles/s; CPU ms per lifecycle; "
        "latency = claim + report"
    )
    if errors:
        row.notes.append(f"{errors} lifecycles failed")
