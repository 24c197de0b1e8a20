"""The Python ``taskcluster`` client 3.0.2, the last with ``pollTaskUrls``, against a real
coordinator with authentication on and a real Azurite: it runs from its own virtualenv
``.venv-tc3`` (``scripts/test`` makes it) in a child process, ``tests/tc3_driver.py``, that
makes the calls it is given and answers their results as JSON."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import slugid

from coordinator.domain.records import from_iso
from coordinator.service.clock import wall_clock
from devharness.azurite import AzuriteProcess
from devharness.tasks import task_definition
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.clients import (
    WT,
    Credentials,
    Queue,
    missing_scopes,
    start_secured,
    worker_scopes,
)
from tests.fixtures.coordinator import WORKER, StartCoordinator

TC3_PYTHON = Path(__file__).resolve().parents[2] / ".venv-tc3" / "bin" / "python"
TC3_DRIVER = Path(__file__).resolve().parents[1] / "tc3_driver.py"


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


async def test_poll_task_urls_only_for_holders_of_the_poll_scope(
    start_coordinator: StartCoordinator,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    tmp_path: Path,
) -> None:
    prov = azure_namespace.provisioner_id
    coordinator, creds = await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {"worker": worker_scopes(prov), "worker/other-pool": worker_scopes(prov, "other")},
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    task_id = slugid.nice()
    root = Queue("aio", coordinator.url, creds["root"])
    await root.createTask(task_id, task_definition(provisionerId=prov, workerType=WT))
    claim = await Queue("aio", coordinator.url, creds["worker"]).claimTask(task_id, "0", WORKER)

    def poll(credentials: Credentials | None, worker_type: str = WT) -> dict[str, Any]:
        return {"method": "pollTaskUrls", "args": [prov, worker_type], "credentials": credentials}

    results = await run_tc3(
        coordinator.api,
        [
            poll(creds["worker"]),
            poll(creds["root"]),
            poll(creds["worker"], "other"),
            poll(creds["worker/other-pool"]),
            poll(claim["credentials"]),
            poll(None),
        ],
    )
    granted, root_granted, wrong_type, other_pool, run_credentials, anonymous = results
    assert len(granted["result"]["queues"]) == 7
    assert len(root_granted["result"]["queues"]) == 7
    for refused, scope in (
        (wrong_type, f"queue:poll-task-urls:{prov}/other"),
        (other_pool, f"queue:poll-task-urls:{prov}/{WT}"),
        (run_credentials, f"queue:poll-task-urls:{prov}/{WT}"),
    ):
        assert refused["error"]["status"] == 403, refused
        assert missing_scopes(refused["error"]["body"]) == scope
    assert anonymous["error"]["status"] == 401
    assert f"queue:poll-task-urls:{prov}/{WT}" in anonymous["error"]["body"]["message"]
