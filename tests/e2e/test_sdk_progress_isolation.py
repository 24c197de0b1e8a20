"""run.progress from a handler under ``isolation="process"``, against a real in-process
coordinator: the child process sends its reports itself, with the run's temporary
credentials, and its last value reaches the coordinator before the run is reported.

The handler is a module-level function, because a child process imports its handler by name.
"""

from __future__ import annotations

import os

from hawk_signing import Credentials
from tests.fixtures.sdk import MakeSetup, last_run, running
from worker_sdk import TaskHandle, TaskRun
from worker_sdk.connection import Connection


def reporting(run: TaskRun) -> None:
    for step in range(20):
        run.progress(step / 40, "counting")
    run.progress(0.9, f"from process {os.getpid()}")


async def test_an_isolated_handlers_last_progress_reaches_the_coordinator(
    setup: MakeSetup,
) -> None:
    s = await setup()
    task_id = await s.create()
    async with running(s.worker(reporting, isolation="process")):
        await s.resolved(task_id)
    assert last_run(await s.status(task_id)) == ("completed", "completed")
    connection = Connection(
        root_urls=[s.root_url], credentials=Credentials.from_json(dict(s.worker_credentials))
    )
    [last] = await TaskHandle(task_id=task_id, connection=connection).progress()
    await connection.aclose()
    assert last.fraction == 0.9
    assert last.message is not None and last.message.startswith("from process ")
    assert last.message != f"from process {os.getpid()}"  # the child's, not the worker's
