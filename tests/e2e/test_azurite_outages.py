"""Azurite going away and coming back: each test starts an Azurite process of its own, stops
it and starts it again. The Azure layer fails fast while it is down and works after; the API
keeps serving what the store can answer (503 for what needs Azure) and the hints put while it
was down come back; the hint keeper puts the hints that were never confirmed."""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp
import pytest

from coordinator.azure.errors import QueueUnavailable
from coordinator.azure.queues import QueueService
from coordinator.resolvers import hint_keeper
from coordinator.service.clock import wall_clock
from devharness.azurite import AzuriteProcess
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import WORKER, runs
from tests.fixtures.flow import WT, Flow, Start


async def test_put_hint_fails_fast_while_azurite_is_down_and_works_after_restart(
    azure_namespace: AzureNamespace,
) -> None:
    ns = azure_namespace
    async with AzuriteProcess() as azurite:
        service = QueueService(azurite.connection_string, ns.queue_settings(request_timeout_s=2.0))
        try:
            now = wall_clock()
            assert await service.put_hint(ns.hint(task_id="before", now=now), now=now)
            await azurite.stop()

            started = time.monotonic()
            with pytest.raises(QueueUnavailable, match="put hint"):
                await service.put_hint(ns.hint(task_id="during", now=now), now=now)
            with pytest.raises(QueueUnavailable):
                await service.poll_urls(ns.provisioner_id, "wt", now=now)
            with pytest.raises(QueueUnavailable):
                await service.pending_count(ns.provisioner_id, "wt")
            assert time.monotonic() - started < 2.0

            # In-memory Azurite comes back empty: the cached queue is gone and is re-created.
            await azurite.start()
            assert await service.put_hint(ns.hint(task_id="after", now=now), now=now)
            received = await service.receive(
                ns.provisioner_id, "wt", max_messages=32, visibility_timeout=5
            )
            assert [r.task_id for r in received] == ["after"]
        finally:
            await service.close()


async def test_the_api_survives_an_azurite_outage_and_hints_come_back(
    start_coordinator: Start,
    azure_namespace: AzureNamespace,
    http: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    # Persistent: the hints put before the outage must still be there after it, so the only
    # hints that can appear are those the coordinator puts again.
    async with AzuriteProcess(location=tmp_path / "azurite") as azurite:
        flow = Flow(start_coordinator, azurite.connection_string, azure_namespace, http)
        coord = await flow.coordinator(claim_work_timeout_ms=500)
        before = await flow.create(coord)
        await flow.wait_for_hint(before, 0)

        await azurite.stop()
        during = await flow.create(coord)
        assert runs(await coord.status(during)) == [("pending", "scheduled", None)]
        pending = await coord.call("GET", f"/pending/{flow.prov}/{WT}")
        assert pending.status == 200, pending.body
        assert pending.body["pendingTasks"] == 2  # from the store meanwhile
        polled = await coord.call("GET", f"/poll-task-url/{flow.prov}/{WT}")
        assert polled.status == 503, polled.body
        claimed = await coord.call("POST", f"/claim-work/{flow.prov}/{WT}", {**WORKER, "tasks": 1})
        assert claimed.status == 503, claimed.body

        await azurite.start()
        await flow.wait_for_hint(during, 0)
        assert sorted(await flow.peek(), key=repr) == sorted([(before, 0), (during, 0)], key=repr)
        got: set[str] = set()

        async def all_claimed() -> bool:
            got.update(c["status"]["taskId"] for c in await flow.claim_work(coord))
            return got == {before, during}

        await wait_until(all_claimed, within=10, what="both tasks to be claimed")


async def test_hint_keeper_puts_hints_that_were_never_confirmed(
    start_coordinator: Start,
    azure_namespace: AzureNamespace,
    http: aiohttp.ClientSession,
) -> None:
    async with AzuriteProcess() as azurite:
        flow = Flow(start_coordinator, azurite.connection_string, azure_namespace, http)
        coord = await flow.coordinator(run_resolvers=False)
        await azurite.stop()
        task_id = await flow.create(coord)
        await azurite.start()
        assert await flow.peek() == []
        service = coord.parts.service

        assert await hint_keeper.run_once(service, grace_ms=60_000) == 0  # not overdue yet
        assert await flow.peek() == []
        assert await hint_keeper.run_once(service, grace_ms=0) == 1
        assert await flow.peek() == [(task_id, 0)]
        assert await hint_keeper.run_once(service, grace_ms=0) == 0  # confirmed now
        assert await flow.peek() == [(task_id, 0)]
