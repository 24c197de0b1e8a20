"""A rolling upgrade (docs/operations.md, Upgrading): the last release's coordinator, run from
a git worktree of the commit ``CHANGELOG.md`` records for it, and this one share one
PostgreSQL schema under store dispatch. The old one starts first and migrates the empty
schema to its release; the new one then applies the migrations added since. Tasks flow
through both, each created on one replica and claimed and completed on the other, while the
old one is stopped with SIGTERM; every task completes exactly once and the new one serves
on alone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
import slugid

from coordinator.service.clients_file import ensure_root_client
from coordinator.store.sqlfiles import migrations
from devharness.processes import REPO
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.coordinator import CoordinatorProcess, base_config
from tests.fixtures.releases import RELEASES, ReleaseStore, previous_release
from tests.fixtures.replicas import CLAIM_TIMEOUT_MS, Cluster

PROVISIONER = "upgrade"
LANES = 3
"""Concurrent producer-workers, each with a task queue of its own (one pending task at a
time, so its claimWork can only return that task)."""
TASKS_PER_LANE = 15
STOP_AFTER = 12
"""Tasks completed, over all lanes, before the old replica gets SIGTERM."""
OLD, NEW = 0, 1


def git(*args: str) -> None:
    done = subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"


@pytest.fixture
def previous_release_checkout(tmp_path: Path) -> Iterator[Path]:
    """A git worktree of the last release's commit; removed afterwards."""
    release = previous_release()
    checkout = tmp_path / f"release-{release.version}"
    git("worktree", "add", "--detach", str(checkout), release.commit)
    try:
        yield checkout
    finally:
        git("worktree", "remove", "--force", str(checkout))


async def applied_migrations(url: str) -> list[int]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT version FROM schema_migrations ORDER BY 1")
    finally:
        await conn.close()
    return [row[0] for row in rows]


async def claim_work(cluster: Cluster, replica: int, lane: int, task_id: str) -> dict[str, Any]:
    """The lane's pending task, claimed through claimWork on ``replica`` (or on the other one
    while ``replica`` is down). A claim the old replica made as it stopped, whose answer never
    came, expires and the task's retry is claimed instead."""
    claims: list[dict[str, Any]] = []

    async def claimed() -> bool:
        status, body = await cluster.call(
            replica,
            "POST",
            f"/claim-work/{PROVISIONER}/lane{lane}",
            {"workerGroup": "wg", "workerId": f"lane{lane}", "tasks": 1},
        )
        assert status == 200, body
        claims.extend(body["tasks"])
        return bool(claims)

    # claimWork itself waits for work (its long poll), so no pause between calls is needed
    await wait_until(claimed, within=4 * CLAIM_TIMEOUT_MS / 1000, what=f"{task_id}'s claim")
    [claim] = claims
    assert claim["status"]["taskId"] == task_id, claim
    return claim


@pytest.mark.slow(seconds=25)
async def test_the_previous_release_serves_beside_this_one_until_it_stops(
    tmp_path: Path,
    postgres_schema_url: str,
    previous_release_checkout: Path,
    coordinator_process: Callable[..., CoordinatorProcess],
) -> None:
    settings: dict[str, Any] = {
        "store_url": postgres_schema_url,
        "dispatch": "store",
        "auth_enabled": True,
        "claim_timeout_ms": CLAIM_TIMEOUT_MS,
        "resolver_interval_ms": 200,
        "claim_work_timeout_ms": 1_000,
    }
    root = ensure_root_client(tmp_path / "clients.json")
    old = coordinator_process(base_config(tmp_path, **settings), source=previous_release_checkout)
    new = coordinator_process(base_config(tmp_path, **settings))

    released = ReleaseStore(RELEASES / previous_release().version).expected()
    replicas = [await old.start()]
    assert old.process is not None
    # the old release's code runs: its process works in the worktree (tmp_path is resolved)
    assert os.readlink(f"/proc/{old.process.pid}/cwd") == str(previous_release_checkout)
    assert await applied_migrations(postgres_schema_url) == released["schema_versions"]["postgres"]
    replicas.append(await new.start())
    assert await applied_migrations(postgres_schema_url) == [
        migration.version for migration in migrations("postgres")
    ]

    completed: Counter[str] = Counter()
    """taskId -> completions reported (each must be reported once, and answered 200)."""
    finished: dict[str, tuple[int, str]] = {}
    """taskId -> the run completed and the worker that completed it."""
    async with aiohttp.ClientSession() as http:
        cluster = Cluster(
            replicas=replicas,
            processes=[old, new],
            http=http,
            root=root,
            provisioner_id=PROVISIONER,
        )

        async def lane(number: int) -> None:
            for position in range(TASKS_PER_LANE):
                task_id = slugid.nice()
                creator = (number + position) % 2
                body = task_definition(provisionerId=PROVISIONER, workerType=f"lane{number}")
                status, answer = await cluster.call(creator, "PUT", f"/task/{task_id}", body)
                assert status == 200, answer
                claim = await claim_work(cluster, 1 - creator, number, task_id)
                status, answer = await cluster.call(
                    1 - creator,
                    "POST",
                    f"/task/{task_id}/runs/{claim['runId']}/completed",
                    credentials=claim["credentials"],
                )
                assert status == 200, answer
                completed[task_id] += 1
                finished[task_id] = (claim["runId"], f"lane{number}")

        async def stop_old() -> int:
            await wait_until(lambda: len(completed) >= STOP_AFTER, within=30, what="tasks")
            served_by_old = cluster.served[OLD]
            await old.terminate()
            return served_by_old

        lanes = asyncio.gather(*(lane(number) for number in range(LANES)))
        served_by_old, _ = await asyncio.gather(stop_old(), lanes)

        # SIGTERM, then SIGKILL after 10 s, as an orchestrator's grace period would: 0.1.0's
        # serve can hang in its shutdown under load (asyncio.run cancels every task at once,
        # and closing the asyncpg pool then waits for a connection left in use)
        assert old.process is not None and old.process.returncode in (0, -signal.SIGKILL)
        assert served_by_old >= STOP_AFTER  # a part in each task completed before the stop
        assert cluster.failovers > 0  # requests met the stopped replica and went on

        assert len(completed) == LANES * TASKS_PER_LANE
        assert set(completed.values()) == {1}
        for task_id, (run_id, worker_id) in finished.items():
            status, answer = await cluster.call(NEW, "GET", f"/task/{task_id}/status")
            assert status == 200, answer
            runs = answer["status"]["runs"]
            assert answer["status"]["state"] == "completed", runs
            assert len(runs) == run_id + 1, runs
            assert (runs[-1]["state"], runs[-1]["workerId"]) == ("completed", worker_id)
            # a run before the completed one is a claim lost with the old replica's answer
            assert all(
                (run["state"], run["reasonResolved"]) == ("exception", "claim-expired")
                for run in runs[:-1]
            ), runs
        assert new.process is not None and new.process.returncode is None  # serving on alone
