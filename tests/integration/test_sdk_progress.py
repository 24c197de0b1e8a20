"""run.progress through a real in-process coordinator (auth on, Azure on Azurite), and
TaskHandle.progress() reading it: an async handler's and a sync handler's reports reach the
task's progress while the run is on, the last one is there once the run is resolved, and a
bad value is a ValueError in the handler that reports nothing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from devharness.waiting import wait_until
from hawk_signing import Credentials
from tests.fixtures.sdk import MakeSetup, Producer, last_run, running
from worker_sdk import TaskHandle, TaskRun
from worker_sdk.connection import Connection


def handle_of(s: Producer, task_id: str) -> TaskHandle:
    credentials = Credentials.from_json(dict(s.worker_credentials))
    return TaskHandle(
        task_id=task_id, connection=Connection(root_urls=[s.root_url], credentials=credentials)
    )


def sync_handler(release: threading.Event) -> Callable[[TaskRun], None]:
    def handle(run: TaskRun) -> None:
        run.progress(0.25, "a quarter")
        release.wait(30)
        for step in range(50):
            run.progress(step / 100)
        run.progress(1, "done")

    return handle


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_handlers_progress_is_read_while_it_runs_and_its_last_after(
    setup: MakeSetup, kind: str
) -> None:
    s = await setup()
    task_id = await s.create()
    handle = handle_of(s, task_id)
    assert await handle.progress() == []
    release = threading.Event()

    async def async_handler(run: TaskRun) -> None:
        run.progress(0.25, "a quarter")
        await asyncio.to_thread(release.wait, 30)
        for step in range(50):
            run.progress(step / 100)
        run.progress(1, "done")

    handler = async_handler if kind == "async" else sync_handler(release)
    async with running(s.worker(handler)):

        async def reported() -> bool:
            return [(p.fraction, p.message) for p in await handle.progress()] == [
                (0.25, "a quarter")
            ]

        await wait_until(reported, within=20, what="the first report")
        release.set()
        await s.resolved(task_id)
    assert last_run(await s.status(task_id)) == ("completed", "completed")
    [last] = await handle.progress()
    assert (last.run_id, last.fraction, last.message) == (0, 1.0, "done")
    assert await asyncio.to_thread(handle.progress_sync) == [last]
    await handle.connection.aclose()
    await asyncio.to_thread(handle.connection.close)


async def test_a_bad_value_is_a_value_error_in_the_handler(setup: MakeSetup) -> None:
    s = await setup()
    task_id = await s.create()
    refusals: list[str] = []

    async def handler(run: TaskRun) -> None:
        for fraction in (1.5, float("nan")):
            try:
                run.progress(fraction)
            except ValueError as error:
                refusals.append(str(error))

    async with running(s.worker(handler)):
        await s.resolved(task_id)
    assert len(refusals) == 2 and all("fraction" in refusal for refusal in refusals)
    assert await handle_of(s, task_id).progress() == []
