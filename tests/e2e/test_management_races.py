"""Bulk cancel and delete racing real workers: two ``queue-worker`` processes work through a
batch of tasks while an operator deletes half of them (by tag) and cancels the other half.

Nothing may be left inconsistent: a deleted task is gone for every reader, its hints are
consumed and dropped by the workers (a claim of a deleted task is a 404, a dead hint), a
worker holding one of its runs is told 404 and forgets it; a cancelled task is resolved
exactly once; no run starts twice, no worker dies, the coordinator logs no internal error.
Set up by the ``e2e`` fixture (tests/fixtures/workers.py: coordinator process with Hawk
authentication, real Azurite, journaling handler).
"""

from __future__ import annotations

import asyncio
from typing import Any

import slugid

from coordinator.service.clients_file import ensure_root_client
from devharness.api import call
from devharness.tasks import task_definition
from tests.fixtures.workers import WORKER_TYPE, MakeE2E, started_by

PER_BATCH = 60


async def test_bulk_delete_and_cancel_racing_two_workers_leave_nothing_inconsistent(
    e2e: MakeE2E,
) -> None:
    s = await e2e(claim_work=False)
    operator = ensure_root_client(s.directory / "clients.json")
    batches: dict[str, list[str]] = {"x": [], "y": []}
    gate = asyncio.Semaphore(8)

    async def create(batch: str) -> None:
        task_id = slugid.nice()
        definition = task_definition(
            provisionerId=s.provisioner_id,
            workerType=WORKER_TYPE,
            tags={"batch": batch},
            payload={"sleep": 0.2},
        )
        async with gate:
            await s.queue.createTask(task_id, definition)
        batches[batch].append(task_id)

    await asyncio.gather(*(create(batch) for batch in "xy" for _ in range(PER_BATCH)))
    workers = [await s.start_worker(f"w{n}", capacity=4) for n in range(2)]

    async def some_started() -> bool:
        return len(s.events("start")) >= 8

    await s.eventually(some_started, within=30, what="the workers under way")

    async def manage(method: str, path: str) -> dict[str, Any]:
        url = f"{s.coordinator.api}{path}"
        response = await call(s.coordinator.session, method, url, credentials=operator)
        assert response.status == 200, response.body
        body: dict[str, Any] = response.body
        return body

    deleted, cancelled = await asyncio.gather(
        manage("DELETE", "/tasks?tag=batch%3Ax"), manage("POST", "/tasks/cancel?tag=batch%3Ay")
    )
    assert 0 < deleted["deleted"] <= PER_BATCH
    assert 0 < cancelled["cancelled"] <= PER_BATCH

    async def both_done() -> bool:
        x = await manage("GET", "/tasks/count?tag=batch%3Ax")
        y = await manage("GET", "/tasks/count?tag=batch%3Ay")
        unresolved = sum(y["states"][state] for state in ("pending", "delayed", "running"))
        return bool(x["total"] == 0 and unresolved == 0)

    await s.eventually(both_done, within=30, what="batch x gone and batch y resolved")

    async def hints_consumed() -> bool:
        return await s.message_count("lowest") == 0

    # every hint of a deleted or cancelled task is claimed in vain and then deleted
    await s.eventually(hints_consumed, within=30, what="the queue drained")

    for task_id in batches["x"]:
        assert (
            await call(s.coordinator.session, "GET", f"{s.coordinator.api}/task/{task_id}/status")
        ).status == 404
    outcomes: dict[tuple[str, str | None], int] = {}
    for task_id in batches["y"]:
        status = await s.status(task_id)
        assert status["state"] in ("completed", "exception"), status
        last = status["runs"][-1]
        key = (last["state"], last.get("reasonResolved"))
        outcomes[key] = outcomes.get(key, 0) + 1
    assert outcomes.get(("exception", "canceled"), 0) == cancelled["cancelled"]
    assert set(outcomes) <= {("completed", "completed"), ("exception", "canceled")}

    starts = started_by(s.journal())
    assert not {run: by for run, by in starts.items() if len(by) > 1}, "a run started twice"
    for worker in workers:
        assert worker.process.returncode is None, worker.log()[-3000:]
        assert "Traceback" not in worker.log(), worker.log()[-3000:]
    coordinator_log = s.coordinator_process.log_path.read_text(errors="replace")
    assert "internal error" not in coordinator_log
    assert "Traceback" not in coordinator_log
