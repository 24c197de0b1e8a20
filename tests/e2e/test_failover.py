"""End to end: a coordinator replica dies and its workers' work goes on (issue 24, item 2).

Two ``queue-coordinator serve`` replicas on one PostgreSQL schema: the ``cluster`` of
tests/e2e/test_replicas.py (claim timeout 3 s, the default poll visibility timeout of 300 s),
and real ``queue-worker`` processes running ``examples.hello:handle`` (a short sleep per task),
signing as a client with only the worker scopes. Tasks keep arriving while one replica is
SIGKILLed.

* One worker bound to each replica: the hints the dead replica's worker takes but cannot
  claim are released (``signedReleaseUrl``), and the runs it had claimed expire after 3 s
  and are retried, so the other worker completes every task well within the 300 s a hint
  hidden by the visibility timeout would cost. Measured before the release existed: 196 of
  200 in 120 s, 4 hidden for 300 s.
* One worker given both root URLs (``--root-url`` twice): it fails over to the live replica
  and keeps completing tasks, its claims and runs intact.

Every test ends by reading every task's runs back: each task completed exactly once.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import slugid

from devharness.processes import end_processes, spawn
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.replicas import Cluster, Work, create_tasks
from tests.fixtures.workers import (
    QUEUE_WORKER,
    WORKER_GROUP,
    WORKER_TYPE,
    WorkerProcess,
    worker_client,
)

HANDLER = "examples.hello:handle"
PAYLOAD = {"seconds": 0.1}
CAPACITY = 4
BOUND = 60.0
"""Seconds after the kill by which every task must be completed: far below the poll
visibility timeout (300 s) that a stranded hint waits out."""

StartWorker = Callable[..., Any]


@pytest.fixture
async def workers(cluster: Cluster, tmp_path: Path) -> AsyncIterator[StartWorker]:
    """``await workers(name, root_urls)``: a ``queue-worker`` process of this test's task
    queue with ``--root-url`` for each of ``root_urls``; all SIGKILLed at the end."""
    credentials = worker_client(tmp_path / "clients.json", cluster.provisioner_id)
    started: list[WorkerProcess] = []

    async def start(name: str, root_urls: Sequence[str]) -> WorkerProcess:
        env = {
            **os.environ,
            "TASKCLUSTER_CLIENT_ID": credentials["clientId"],
            "TASKCLUSTER_ACCESS_TOKEN": credentials["accessToken"],
        }
        for unset in ("TASKCLUSTER_ROOT_URL", "TASKCLUSTER_CERTIFICATE"):
            env.pop(unset, None)
        command = [
            str(QUEUE_WORKER),
            *(flag for url in root_urls for flag in ("--root-url", url)),
            "--provisioner-id",
            cluster.provisioner_id,
            "--worker-type",
            WORKER_TYPE,
            "--worker-group",
            WORKER_GROUP,
            "--worker-id",
            name,
            "--capacity",
            str(CAPACITY),
            HANDLER,
        ]
        log_path = tmp_path / f"worker-{name}.log"
        process = await spawn(command, env=env, log=log_path)
        started.append(WorkerProcess(name=name, process=process, log_path=log_path))
        return started[-1]

    yield start
    await end_processes((worker.process for worker in started), signum=signal.SIGKILL)


def new_work(cluster: Cluster, count: int) -> Work:
    """``count`` tasks of one task group for this test's task queue, not created yet."""
    group = slugid.nice()
    bodies = {
        slugid.nice(): task_definition(
            provisionerId=cluster.provisioner_id,
            workerType=WORKER_TYPE,
            taskGroupId=group,
            payload=PAYLOAD,
        )
        for _ in range(count)
    }
    return Work(group=group, bodies=bodies, to_abandon=set())


async def runs_of(cluster: Cluster, work: Work) -> dict[str, list[dict[str, Any]]]:
    """Every created task's runs, read from replica 0 a page of the group at a time."""
    runs: dict[str, list[dict[str, Any]]] = {}
    token = ""
    while True:
        query = f"?continuationToken={urllib.parse.quote(token)}" if token else ""
        status, page = await cluster.call(0, "GET", f"/task-group/{work.group}/list{query}")
        assert status == 200, page
        for entry in page["tasks"]:
            runs[entry["status"]["taskId"]] = entry["status"]["runs"]
        token = page.get("continuationToken", "")
        if not token:
            return runs


