"""Cancelling running work reaches the worker SDK's handler at once, in both dispatch modes.

An in-process worker runs three handlers of one kind (an async one, a sync one in a thread, an
isolated one in a child process); each task is then cancelled a different way (cancelTask,
cancelTaskGroup, the management API's cancelTasks). Each handler must observe it within
:data:`DEADLINE` (the async one gets ``CancelledError``, the sync one sees ``run.cancelled``,
the isolated one's process is ended), the worker must free the slots (it then runs three more
tasks at its capacity of three) and report nothing for the cancelled runs: they stay
``exception/canceled`` with no run log uploaded. Store dispatch runs on PostgreSQL, Azure
dispatch (Azurite) on SQLite. An ``@app.task`` function is cancelled so too; a coordinator
without watchRuns (an older release) is asked once, and the worker goes on without it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import slugid

from devharness.api import call
from devharness.waiting import wait_until
from hawk_signing import Credentials
from tests.fixtures.coordinator import StartCoordinator
from tests.fixtures.coordinator_double import CoordinatorDouble, eventually
from tests.fixtures.sdk import MakeSetup, Producer, last_run, make_worker, reports, running
from worker_sdk import App, TaskRun

DEADLINE = 3.0
"""How long a cancel may take to reach a handler here (the bench measures the p99 against its
2 s bound; a test on a loaded machine gets some slack)."""

CAPACITY = 3

log = logging.getLogger(__name__)


def hang_in_child(run: TaskRun) -> None:
    """The isolated handler: writes its process id to ``payload["pid_file"]`` and hangs; a
    task without one logs a line (its run log) and completes."""
    pid_file = run.payload.get("pid_file")
    if pid_file is None:
        log.warning("completing taskId=%s", run.task_id)
    else:
        Path(pid_file).write_text(str(os.getpid()))
        time.sleep(3600)


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class Observed:
    """When each hanging handler started and when it observed its cancel (monotonic)."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.stopped: dict[str, float] = {}
        self._lock = threading.Lock()

    def start(self, task_id: str) -> None:
        with self._lock:
            self.started[task_id] = time.monotonic()

    def stop(self, task_id: str) -> None:
        with self._lock:
            self.stopped[task_id] = time.monotonic()


def handler_of(kind: str, observed: Observed) -> Callable[[TaskRun], Any]:
    """A handler of ``kind`` that hangs on tasks whose payload says ``hang`` and completes
    the others, logging a line (their run log)."""

    async def async_handler(run: TaskRun) -> None:
        if not run.payload.get("hang"):
            log.warning("completing taskId=%s", run.task_id)
            return
        observed.start(run.task_id)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            observed.stop(run.task_id)
            raise

    def thread_handler(run: TaskRun) -> None:
        if not run.payload.get("hang"):
            log.warning("completing taskId=%s", run.task_id)
            return
        observed.start(run.task_id)
        if run.cancelled.wait(30):
            observed.stop(run.task_id)

    return {"async": async_handler, "thread": thread_handler, "isolated": hang_in_child}[kind]


async def producer(setup: MakeSetup, mode: str, postgres_url: str) -> Producer:
    if mode == "store":
        return await setup(dispatch="store", store_url=postgres_url)
    return await setup()


