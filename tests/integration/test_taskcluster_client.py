"""The official Python ``taskcluster`` clients against a real coordinator (docs/protocol.md).

Unmodified clients with ``rootUrl`` = the coordinator's URL and credentials from its clients
file, authentication on, Azure on a real Azurite: the newest client (113.x), sync
``taskcluster.Queue`` (run in a thread, since it blocks, so the in-process coordinator keeps
serving) and ``taskcluster.aio.Queue``, through every queue method the coordinator serves; and
client 3.0.2, the last with ``pollTaskUrls``, from its own virtualenv ``.venv-tc3`` through
``tests/tc3_driver.py``. Workers resolve their runs with the temporary credentials of their
claim, as real workers do.

The helpers here (clients file, client adapter, the 3.0.2 runner) are shared with
``tests/integration/test_scopes_api.py``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import slugid
import taskcluster
import taskcluster.aio
from taskcluster.exceptions import TaskclusterAuthFailure, TaskclusterRestFailure

from coordinator.api.clients import ensure_root_client
from coordinator.domain.records import from_iso
from coordinator.service.clock import wall_clock
from devharness.azurite import AzuriteProcess
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import RunningCoordinator, task_definition

Credentials = dict[str, str]
StartCoordinator = Callable[..., Awaitable[RunningCoordinator]]

WT = "wt"
TC3_PYTHON = Path(__file__).resolve().parents[2] / ".venv-tc3" / "bin" / "python"
TC3_DRIVER = Path(__file__).resolve().parents[1] / "tc3_driver.py"


# --- helpers shared with test_scopes_api.py --------------------------------------------------


def write_clients(path: Path, scopes: Mapping[str, Sequence[str]]) -> dict[str, Credentials]:
    """A clients file as an operator makes one: ``ensure_root_client`` creates it (root and
    the issuer), then one client per entry of ``scopes`` is added with a random accessToken
    and the file replaced atomically. Returns everybody's credentials by clientId."""
    ensure_root_client(path)
    document = json.loads(path.read_text())
    for client_id, client_scopes in scopes.items():
        document["clients"].append(
            {
                "clientId": client_id,
                "accessToken": secrets.token_urlsafe(33),
                "scopes": list(client_scopes),
            }
        )
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document))
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
    return {
        c["clientId"]: {"clientId": c["clientId"], "accessToken": c["accessToken"]}
        for c in document["clients"]
    }


async def start_secured(
    start_coordinator: StartCoordinator,
    path: Path,
    scopes: Mapping[str, Sequence[str]],
    **overrides: Any,
) -> tuple[RunningCoordinator, dict[str, Credentials]]:
    """A coordinator with authentication on and a clients file with ``scopes``' clients."""
    credentials = write_clients(path, scopes)
    coordinator = await start_coordinator(auth_enabled=True, clients_file=path, **overrides)
    return coordinator, credentials


class Queue:
    """One official client, ``sync`` or ``aio``, behind one async interface:
    ``await Queue("sync", url, creds).createTask(taskId, body)``. The sync client's blocking
    call runs in a thread so the coordinator in this process keeps serving."""

    def __init__(
        self, kind: str, root_url: str, credentials: Mapping[str, str] | None = None
    ) -> None:
        options: dict[str, Any] = {"rootUrl": root_url, "maxRetries": 0}
        if credentials is not None:
            # A copy: the client rewrites its credentials in place.
            options["credentials"] = dict(credentials)
        self.kind = kind
        self.client: Any = (
            taskcluster.Queue(options) if kind == "sync" else taskcluster.aio.Queue(options)
        )

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.client, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.kind == "sync":
                return await asyncio.to_thread(method, *args, **kwargs)
            return await method(*args, **kwargs)

        return call


async def rejected(call: Awaitable[Any]) -> tuple[int, dict[str, Any]]:
    """The HTTP status and error body of a client call that must fail."""
    try:
        result = await call
    except (TaskclusterRestFailure, TaskclusterAuthFailure) as error:
        body: dict[str, Any] = error.body
        return error.status_code, body
    raise AssertionError(f"the call succeeded: {result!r}")


def worker_scopes(provisioner_id: str, worker_type: str = WT) -> list[str]:
    """What a worker of the pool holds (Taskcluster's worker-pool scopes)."""
    pool = f"{provisioner_id}/{worker_type}"
    return [
        f"queue:claim-work:{pool}",
        f"queue:claim-task:{pool}",
        f"queue:poll-task-urls:{pool}",
        "queue:worker-id:wg/*",
    ]


