"""No pending run is ever stranded: hints that Azure lost come back (the reconciler).

Against a real, persistent Azurite: one SIGKILLed right after hints were put (it persists on
a timer, so it comes back without most of them) and a queue cleared by hand. In both cases
every run is then claimed within a bounded time through claimWork, which only sees what is in
Azure."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from devharness.azurite import AzuriteProcess
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator
from tests.fixtures.flow import WT, Flow


@pytest.fixture
async def persistent(tmp_path: Path) -> AsyncIterator[AzuriteProcess]:
    async with AzuriteProcess(location=tmp_path / "azurite") as azurite:
        yield azurite


@pytest.fixture
def flow(
    start_coordinator: StartCoordinator,
    persistent: AzuriteProcess,
    azure_namespace: AzureNamespace,
    http: aiohttp.ClientSession,
) -> Flow:
    """The flow on this module's persistent Azurite, not the session's in-memory one."""
    return Flow(start_coordinator, persistent.connection_string, azure_namespace, http)


async def claim_all(flow: Flow, coord: RunningCoordinator, task_ids: set[str]) -> None:
    """Claim and complete every run through claimWork, within a bounded time."""
    left = set(task_ids)

    async def drained() -> bool:
        for claim in await flow.claim_work(coord, tasks=32):
            task_id = claim["status"]["taskId"]
            await coord.report(task_id, claim["runId"], "completed")
            left.discard(task_id)
        return not left

    await wait_until(drained, within=60, what=f"the last {len(left)} runs claimed")


async def test_hints_azurite_lost_in_a_crash_come_back(
    flow: Flow, persistent: AzuriteProcess
) -> None:
    # a short grace and interval: the test waits seconds, not the default minute
    coord = await flow.coordinator(reconcile_interval_ms=1_000, hint_grace_ms=60_000)
    task_ids = set(await coord.create_many(200, provisionerId=flow.prov, workerType=WT))
    await persistent.stop(signum=signal.SIGKILL)
    await persistent.start()
    survived = await flow.count()
    assert survived < 200, "Azurite kept every hint: the crash lost nothing to test with"

    await wait_until(lambda: _at_least(flow, 200), within=30, what="200 hints back in Azure")
    await claim_all(flow, coord, task_ids)


async def test_hints_of_a_queue_cleared_by_hand_come_back(flow: Flow) -> None:
    coord = await flow.coordinator(reconcile_interval_ms=1_000, hint_grace_ms=60_000)
    task_ids = set(await coord.create_many(20, provisionerId=flow.prov, workerType=WT))
    assert await flow.count() == 20
    async with flow.queue("lowest") as queue:
        await queue.clear_messages()
    assert await flow.count() == 0

    await wait_until(lambda: _at_least(flow, 20), within=30, what="20 hints back in Azure")
    await claim_all(flow, coord, task_ids)


async def _at_least(flow: Flow, count: int) -> bool:
    return await flow.count() >= count
