"""``queue-coordinator inbox`` as real child processes against a real coordinator (in this
process, on PostgreSQL, auth on): the rows it refused listed as a table and as JSON, one
deleted, a second delete of it and a caller without ``queue:manage:inbox`` refused in one line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

import asyncpg
import slugid

from devharness.processes import REPO
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.clients import start_secured
from tests.fixtures.commands import Finished, run_to_end, taskcluster_env
from tests.fixtures.coordinator import StartCoordinator
from worker_sdk import enqueue_in

COMMAND = str(Path(sys.executable).parent / "queue-coordinator")


async def cli(*args: str, root_url: str, client: Mapping[str, str]) -> Finished:
    """``queue-coordinator inbox <args>`` with only the ``TASKCLUSTER_*`` variables given."""
    env = taskcluster_env(root_url, client)
    finished = await run_to_end([COMMAND, "inbox", *args], cwd=REPO, env=env, timeout_s=60)
    assert "Traceback" not in finished.stderr, finished.stderr
    return finished


async def test_inbox_commands_list_and_delete_rejected_rows(
    postgres_schema_url: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {"ops": ["queue:manage:inbox"], "other": ["queue:manage:cancel-tasks"]},
        store_url=postgres_schema_url,
    )
    url, ops = coordinator.url, creds["ops"]
    empty = await cli("list", root_url=url, client=ops)
    assert (empty.status, empty.stderr) == (0, "no rejected inbox rows\n")

    refused = [slugid.nice(), slugid.nice()]
    conn = await asyncpg.connect(postgres_schema_url)
    try:
        async with conn.transaction():
            for task_id in refused:
                await enqueue_in(conn, task_id, task_definition(), client_id="nobody")
    finally:
        await conn.close()

    async def listed() -> list[dict[str, object]]:
        answer = await cli("list", "--json", root_url=url, client=ops)
        assert answer.status == 0, answer.stderr
        return [json.loads(line) for line in answer.stdout.splitlines()]

    async def both_listed() -> bool:
        return len(await listed()) == 2

    await wait_until(both_listed, what="two rejected rows listed")
    rows = await listed()
    assert [row["taskId"] for row in rows] == refused
    shown = await cli("list", root_url=url, client=ops)
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["ID", "TASK", "ID", "CLIENT", "ID", "CREATED", "REASON"]
    assert [line.split()[:3] for line in lines[1:]] == [
        [str(row["id"]), str(row["taskId"]), "nobody"] for row in rows
    ]
    assert "no client 'nobody'" in lines[1]

    deleted = await cli("delete", str(rows[0]["id"]), root_url=url, client=ops)
    assert (deleted.status, deleted.stdout) == (0, f"deleted rejected inbox row {rows[0]['id']}\n")
    assert [row["taskId"] for row in await listed()] == refused[1:]
    again = await cli("delete", str(rows[0]["id"]), root_url=url, client=ops)
    assert again.status == 1 and again.stderr.count("\n") == 1
    assert "ResourceNotFound" in again.stderr, again.stderr
    forbidden = await cli("delete", str(rows[1]["id"]), root_url=url, client=creds["other"])
    assert forbidden.status == 1 and "queue:manage:inbox" in forbidden.stderr, forbidden.stderr
    bad = await cli("delete", "first", root_url=url, client=ops)
    assert bad.status == 2 and "not a row id" in bad.stderr, bad.stderr
    assert [row["taskId"] for row in await listed()] == refused[1:]