@pytest.mark.parametrize("mode", ["azure", "store"])
@pytest.mark.parametrize("kind", ["async", "thread", "isolated"])
async def test_every_way_of_cancelling_stops_the_running_handler_at_once(
    setup: MakeSetup, postgres_schema_url: str, tmp_path: Path, mode: str, kind: str
) -> None:
    s = await producer(setup, mode, postgres_schema_url)
    ways = ("cancelTask", "cancelTaskGroup", "cancelTasks")
    tasks = {way: await s.create(hang=True, pid_file=str(tmp_path / f"{way}.pid")) for way in ways}
    observed = Observed()
    worker = s.worker(
        handler_of(kind, observed),
        capacity=CAPACITY,
        claim_work=mode == "store",
        isolation="process" if kind == "isolated" else "none",
    )
    root = Credentials.from_json(dict(s.worker_credentials))

    async def cancel(http: aiohttp.ClientSession, way: str, task_id: str) -> None:
        api = f"{s.root_url}/api/queue/v1"
        if way == "cancelTask":
            await s.queue.cancelTask(task_id)
            return
        if way == "cancelTaskGroup":  # the task is its own group
            await s.queue.sealTaskGroup(task_id)
            await s.queue.cancelTaskGroup(task_id)
            return
        answer = await call(
            http, "POST", f"{api}/tasks/cancel?taskGroupId={task_id}", credentials=root
        )
        assert answer.body == {"cancelled": 1}, answer.body

    async def started(way: str) -> float:
        """When the handler of ``way``'s task started (an isolated one: its process id)."""
        task_id = tasks[way]
        if kind != "isolated":
            await wait_until(lambda: task_id in observed.started, what=f"{way}'s handler")
            return observed.started[task_id]
        pid_file = tmp_path / f"{way}.pid"
        await wait_until(lambda: pid_file.exists() and bool(pid_file.read_text()), what="its pid")
        return float(pid_file.read_text())

    async def stopped_within(way: str, cancelled_at: float, pid: float) -> float:
        task_id = tasks[way]
        if kind == "isolated":
            await wait_until(lambda: pid_gone(int(pid)), within=30, interval=0.01, what="exit")
            return time.monotonic() - cancelled_at
        await wait_until(
            lambda: task_id in observed.stopped, within=30, interval=0.01, what="the cancel"
        )
        return observed.stopped[task_id] - cancelled_at

    async with running(worker), aiohttp.ClientSession() as http:
        took = {}
        for way in ways:
            pid = await started(way)
            await cancel(http, way, tasks[way])
            took[way] = await stopped_within(way, time.monotonic(), pid)
        # the three slots are free again: three more tasks run at once
        more = [await s.create() for _ in range(CAPACITY)]
        await s.resolved(*more)

    assert all(seconds < DEADLINE for seconds in took.values()), took
    for task_id in more:
        assert last_run(await s.status(task_id)) == ("completed", "completed")
        logs = await s.queue.listArtifacts(task_id, 0)
        assert [a["name"] for a in logs["artifacts"]] == ["public/logs/live_backing.log"]
    for way, task_id in tasks.items():
        status = await s.status(task_id)
        assert [last_run(status)] == [("exception", "canceled")] and len(status["runs"]) == 1
        assert (await s.queue.listArtifacts(task_id, 0))["artifacts"] == [], way


APP_STARTED: dict[str, asyncio.Event] = {}
APP_CANCELLED: dict[str, float] = {}
"""What :func:`wait_for_cancel` saw, by the test's key."""


async def wait_for_cancel(key: str) -> None:
    """An app function that waits until it is cancelled, noting when."""
    APP_STARTED[key].set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        APP_CANCELLED[key] = time.monotonic()
        raise


async def test_cancelling_an_app_functions_task_cancels_the_function(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(dispatch="store", claim_work_timeout_ms=20_000)
    key = slugid.nice()
    APP_STARTED[key] = asyncio.Event()
    async with App(root_url=c.url, credentials=None, task_queue="fn-prov/fn-wt") as app:
        function = app.task(wait_for_cancel)
        handle = await function.dispatch(key)
        async with running(app.worker(idle_delay=0.05, handle_signals=False)):
            await asyncio.wait_for(APP_STARTED[key].wait(), 20)
            await handle.cancel()
            cancelled_at = time.monotonic()
            await wait_until(lambda: key in APP_CANCELLED, within=30, interval=0.01, what="it")
    assert APP_CANCELLED[key] - cancelled_at < DEADLINE
    status = await c.status(handle.task_id)
    assert [last_run(status)] == [("exception", "canceled")] and len(status["runs"]) == 1
    assert (await c.ok("GET", f"/task/{handle.task_id}/runs/0/artifacts"))["artifacts"] == []


async def test_a_coordinator_without_watch_runs_is_not_asked_again(
    double: CoordinatorDouble, caplog: pytest.LogCaptureFixture
) -> None:
    """An older coordinator (404): one INFO line, and the runs go on as before."""
    for number in range(3):
        double.add_task(f"t{number}")

    async def handle(run: TaskRun) -> None:
        await asyncio.sleep(0.3)  # long enough for a watch to be issued for each run

    with caplog.at_level(logging.INFO, logger="worker_sdk.cancellations"):
        async with running(make_worker(double, handle, capacity=1)):
            await eventually(lambda: len(double.reports) == 3, what="three reports")
    assert reports(double) == {f"t{n}": ("completed", None) for n in range(3)}
    lines = [r for r in caplog.records if r.name == "worker_sdk.cancellations"]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (
            logging.INFO,
            "the coordinator has no watchRuns (an older release): cancelled runs are noticed "
            "at their next reclaim",
        )
    ]
