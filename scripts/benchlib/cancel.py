"""Cancel latency rows: how soon cancelTask reaches a running handler.

``cancel-store`` (store dispatch: the worker claims through claimWork) and ``cancel-azure``
(Azure dispatch on Azurite), each on a SQLite store: an in-process worker of the SDK with
capacity ``batch`` runs ``batch`` tasks whose async handlers wait forever; once all of them
run, the bench cancels them one by one at spread times over the window (cancelTask, open loop)
and takes, for each, the time from cancelTask's answer to the handler's ``CancelledError``
(both on this process's monotonic clock): p50 and p99. The rate is the cancels a second; the
CPU is the coordinator's and this process's (the worker and the client in one).
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

import aiohttp
import slugid

from benchlib.common import CpuMeter, Row, Settings, latency_fields, own_process, pids
from benchlib.coordproc import PROVISIONER_ID, Coordinator, TaskClient, coordinator
from devharness.api import call
from devharness.azurite import AzuriteProcess
from devharness.waiting import wait_until
from worker_sdk import TaskRun, Worker

Mode = Literal["store", "azure"]
WORKER_TYPE = "bench-cancel"
GIVE_UP_AFTER = 30.0
"""Seconds a handler may take to start, or to see its cancel, before the row fails."""


class _Handlers:
    """The waiting handlers: when each started and when it saw its cancel (monotonic)."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.cancelled: dict[str, float] = {}

    async def __call__(self, run: TaskRun) -> None:
        self.started[run.task_id] = time.monotonic()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled[run.task_id] = time.monotonic()
            raise


async def run(settings: Settings, mode: Mode) -> Row:
    row = Row(
        key=f"cancel-{mode}",
        title=f"cancelTask -> handler cancelled, {mode} dispatch, SQLite",
        unit="cancels/s",
    )
    if mode == "azure":
        async with AzuriteProcess() as azurite:
            return await _measure(settings, row, mode, azurite.connection_string)
    return await _measure(settings, row, mode, None)


async def _measure(settings: Settings, row: Row, mode: Mode, azure: str | None) -> Row:
    count = settings.batch
    async with (
        coordinator(
            settings,
            store="sqlite",
            workdir=settings.workdir / row.key,
            azure_connection_string=azure,
        ) as running,
        aiohttp.ClientSession() as session,
    ):
        handlers = _Handlers()
        worker = Worker(
            handler=handlers,
            root_url=running.url,
            credentials=running.credentials,
            provisioner_id=PROVISIONER_ID,
            worker_type=WORKER_TYPE,
            capacity=count,
            claim_work=mode == "store",
            idle_delay=0.05,
            run_log=False,
            handle_signals=False,
        )
        tasks = TaskClient.new_tasks(
            count, worker_type=WORKER_TYPE, task_group_id=slugid.nice(), priority=settings.priority
        )
        serving = asyncio.create_task(worker.run())
        try:
            await TaskClient(session, running).create_many(tasks)
            await wait_until(
                lambda: len(handlers.started) == count,
                within=GIVE_UP_AFTER,
                what=f"{count} handlers running",
            )
            meter = CpuMeter({"coordinator": pids(running.process), "worker+bench": own_process})
            latencies = await _cancel_spread(
                settings, session, running, [task_id for task_id, _ in tasks], handlers, meter
            )
        finally:
            worker.stop()
            await asyncio.wait_for(serving, GIVE_UP_AFTER)
    row.count, row.window = len(latencies), settings.duration
    row.rate = row.count / row.window
    meter.fill(row)
    latency_fields(row, latencies)
    row.notes.append(
        f"{count} running async handlers, one cancelTask every {settings.duration / count:.2f} s; "
        "p50/p99: cancelTask's answer -> the handler's CancelledError"
    )
    return row


async def _cancel_spread(
    settings: Settings,
    session: aiohttp.ClientSession,
    running: Coordinator,
    task_ids: list[str],
    handlers: _Handlers,
    meter: CpuMeter,
) -> list[float]:
    """Cancel the tasks one by one over the window; the seconds each took to reach its
    handler."""
    answered: dict[str, float] = {}
    spacing = settings.duration / len(task_ids)
    meter.start()
    begin = time.monotonic()
    for index, task_id in enumerate(task_ids):
        await asyncio.sleep(max(0.0, begin + index * spacing - time.monotonic()))
        response = await call(
            session,
            "POST",
            f"{running.api}/task/{task_id}/cancel",
            credentials=running.credentials,
        )
        answered[task_id] = time.monotonic()
        if response.status != 200:
            raise RuntimeError(f"cancelTask {task_id} -> {response.status}: {response.body}")
    await wait_until(
        lambda: len(handlers.cancelled) == len(task_ids),
        within=GIVE_UP_AFTER,
        interval=0.01,
        what="every handler cancelled",
    )
    meter.stop()
    # a handler may see its cancel before the bench has read cancelTask's answer: 0 then
    return [max(0.0, handlers.cancelled[t] - answered[t]) for t in task_ids]
