"""A PostgreSQL outage while work flows (issue 24): one coordinator on a PostgreSQL cluster of
the test's own, two workers (worker SDK, polling Azurite, claiming and reporting in batches),
300 tasks, and the cluster stopped ``-m fast`` (every session ended, as an operator's restart
does) and started again mid-flow.

While it is down the API answers 503 with ``Retry-After`` and the store named (never its
password), ``/__heartbeat__`` too; never a 500. The log has one line when the outage begins and
one when it ends, and no traceback. Afterwards every task has been run and completed exactly
once.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import slugid
from prometheus_client.parser import text_string_to_metric_families

from devharness.azurite import AzuriteProcess
from devharness.postgres import Cluster, postgres_bindir, throwaway_cluster
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator
from tests.fixtures.sdk import QUICK_IDLE_RATE
from worker_sdk import Backoff, TaskRun, Worker

BINDIR = postgres_bindir()
pytestmark = pytest.mark.skipif(
    BINDIR is None,
    reason="PostgreSQL's server programs (initdb, pg_ctl) are not installed: no cluster of the "
    "test's own to stop and start (the shared server must not be)",
)

TASKS = 300
WORKER_TYPE = "outage-wt"
OUTAGE_LOGGER = "coordinator.store.outages"


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    assert BINDIR is not None
    async with throwaway_cluster(BINDIR) as running:
        yield running


async def answer(
    session: aiohttp.ClientSession, method: str, url: str
) -> tuple[int, str | None, Any]:
    """Status, ``Retry-After`` and JSON body of one request."""
    async with session.request(method, url) as response:
        return response.status, response.headers.get("Retry-After"), await response.json()


async def statuses_served(c: RunningCoordinator) -> collections.Counter[str]:
    """How many answers of each HTTP status the coordinator has served."""
    async with c.session.get(c.url + "/metrics") as response:
        text = await response.text()
    served: collections.Counter[str] = collections.Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "http_requests_total":
                served[sample.labels["status"]] += int(sample.value)
    return served


async def test_a_postgresql_outage_mid_flow_is_a_503_logged_once_and_loses_nothing(
    cluster: Cluster,
    start_coordinator: StartCoordinator,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    c = await start_coordinator(
        store_url=cluster.dsn,
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    store = f"postgresql://127.0.0.1:{cluster.port}/postgres"
    provisioner = azure_namespace.provisioner_id
    task_ids = [slugid.nice() for _ in range(TASKS)]
    for task_id in task_ids:
        body = task_definition(provisionerId=provisioner, workerType=WORKER_TYPE)
        created = await c.call("PUT", f"/task/{task_id}", body)
        assert created.status == 200, created.body

    ran: collections.Counter[str] = collections.Counter()

    async def handle(run: TaskRun) -> None:
        ran[run.task_id] += 1
        await asyncio.sleep(0.02)

    workers = [
        Worker(
            root_url=c.url,
            credentials=None,
            handler=handle,
            provisioner_id=provisioner,
            worker_type=WORKER_TYPE,
            worker_group="outage",
            worker_id=f"w{index}",
            capacity=8,
            idle_delay=0.05,
            idle_rate=QUICK_IDLE_RATE,
            backoff=Backoff(base=0.05, cap=0.5),
            handle_signals=False,
        )
        for index in range(2)
    ]
    running = [asyncio.ensure_future(worker.run()) for worker in workers]
    try:
        await wait_until(lambda: len(ran) >= TASKS // 4, within=60, what="a quarter run")

        await cluster.stop("fast")
        assert len(ran) < TASKS, "the outage must fall while work flows"
        heartbeat = await answer(c.session, "GET", c.url + "/__heartbeat__")
        status = await answer(c.session, "GET", c.api + f"/task/{task_ids[-1]}/status")
        await cluster.start()

        for code, retry_after, body in (heartbeat, status):
            assert (code, retry_after, body["code"]) == (503, "2", "ServiceUnavailable"), body
            assert body["message"].startswith(f"the store {store} is unavailable: ")
            assert "postgres@" not in body["message"]

        await wait_until(lambda: len(ran) == TASKS, within=120, what="every task run")
        left = list(task_ids)

        async def all_completed() -> bool:
            while left:
                response = await c.call("GET", f"/task/{left[-1]}/status")
                if response.status != 200 or response.body["status"]["state"] != "completed":
                    return False
                runs = response.body["status"]["runs"]
                assert [(r["runId"], r["state"]) for r in runs] == [(0, "completed")], runs
                left.pop()
            return True

        await wait_until(all_completed, within=60, what="every task completed")
    finally:
        for worker in workers:
            worker.stop()
        await asyncio.wait_for(asyncio.gather(*running), timeout=30)

    assert sorted(ran) == sorted(task_ids)
    assert set(ran.values()) == {1}, "a task ran twice"
    served = await statuses_served(c)
    assert served["503"] >= 2 and served["500"] == 0, served
    lines = [r.getMessage() for r in caplog.records if r.name == OUTAGE_LOGGER]
    assert len(lines) == 2, lines
    assert lines[0].startswith("store unavailable, calls answered 503 until it is back")
    assert f" store={store} " in lines[0]
    assert lines[1].startswith(f"store available again store={store} down_for=")
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert not [r for r in caplog.records if r.name.startswith("coordinator") and r.levelno >= 40]
