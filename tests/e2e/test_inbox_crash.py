"""The task inbox across a crash: a real ``queue-coordinator serve`` process on PostgreSQL is
SIGKILLed while it ingests rows a producer committed in one transaction, then started again.
Every row must become exactly one task (its own taskId, as the row wrote it), none lost, none
refused for having been half-ingested before the kill (the kill usually lands inside a batch
whose tasks exist while its rows are still pending: the restart ingests them again, which must
find the same tasks), and no row left in the inbox.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest
import slugid

from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.coordinator import CoordinatorProcess
from worker_sdk import enqueue_in

MakeProcess = Callable[..., CoordinatorProcess]

ROWS = 1000
"""Ten of the ingester's batches: the kill lands while some are still to come."""


@pytest.mark.slow(seconds=30)
async def test_rows_committed_before_a_sigkill_become_tasks_exactly_once(
    postgres_schema_url: str, coordinator_process: MakeProcess
) -> None:
    schema = parse_qs(urlsplit(postgres_schema_url).query)["search_path"][0]
    first = coordinator_process(store_url=postgres_schema_url)
    await first.start()
    task_ids = [slugid.nice() for _ in range(ROWS)]
    conn = await asyncpg.connect(postgres_schema_url)
    try:

        async def inbox(state: str) -> int:
            count: int = await conn.fetchval(
                f"SELECT count(*) FROM {schema}.task_inbox WHERE state = $1", state
            )
            return count

        async with conn.transaction():
            for task_id in task_ids:
                await enqueue_in(conn, task_id, task_definition(), client_id="producer")

        async def ingesting() -> bool:
            return await inbox("pending") < ROWS

        await wait_until(ingesting, within=30, interval=0.005, what="the first batch ingested")
        assert first.process is not None
        await first.kill()
        assert first.process.returncode == -signal.SIGKILL
        left_by_the_kill = await inbox("pending")
        assert left_by_the_kill > 0, "the coordinator ingested every row before the kill"

        second = coordinator_process(config=first.config)
        restarted = await second.start()

        async def inbox_empty() -> bool:
            return not await conn.fetchval(f"SELECT count(*) FROM {schema}.task_inbox")

        await wait_until(inbox_empty, within=60, what="the inbox emptied after the restart")
        created = await conn.fetch(
            f"SELECT task_id FROM {schema}.tasks WHERE task_id = ANY($1::text[])", task_ids
        )
        assert sorted(row["task_id"] for row in created) == sorted(task_ids)
        assert await conn.fetchval(f"SELECT count(*) FROM {schema}.tasks") == ROWS
        for task_id in (task_ids[0], task_ids[-1]):
            assert (await restarted.status(task_id))["state"] == "pending"
    finally:
        await conn.close()
