"""A task queue's pause and limits under real ``queue-worker`` processes and real replicas:
a paused queue keeps its 100 tasks pending under two polling workers and a claimWork worker,
then drains on resume; ``maxRunning=3`` holds under four workers of capacity 4 (sampled);
``maxClaimsPerSecond=20`` holds within 10 % over 20 s with claims spread over two replicas.

The rules themselves, on both drivers, are in tests/integration/test_queue_controls.py.
"""

from __future__ import annotations

import asyncio
import collections
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest
import slugid

from coordinator.service.clients_file import ensure_root_client
from devharness.api import call
from devharness.tasks import task_definition
from tests.fixtures.replicas import WORKER_TYPE, Cluster
from tests.fixtures.workers import E2E, MakeE2E


async def control(setup: E2E, method: str, suffix: str, body: Any = None) -> dict[str, Any]:
    """pauseTaskQueue, resumeTaskQueue or setTaskQueueLimits of the test's queue, as root."""
    root = ensure_root_client(setup.directory / "clients.json")
    queue = urllib.parse.quote(f"{setup.provisioner_id}/{setup.worker_type}", safe="")
    answer = await call(
        setup.coordinator.session,
        method,
        f"{setup.coordinator.api}/task-queues/{queue}/{suffix}",
        body,
        credentials=root,
    )
    assert answer.status == 200, answer.body
    result: dict[str, Any] = answer.body
    return result


async def counts(setup: E2E) -> dict[str, int]:
    """countTasks of the test's queue, by state."""
    queue = urllib.parse.quote(f"{setup.provisioner_id}/{setup.worker_type}", safe="")
    states: dict[str, int] = (
        await setup.coordinator.ok("GET", f"/tasks/count?taskQueueId={queue}")
    )["states"]
    return states


@pytest.mark.slow(seconds=22, waits=True)
async def test_a_paused_queue_keeps_its_tasks_pending_under_workers_then_drains(
    e2e: MakeE2E,
) -> None:
    setup = await e2e(claim_work=False)
    await control(setup, "POST", "pause", {"reason": "e2e"})
    task_ids = await asyncio.gather(*(setup.create(sleep=0) for _ in range(100)))
    pollers = [await setup.start_worker(f"poll{n}", capacity=4) for n in (1, 2)]
    await setup.start_worker("claim-work", capacity=4, flags=["--claim-work"])

    # Every poller had a hint refused twice, a Retry-After (5 s) apart: the hint it released
    # came back and was refused again, while the claimWork worker's long polls got nothing.
    for poller in pollers:

        async def released_twice(log: Callable[[], str] = poller.log) -> bool:
            return _released_twice(log())

        await setup.eventually(released_twice, what=f"{poller.name} refused a hint twice")
    assert setup.events("start") == []
    assert (await counts(setup))["pending"] == 100

    await control(setup, "POST", "resume")
    await setup.resolved(*task_ids, within=60)
    starts = collections.Counter(e["taskId"] for e in setup.events("start"))
    assert starts == {task_id: 1 for task_id in task_ids}
    assert (await counts(setup))["completed"] == 100


def _released_twice(log: str) -> bool:
    """Whether one hint's run was refused and released twice (it came back after
    Retry-After)."""
    released = [
        line.split("taskId=")[1].split()[0]
        for line in log.splitlines()
        if "claim throttled, hint released" in line
    ]
    return any(count >= 2 for count in collections.Counter(released).values())


async def test_max_running_holds_under_four_workers_of_capacity_four(e2e: MakeE2E) -> None:
    setup = await e2e(claim_work=False)
    await control(setup, "PUT", "limits", {"maxRunning": 3})
    task_ids = await asyncio.gather(*(setup.create(sleep=0.4) for _ in range(24)))
    for n in range(4):
        await setup.start_worker(f"w{n}", capacity=4)

    samples: list[int] = []

    async def drained() -> bool:
        found = await counts(setup)
        samples.append(found["running"])
        return found["completed"] == len(task_ids)

    await setup.eventually(drained, within=60, what="24 tasks completed three at a time")
    assert max(samples) == 3, samples  # the limit was reached, and never passed
    assert len(samples) > 20
    # what the handlers saw: never more than three at once either
    events = sorted(
        [(e["t"], 1) for e in setup.events("start")] + [(e["t"], -1) for e in setup.events("end")]
    )
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    assert peak <= 3


@pytest.mark.slow(seconds=22, waits=True)
async def test_max_claims_per_second_holds_across_two_replicas(cluster: Cluster) -> None:
    queue = f"{cluster.provisioner_id}/{WORKER_TYPE}"
    status, body = await cluster.call(
        0,
        "PUT",
        f"/task-queues/{urllib.parse.quote(queue, safe='')}/limits",
        {"maxClaimsPerSecond": 20},
    )
    assert status == 200, body
    pending: collections.deque[str] = collections.deque()
    for _ in range(2):  # 600 tasks: more than 20 s at 20 claims a second can take
        items = [
            {
                "taskId": slugid.nice(),
                "task": task_definition(
                    provisionerId=cluster.provisioner_id, workerType=WORKER_TYPE
                ),
            }
            for _ in range(300)
        ]
        status, body = await cluster.call(0, "PUT", "/tasks", {"tasks": items})
        assert status == 200, body
        pending.extend(item["taskId"] for item in items)
    # Both replicas must have loaded the limit (they reload every second) before the window.
    for replica in (0, 1):
        status, body = await cluster.call(
            replica,
            "POST",
            f"/task/{pending[0]}/runs/0/claim",
            {"workerGroup": "g", "workerId": "probe"},
        )
        assert status in (200, 429), body
        if status == 200:
            pending.popleft()

    claimed: list[float] = []
    refused = 0
    window_s = 20.0
    start = time.monotonic()

    async def claimer(replica: int, number: int) -> None:
        nonlocal refused
        while time.monotonic() - start < window_s:
            task_id = pending.popleft()
            status, body = await cluster.call(
                replica,
                "POST",
                f"/task/{task_id}/runs/0/claim",
                {"workerGroup": "g", "workerId": f"r{replica}c{number}"},
            )
            if status == 200:
                claimed.append(time.monotonic() - start)
                continue
            assert status == 429, body
            refused += 1
            pending.appendleft(task_id)
            await asyncio.sleep(0.05)  # pacing the pressure, not waiting for a state

    await asyncio.gather(*(claimer(replica, n) for replica in (0, 1) for n in range(2)))
    in_window = [t for t in claimed if t < window_s]
    print(f"maxClaimsPerSecond=20 on two replicas: {len(in_window)} claims in {window_s:.0f} s")
    assert 360 <= len(in_window) <= 440, (len(in_window), refused)
    assert refused > 0
    assert cluster.served[0] > 100 and cluster.served[1] > 100