async def run_tc3(base_url: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run ``calls`` through taskcluster 3.0.2 (see ``tests/tc3_driver.py``)."""
    if not TC3_PYTHON.exists():
        pytest.fail(f"{TC3_PYTHON} is missing: run scripts/test (scripts/lib/setup.sh makes it)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKCLUSTER_")}
    process = await asyncio.create_subprocess_exec(
        str(TC3_PYTHON),
        str(TC3_DRIVER),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    request = json.dumps({"baseUrl": base_url, "calls": calls}).encode()
    stdout, stderr = await asyncio.wait_for(process.communicate(request), timeout=60)
    assert process.returncode == 0, stderr.decode(errors="replace")
    answer = json.loads(stdout)
    assert answer["version"] == "3.0.2"
    results: list[dict[str, Any]] = answer["results"]
    return results


def certificate(credentials: Mapping[str, str]) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(credentials["certificate"])
    return parsed


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
        resolver_interval=100,
        claim_work_timeout=1_000,
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


# --- client 3.0.2: pollTaskUrls and the rest of the worker protocol of its time --------------


async def test_client_3_worker_cycle_with_poll_task_urls(
    start_coordinator: StartCoordinator,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    tmp_path: Path,
) -> None:
    """A worker of the client-3 era: pollTaskUrls, GET the signed poll URL on Azure, claimTask,
    DELETE the message, reclaimTask and reportCompleted with the claim's credentials; then
    pendingTasks and claimWork on their two-segment routes; all signed by taskcluster 3.0.2
    (``baseUrl`` instead of ``rootUrl``)."""
    prov = azure_namespace.provisioner_id
    coordinator, creds = await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {"worker": worker_scopes(prov)},
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    task_id = slugid.nice()
    await Queue("aio", coordinator.url, creds["root"]).createTask(
        task_id, task_definition(provisionerId=prov, workerType=WT, priority="high")
    )

    [polled] = await run_tc3(
        coordinator.api,
        [{"method": "pollTaskUrls", "args": [prov, WT], "credentials": creds["worker"]}],
    )
    urls = polled["result"]
    assert len(urls["queues"]) == 7  # one per priority, highest first
    # The SAS lives 30 minutes.
    assert 29 * 60_000 < from_iso(urls["expires"]) - wall_clock() <= 30 * 60_000

    async with aiohttp.ClientSession() as http:
        # The "high" queue is third; the ones above it are empty.
        message: ET.Element | None = None
        for index, queue in enumerate(urls["queues"]):
            async with http.get(queue["signedPollUrl"] + "&numofmessages=1") as response:
                assert response.status == 200, await response.text()
                found = ET.fromstring(await response.text()).find("QueueMessage")
            if found is not None:
                message, delete_url = found, queue["signedDeleteUrl"]
                assert index == 2
                break
        assert message is not None, "no hint in any queue"
        hint = json.loads(base64.b64decode(message.findtext("MessageText", "")))
        assert (hint["taskId"], hint["runId"]) == (task_id, 0)

        [claimed] = await run_tc3(
            coordinator.api,
            [
                {
                    "method": "claimTask",
                    "args": [task_id, "0", {"workerGroup": "wg", "workerId": "w1"}],
                    "credentials": creds["worker"],
                }
            ],
        )
        claim = claimed["result"]
        assert claim["status"]["state"] == "running"

        delete = delete_url.replace(
            "{{messageId}}", urllib.parse.quote(message.findtext("MessageId", ""), safe="")
        ).replace("{{popReceipt}}", urllib.parse.quote(message.findtext("PopReceipt", ""), safe=""))
        async with http.delete(delete) as response:
            assert response.status == 204, await response.text()

    # The two-segment routes 3.x sends for pendingTasks and claimWork.
    second = slugid.nice()
    await Queue("aio", coordinator.url, creds["root"]).createTask(
        second, task_definition(provisionerId=prov, workerType=WT)
    )
    worker = {"workerGroup": "wg", "workerId": "w1"}
    reclaimed, resolved, pending, work = await run_tc3(
        coordinator.api,
        [
            {"method": "reclaimTask", "args": [task_id, "0"], "credentials": claim["credentials"]},
            {
                "method": "reportCompleted",
                "args": [task_id, "0"],
                "credentials": claim["credentials"],
            },
            {"method": "pendingTasks", "args": [prov, WT]},
            {
                "method": "claimWork",
                "args": [prov, WT, {**worker, "tasks": 2}],
                "credentials": creds["worker"],
            },
        ],
    )
    assert reclaimed["result"]["runId"] == 0
    assert resolved["result"]["status"]["state"] == "completed"
    assert pending["result"]["pendingTasks"] == 1  # the first hint was deleted
    assert [c["status"]["taskId"] for c in work["result"]["tasks"]] == [second]
