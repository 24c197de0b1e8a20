"""Hook schedules across real coordinator processes (docs/hooks.md), through the official
``taskcluster.Hooks`` client: a hook every 2 s on two replicas, one SIGKILLed meanwhile,
creates one task per due time; a coordinator down for three periods fires the missed due time
once when it comes back."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import pytest
import slugid
from taskcluster.exceptions import TaskclusterRestFailure

from coordinator.domain.hooks import fire_task_id
from coordinator.domain.records import from_iso
from coordinator.service.clients_file import ensure_root_client
from devharness.waiting import wait_until
from tests.fixtures.clients import Hooks, Queue
from tests.fixtures.coordinator import CoordinatorProcess, base_config
from tests.fixtures.replicas import Cluster, MakeProcess

EVERY_2_S = "*/2 * * * * *"
PERIOD_MS = 2_000


def hook_body(tag: str) -> dict[str, Any]:
    """A hook every 2 s whose tasks carry ``tags.hook = tag``."""
    return {
        "metadata": {"name": tag, "description": "every 2 s", "owner": "me@example.com"},
        "schedule": [EVERY_2_S],
        "task": {
            "provisionerId": "hooks-e2e",
            "workerType": "wt",
            "tags": {"hook": tag},
            "payload": {"firedBy": "${firedBy}"},
            "metadata": {
                "name": "scheduled",
                "description": "made by a hook",
                "owner": "me@example.com",
                "source": "https://example.com/hooks",
            },
        },
    }


def credentials(root: Any) -> dict[str, str]:
    return {"clientId": root.client_id, "accessToken": root.access_token}


async def due_times(hooks: Hooks, queue: Queue, group: str, hook_id: str) -> list[int]:
    """The due times (their task's ``created``) of the hook's fires so far, oldest first; each
    fire must have succeeded."""
    try:
        fires = (await hooks.listLastFires(group, hook_id))["lastFires"]
    except TaskclusterRestFailure as error:
        if error.status_code == 404:  # never fired yet
            return []
        raise
    assert {f["result"] for f in fires} == {"success"}, fires
    tasks = await asyncio.gather(*(queue.task(f["taskId"]) for f in fires))
    return sorted(from_iso(task["created"]) for task in tasks)


async def tasks_of(cluster: Cluster, group: str, hook_id: str, tag: str) -> list[int]:
    """The ``created`` of every task the hook made (listed by tag through the management API),
    each checked to carry the taskId derived from its due time."""
    status, body = await cluster.call(1, "GET", f"/tasks?tag=hook:{tag}&limit=1000")
    assert status == 200, body
    created = []
    for item in body["tasks"]:
        due = from_iso(item["task"]["created"])
        assert item["status"]["taskId"] == fire_task_id(group, hook_id, due)
        created.append(due)
    return sorted(created)


@pytest.mark.slow(seconds=20, waits=True)
async def test_two_replicas_one_killed_create_one_task_per_due_time(
    cluster: Cluster,
) -> None:
    tag = slugid.nice()
    survivor = Hooks("aio", cluster.replicas[1].url, credentials(cluster.root))
    queue = Queue("aio", cluster.replicas[1].url)
    await survivor.createHook("e2e", tag, hook_body(tag))
    start = time.time() * 1000

    async def fired(count: int) -> bool:
        return len(await due_times(survivor, queue, "e2e", tag)) >= count

    await wait_until(lambda: fired(4), within=15, what="4 fires on two replicas")
    await cluster.processes[0].kill()
    await wait_until(lambda: fired(10), within=20, what="10 fires in all")
    await survivor.removeHook("e2e", tag)  # stops the schedule
    end = time.time() * 1000

    created = await tasks_of(cluster, "e2e", tag, tag)
    assert len(created) == len(set(created)), "a due time fired twice"
    assert all(later - earlier == PERIOD_MS for earlier, later in itertools.pairwise(created))
    # every due time of the 20-odd seconds, each once (±1 for the edges of the window)
    assert abs(len(created) - (end - start) / PERIOD_MS) <= 1, (len(created), end - start)


async def test_a_coordinator_down_for_three_periods_fires_the_missed_due_time_once(
    tmp_path: Path, coordinator_process: MakeProcess
) -> None:
    root = ensure_root_client(tmp_path / "clients.json")
    process: CoordinatorProcess = coordinator_process(
        base_config(tmp_path, auth_enabled=True, resolver_interval_ms=200)
    )
    running = await process.start()
    hooks = Hooks("aio", running.url, credentials(root))
    queue = Queue("aio", running.url)
    tag = slugid.nice()
    await hooks.createHook("e2e", tag, hook_body(tag))

    async def fired_since(moment: float) -> bool:
        return any(due > moment for due in await due_times(hooks, queue, "e2e", tag))

    await wait_until(lambda: fired_since(0), within=10, what="a first fire")
    await process.kill()
    down_since = time.time() * 1000
    await asyncio.sleep(3 * PERIOD_MS / 1000 + 0.5)  # the outage itself: three periods
    back = time.time() * 1000
    await process.start()

    await wait_until(lambda: fired_since(back), within=10, what="a fire due after the return")
    times = await due_times(hooks, queue, "e2e", tag)
    missed = [due for due in times if down_since < due <= back]
    assert len(missed) == 1, (times, down_since, back)  # three due times passed while down
    assert all(later - earlier >= PERIOD_MS for earlier, later in itertools.pairwise(times))
