"""The programs of ``examples/`` run as the child processes they are, against an in-process
coordinator (SQLite, authentication off)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from devharness.processes import child_env, spawn
from tests.fixtures.coordinator import StartCoordinator


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
