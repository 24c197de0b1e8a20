"""The programs of ``examples/`` run as the child processes they are, against an in-process
coordinator (SQLite, authentication off; Azurite where a worker takes the tasks)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from devharness.azurite import AzuriteProcess
from devharness.processes import child_env, end_processes, spawn
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import StartCoordinator
from tests.fixtures.workers import QUEUE_WORKER


async def test_the_scheduling_example_creates_its_batch(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    c = await start_coordinator(run_resolvers=False)
    env = child_env(
        TASKCLUSTER_ROOT_URL=c.url,
        TASKCLUSTER_CLIENT_ID="examples",
        TASKCLUSTER_ACCESS_TOKEN="not checked: auth is off",
    )
    log = tmp_path / "example.log"
    process = await spawn([sys.executable, "-m", "examples.scheduling"], env=env, log=log)
    assert await asyncio.wait_for(process.wait(), 60) == 0, log.read_text()
    states = [json.loads(line.split(" ", 1)[1]) for line in log.read_text().splitlines()]
    assert states == ["pending", "pending", "pending", "unscheduled"]
    response = await c.call("GET", "/task-queues/examples%2Fscheduling/counts")
    assert (response.body["pending"], response.body["delayed"]) == (2, 1)


async def test_the_functions_example_runs_as_pasted(
    start_coordinator: StartCoordinator,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    tmp_path: Path,
) -> None:
    c = await start_coordinator(
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    env = child_env(
        TASKCLUSTER_ROOT_URL=c.url,
        TASKCLUSTER_CLIENT_ID="examples",
        TASKCLUSTER_ACCESS_TOKEN="not checked: auth is off",
    )
    worker_log, producer_log = tmp_path / "worker.log", tmp_path / "producer.log"
    worker = await spawn(
        [str(QUEUE_WORKER), "--app", "examples.tasks_app:app", "--capacity", "4"],
        env=env,
        log=worker_log,
    )
    try:
        producer = await spawn(
            [sys.executable, "-m", "examples.tasks_producer"], env=env, log=producer_log
        )
        status = await asyncio.wait_for(producer.wait(), 60)
        assert status == 0, producer_log.read_text() + worker_log.read_text()[-3000:]
    finally:
        await end_processes([worker], signum=signal.SIGTERM)
    printed = producer_log.read_text()
    assert "add(2, 3): 5" in printed
    assert "word_count: {'the': 2, 'cat': 1, 'and': 1, 'hat': 1}" in printed
    assert "send_welcome_email(7), 2 s later: welcome mail sent to user 7" in printed
    assert (
        "send_welcome_email(13): failed: builtins.ConnectionError: mail server unreachable"
        in printed
    )