def completed_by(runs: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """taskId -> the workerId of its completed run, for the tasks completed so far."""
    return {
        task_id: run["workerId"]
        for task_id, task_runs in runs.items()
        for run in task_runs
        if run["state"] == "completed"
    }


def check_completed_once(runs: dict[str, list[dict[str, Any]]], work: Work) -> None:
    """Every task of ``work`` completed by exactly one run, its last; the runs before it
    expired with the claim of a worker that lost its replica."""
    assert set(runs) == set(work.bodies)
    for task_id, task_runs in runs.items():
        states = [(run["state"], run.get("reasonResolved")) for run in task_runs]
        assert states[-1] == ("completed", "completed"), (task_id, states)
        assert all(state == ("exception", "claim-expired") for state in states[:-1]), (
            task_id,
            states,
        )


async def test_a_dead_replica_strands_none_of_the_hints_its_worker_took(
    cluster: Cluster, workers: StartWorker
) -> None:
    work = new_work(cluster, 200)
    ids = list(work.bodies)
    survivor = await workers("w-live", [cluster.replicas[0].url])
    orphan = await workers("w-orphan", [cluster.replicas[1].url])
    killed_at: float | None = None
    progress: dict[str, str] = {}

    async def caught_up(backlog: int) -> bool:
        progress.update(completed_by(await runs_of(cluster, work)))
        return len(progress) >= len(work.created) - backlog

    async def both_working() -> bool:
        progress.update(completed_by(await runs_of(cluster, work)))
        return {"w-live", "w-orphan"} <= set(progress.values())

    for start in range(0, len(ids), 20):
        await create_tasks(cluster, work, ids[start : start + 20])
        if start == 80:
            # mid-way, once both workers have done work: the orphan's replica dies

            await wait_until(both_working, within=30, what="both workers completing tasks")
            await cluster.processes[1].kill()
            killed_at = time.monotonic()
        # the work keeps arriving, at the pace the workers take it
        await wait_until(lambda: caught_up(40), within=BOUND, what="the workers to catch up")
    assert killed_at is not None

    await wait_until(lambda: caught_up(0), within=BOUND, what="all 200 tasks completed")
    took = time.monotonic() - killed_at
    assert took < BOUND, f"all completed {took:.1f} s after the kill"
    check_completed_once(await runs_of(cluster, work), work)
    assert "claim failed, releasing hint" in orphan.log(), "the orphan took hints after the kill"
    assert "hint release failed" not in orphan.log()
    assert survivor.process.returncode is None and orphan.process.returncode is None


async def test_a_worker_given_both_root_urls_keeps_working_when_the_first_dies(
    cluster: Cluster, workers: StartWorker
) -> None:
    first, second = cluster.replicas[1].url, cluster.replicas[0].url
    worker = await workers("w-both", [first, second])
    work = new_work(cluster, 60)
    ids = list(work.bodies)
    done: dict[str, str] = {}

    async def completed(count: int) -> bool:
        done.update(completed_by(await runs_of(cluster, work)))
        return len(done) >= count

    await create_tasks(cluster, work, ids[:30])
    await wait_until(lambda: completed(10), within=30, what="10 tasks completed")
    await cluster.processes[1].kill()
    killed_at = time.monotonic()
    await create_tasks(cluster, work, ids[30:])
    await wait_until(lambda: completed(60), within=BOUND, what="all 60 tasks completed")

    assert time.monotonic() - killed_at < 30
    runs = await runs_of(cluster, work)
    check_completed_once(runs, work)
    assert all(len(task_runs) == 1 for task_runs in runs.values()), (
        "no claim of the worker's was lost in the failover"
    )
    assert set(done.values()) == {"w-both"}
    log = worker.log()
    assert f"coordinator failover rootUrl={second} previous={first}" in log
    assert "claim failed, releasing hint" not in log, "its claims went to the live replica"
    assert worker.process.returncode is None
