"""The official Python ``taskcluster`` client (113.x) against a real coordinator
(docs/protocol.md).

Unmodified clients with ``rootUrl`` = the coordinator's URL and credentials from its clients
file, authentication on, Azure on a real Azurite: sync ``taskcluster.Queue`` (run in a thread,
since it blocks, so the in-process coordinator keeps serving) and ``taskcluster.aio.Queue``,
through every queue method the coordinator serves. Workers resolve their runs with the
temporary credentials of their claim, as real workers do. Client 3.0.2, the last with
``pollTaskUrls``, runs in its own process: tests/e2e/test_taskcluster_3.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import slugid
import taskcluster

from coordinator.domain.records import from_iso
from devharness.azurite import AzuriteProcess
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.clients import WT, Queue, certificate, rejected, start_secured, worker_scopes
from tests.fixtures.coordinator import StartCoordinator

# --- the newest client, sync and aio ----------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "aio"])
async def test_every_queue_method_through_the_official_client(
    kind: str,
    start_coordinator: StartCoordinator,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    tmp_path: Path,
) -> None:
    prov = azure_namespace.provisioner_id
    pool = f"{prov}/{WT}"
    coordinator, creds = await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {
            "producer": [
                f"queue:create-task:lowest:{pool}",
                "queue:scheduler-id:-",
                "queue:create-task:project:none",
                "secrets:get:project/*",
                "queue:schedule-task:-/*",
                "queue:rerun-task:-/*",
                "queue:cancel-task:-/*",
            ],
            "worker": worker_scopes(prov),
        },
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
        resolver_interval_ms=100,
        claim_work_timeout_ms=1_000,
    )
    anonymous = Queue(kind, coordinator.url)
    producer = Queue(kind, coordinator.url, creds["producer"])
    worker = Queue(kind, coordinator.url, creds["worker"])
    group, first, second, third = (slugid.nice() for _ in range(4))

    def definition(**fields: Any) -> dict[str, Any]:
        return task_definition(provisionerId=prov, workerType=WT, taskGroupId=group, **fields)

    pong = await anonymous.ping()
    assert pong["alive"] is True

    # --- producer: define a chain first <- second, and read it back
    created = await producer.createTask(first, definition(scopes=["secrets:get:project/a"]))
    assert created["status"]["taskId"] == first
    assert created["status"]["state"] == "pending"
    created = await producer.createTask(second, definition(dependencies=[first]))
    assert created["status"]["state"] == "unscheduled"
    task = await anonymous.task(first)
    assert task["scopes"] == ["secrets:get:project/a"]
    assert task["taskGroupId"] == group and task["retries"] == 5
    status = await anonymous.status(second)
    assert status["status"]["runs"] == []
    listed = await anonymous.listTaskGroup(group)
    assert listed["taskGroupId"] == group
    assert {t["status"]["taskId"] for t in listed["tasks"]} == {first, second}
    dependents = await anonymous.listDependentTasks(first)
    assert [t["status"]["taskId"] for t in dependents["tasks"]] == [second]
    pending = await anonymous.pendingTasks(pool)
    assert (pending["taskQueueId"], pending["pendingTasks"]) == (pool, 1)
    counts = await anonymous.taskQueueCounts(pool)
    assert (counts["pendingTasks"], counts["claimedTasks"]) == (1, 0)

    # --- worker: claimWork, then reclaim and resolve with the claim's own credentials
    work = await worker.claimWork(pool, {"workerGroup": "wg", "workerId": "w1", "tasks": 4})
    [claim] = work["tasks"]
    assert (claim["status"]["taskId"], claim["runId"]) == (first, 0)
    assert claim["task"]["scopes"] == ["secrets:get:project/a"]
    assert claim["credentials"]["clientId"].startswith(f"task-client/{first}/0/on/wg/w1/")
    assert "secrets:get:project/a" in certificate(claim["credentials"])["scopes"]
    counts = await anonymous.taskQueueCounts(pool)
    assert (counts["pendingTasks"], counts["claimedTasks"]) == (0, 1)
    run = Queue(kind, coordinator.url, claim["credentials"])
    reclaimed = await run.reclaimTask(first, "0")
    assert from_iso(reclaimed["takenUntil"]) >= from_iso(claim["takenUntil"])
    assert reclaimed["credentials"]["accessToken"] != claim["credentials"]["accessToken"]
    run = Queue(kind, coordinator.url, reclaimed["credentials"])
    resolved = await run.reportCompleted(first, "0")
    assert resolved["status"]["state"] == "completed"
    # A different report of the resolved run: the client surfaces the 409 error body.
    status_code, body = await rejected(run.reportFailed(first, "0"))
    assert (status_code, body["code"]) == (409, "RequestConflict")

    # --- the dependent becomes pending; claimTask, reportFailed
    async def second_pending() -> bool:
        runs = (await anonymous.status(second))["status"]["runs"]
        return bool(runs) and runs[0]["state"] == "pending"

    await wait_until(second_pending, what="the dependent task to become pending")
    claim = await worker.claimTask(second, "0", {"workerGroup": "wg", "workerId": "w2"})
    assert (claim["status"]["state"], claim["workerId"]) == ("running", "w2")
    run = Queue(kind, coordinator.url, claim["credentials"])
    resolved = await run.reportFailed(second, "0")
    assert resolved["status"]["state"] == "failed"

    # --- rerunTask, claimWork again, reportException(worker-shutdown) retries, cancelTask
    rerun = await producer.rerunTask(second)
    assert rerun["status"]["runs"][1]["reasonCreated"] == "rerun"
    work = await worker.claimWork(pool, {"workerGroup": "wg", "workerId": "w3", "tasks": 1})
    [claim] = work["tasks"]
    assert (claim["status"]["taskId"], claim["runId"]) == (second, 1)
    run = Queue(kind, coordinator.url, claim["credentials"])
    resolved = await run.reportException(second, "1", {"reason": "worker-shutdown"})
    assert resolved["status"]["runs"][1]["reasonResolved"] == "worker-shutdown"
    assert resolved["status"]["runs"][2]["reasonCreated"] == "retry"
    assert resolved["status"]["state"] == "pending"
    canceled = await producer.cancelTask(second)
    assert canceled["status"]["state"] == "exception"
    assert canceled["status"]["runs"][2]["reasonResolved"] == "canceled"

    # --- scheduleTask: a dependent of a task that did not complete waits; schedule it now
    created = await producer.createTask(third, definition(dependencies=[second]))
    assert created["status"]["state"] == "unscheduled"
    scheduled = await producer.scheduleTask(third)
    assert scheduled["status"]["state"] == "pending"
    assert scheduled["status"]["runs"][0]["reasonCreated"] == "scheduled"
    dependents = await anonymous.listDependentTasks(second)
    assert [t["status"]["taskId"] for t in dependents["tasks"]] == [third]


async def test_list_task_group_pages_through_the_client(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    """The client passes ``limit`` and ``continuationToken`` as query parameters, and the
    coordinator's tokens work when sent back by it (also through its pagination helper)."""
    coordinator, creds = await start_secured(start_coordinator, tmp_path / "clients.json", {})
    root = Queue("aio", coordinator.url, creds["root"])
    group = slugid.nice()
    task_ids = {slugid.nice() for _ in range(5)}
    for task_id in task_ids:
        await root.createTask(task_id, task_definition(taskGroupId=group))
    first = await root.listTaskGroup(group, query={"limit": 2})
    assert len(first["tasks"]) == 2 and first["continuationToken"]
    seen: list[str] = []

    def collect(page: dict[str, Any]) -> None:
        seen.extend(t["status"]["taskId"] for t in page["tasks"])

    sync = taskcluster.Queue({"rootUrl": coordinator.url, "maxRetries": 0})
    await asyncio.to_thread(
        sync.listTaskGroup, group, query={"limit": 2}, paginationHandler=collect
    )
    assert sorted(seen) == sorted(task_ids)
