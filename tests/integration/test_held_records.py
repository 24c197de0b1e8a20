"""Reports and reclaims of runs claimed through this coordinator start from the record the
claim stored (coordinator/service/held_records.py), on SQLite and PostgreSQL: no read of the
store when nothing else changed the task, and the same answers as a read would give when a
replica did (the kept record loses its compare-and-set, or is refused and read again).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from coordinator.domain.task_queues import TaskQueue
from coordinator.resolvers import claim_resolver
from coordinator.service.tasks import TaskService
from coordinator.store.base import Store
from devharness.waiting import wait_until
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator, runs

PROVISIONER, WORKER_TYPE = "test-prov", "test-wt"
"""Where :func:`devharness.tasks.task_definition` puts its tasks."""
CLAIM_TIMEOUT_S = 1_200
"""The fixture default (``Config.claim_timeout_ms``), in seconds."""


def counting_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The taskIds the store's ``get`` and ``get_many`` read from now on, counted (the real
    store still answers)."""
    reads: Counter[str] = Counter()
    get: Callable[[str], Awaitable[Any]] = store.get
    get_many: Callable[[list[str]], Awaitable[Any]] = store.get_many

    async def counted_get(task_id: str) -> Any:
        reads[task_id] += 1
        return await get(task_id)

    async def counted_get_many(task_ids: list[str]) -> Any:
        reads.update(task_ids)
        return await get_many(task_ids)

    monkeypatch.setattr(store, "get", counted_get)
    monkeypatch.setattr(store, "get_many", counted_get_many)
    return reads


def replica_of(c: RunningCoordinator, clock: FakeClock) -> TaskService:
    """Another coordinator's service over the same store (what a replica would write)."""
    main = c.parts.service
    return TaskService(
        store=c.parts.store,
        hints=None,
        timing=main.timing,
        max_deadline_ms=main.max_deadline_ms,
        clock=clock,
    )


async def test_reports_and_reclaims_of_runs_claimed_here_read_nothing(
    start_coordinator: StartCoordinator, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whichever way the run was claimed: claimTask, claimWork taking pending runs, or a
    create handing its new run to a waiting claimWork in its own write."""
    c = await start_coordinator(store_url=store_url, run_resolvers=False)
    claim_work = f"/claim-work/{PROVISIONER}/{WORKER_TYPE}"
    worker = {"workerGroup": "wg", "workerId": "w1"}
    [by_claim_task] = await c.create_many(1)
    await c.claim(by_claim_task)
    pending = await c.create_many(2)
    claimed = (await c.ok("POST", claim_work, {**worker, "tasks": 2}))["tasks"]
    assert sorted(claim["status"]["taskId"] for claim in claimed) == sorted(pending)
    waiting = asyncio.ensure_future(c.ok("POST", claim_work, {**worker, "tasks": 1}))
    queue = TaskQueue(PROVISIONER, WORKER_TYPE)
    await wait_until(lambda: c.parts.dispatch.waiting_claims(queue) == 1, what="the waiting call")
    [handed] = await c.create_many(1)
    assert [claim["status"]["taskId"] for claim in (await waiting)["tasks"]] == [handed]
    task_ids = [by_claim_task, *pending, handed]
    reads = counting_reads(c.parts.store, monkeypatch)

    reclaim = await c.ok("POST", f"/task/{by_claim_task}/runs/0/reclaim")
    single = await c.report(by_claim_task, 0, "completed")
    batch = await c.ok(
        "POST",
        "/resolve-runs",
        {"reports": [{"taskId": t, "runId": 0, "resolution": "failed"} for t in task_ids[1:]]},
    )

    assert not reads, reads
    assert reclaim["status"]["state"] == "running"
    assert single["state"] == "completed"
    assert [a["status"]["state"] for a in batch["reports"]] == ["failed"] * 3
    for task_id, state in zip(task_ids, ["completed", "failed", "failed", "failed"], strict=True):
        assert (await c.status(task_id))["state"] == state
    assert len(c.parts.service.transitions.held) == 0


async def test_a_task_cancelled_by_a_replica_refuses_the_report_as_a_read_would(
    start_coordinator: StartCoordinator, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    c = await start_coordinator(store_url=store_url, clock=clock, run_resolvers=False)
    single, batched = await c.create_many(2)
    await c.claim(single)
    await c.claim(batched)
    replica = replica_of(c, clock)
    for task_id in (single, batched):
        await replica.cancel(await replica.get(task_id))
    reads = counting_reads(c.parts.store, monkeypatch)

    answer = await c.call("POST", f"/task/{single}/runs/0/completed")
    batch = await c.ok(
        "POST",
        "/resolve-runs",
        {"reports": [{"taskId": batched, "runId": 0, "resolution": "completed"}]},
    )

    assert answer.status == 409, answer.body
    assert answer.body["code"] == "RequestConflict"
    assert batch["reports"][0]["error"]["status"] == 409
    for task_id in (single, batched):
        assert runs(await c.status(task_id)) == [("exception", "scheduled", "canceled")]
        assert reads[task_id] >= 1  # the kept record lost its compare-and-set: read again


async def test_a_run_a_replica_started_since_is_reported_from_a_fresh_read(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    """The kept record knows only run 0: run 1 (claimed through a replica after run 0's claim
    expired there) is refused by it, and that refusal is checked on a fresh read."""
    clock = FakeClock()
    c = await start_coordinator(store_url=store_url, clock=clock, run_resolvers=False)
    single, batched = await c.create_many(2, retries=1)
    await c.claim(single)
    await c.claim(batched)
    replica = replica_of(c, clock)
    clock.advance(CLAIM_TIMEOUT_S + 1)
    assert await claim_resolver.run_once(replica) == 2
    for task_id in (single, batched):
        await replica.claim(task_id, 1, worker_group="wg", worker_id="w1")

    status = await c.report(single, 1, "completed")
    batch = await c.ok(
        "POST",
        "/resolve-runs",
        {"reports": [{"taskId": batched, "runId": 1, "resolution": "completed"}]},
    )

    assert batch["reports"][0]["status"]["state"] == "completed", batch
    for task_id, answered in ((single, status), (batched, batch["reports"][0]["status"])):
        after = await c.status(task_id)
        assert answered == after
        assert runs(after) == [
            ("exception", "scheduled", "claim-expired"),
            ("completed", "retry", "completed"),
        ]
