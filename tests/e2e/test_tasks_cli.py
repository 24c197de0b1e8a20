"""``queue-coordinator tasks`` as a real child process against a real coordinator (in this
process, auth on): listings as tables and NDJSON with filters, summaries, counts, bulk cancel
and delete with and without their scopes (and with temporary credentials), and the one-line
failures: a missing or unreachable root URL (exit 2), a refusal from the coordinator (exit 1).

The coordinator serves from this test's event loop, so the CLI runs through asyncio's
subprocesses, never a blocking ``subprocess.run``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import slugid
from aiohttp import web

from coordinator.api.credentials import temporary_credentials
from coordinator.service.clock import wall_clock
from devharness.api import call
from devharness.ports import free_port
from devharness.processes import REPO, child_env
from devharness.tasks import METADATA, task_definition
from hawk_signing import Credentials
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator

ROOT = {"clientId": "root", "accessToken": "root-token-" + "r" * 33}
MANAGER = {"clientId": "ops/manager", "accessToken": "manager-token-" + "m" * 30}
READER = {"clientId": "ops/reader", "accessToken": "reader-token-" + "e" * 31}
MANAGE_SCOPES = ["queue:manage:cancel-tasks", "queue:manage:delete-tasks"]
HEADER = ["TASK", "ID", "STATE", "TASK", "QUEUE", "CREATED", "NAME"]


@dataclass(frozen=True, kw_only=True)
class CliResult:
    status: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]

    def refused(self) -> str:
        """The one stderr line of a failure, with nothing on stdout."""
        assert self.stdout == "", self.stdout
        lines = self.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("queue-coordinator: "), self.stderr
        return lines[0]


async def tasks_cli(
    *args: str, root_url: str | None, client: Mapping[str, str] | None = None
) -> CliResult:
    """``queue-coordinator tasks <args>`` with only the ``TASKCLUSTER_*`` variables given."""
    env = {k: v for k, v in child_env().items() if not k.startswith("TASKCLUSTER_")}
    if root_url is not None:
        env["TASKCLUSTER_ROOT_URL"] = root_url
    if client is not None:
        env["TASKCLUSTER_CLIENT_ID"] = client["clientId"]
        env["TASKCLUSTER_ACCESS_TOKEN"] = client["accessToken"]
        if "certificate" in client:
            env["TASKCLUSTER_CERTIFICATE"] = client["certificate"]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coordinator.cli",
        "tasks",
        *args,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    assert "Traceback" not in stderr.decode(), stderr.decode()
    return CliResult(status=process.returncode, stdout=stdout.decode(), stderr=stderr.decode())


@dataclass(frozen=True, kw_only=True)
class Tasks:
    """A coordinator holding two pending tasks and an unscheduled one (waiting on the first)
    in group ``group``, and one pending task in another group and task queue."""

    coordinator: RunningCoordinator
    group: str
    first: str
    second: str
    waiting: str
    elsewhere: str

    @property
    def root_url(self) -> str:
        return self.coordinator.url

    @property
    def in_group(self) -> set[str]:
        return {self.first, self.second, self.waiting}


async def create(coordinator: RunningCoordinator, **overrides: Any) -> str:
    task_id: str = slugid.nice()
    response = await call(
        coordinator.session,
        "PUT",
        f"{coordinator.api}/task/{task_id}",
        task_definition(**overrides),
        credentials=Credentials.from_json(ROOT),
    )
    assert response.status == 200, response.body
    return task_id


@pytest.fixture
async def tasks(start_coordinator: StartCoordinator, tmp_path: Path) -> Tasks:
    clients_file = tmp_path / "clients.json"
    clients_file.write_text(
        json.dumps(
            {
                "issuer": "root",
                "clients": [
                    {**ROOT, "scopes": ["*"]},
                    {**MANAGER, "scopes": MANAGE_SCOPES},
                    {**READER, "scopes": []},
                ],
            }
        )
    )
    clients_file.chmod(0o600)
    coordinator = await start_coordinator(auth_enabled=True, clients_file=clients_file)
    group = slugid.nice()

    def named(name: str) -> dict[str, Any]:
        metadata = {**METADATA, "name": name}
        return {"taskGroupId": group, "workerType": "cli-wt", "metadata": metadata}

    first = await create(coordinator, tags={"team": "red"}, **named("first task"))
    second = await create(coordinator, tags={"team": "blue"}, **named("second task"))
    waiting = await create(coordinator, dependencies=[first], **named("waits for the first"))
    elsewhere = await create(coordinator, workerType="other-wt")
    return Tasks(
        coordinator=coordinator,
        group=group,
        first=first,
        second=second,
        waiting=waiting,
        elsewhere=elsewhere,
    )


async def test_list_prints_a_table_of_the_matching_tasks(tasks: Tasks) -> None:
    listed = await tasks_cli("list", "--task-group-id", tasks.group, root_url=tasks.root_url)
    assert listed.status == 0, listed.stderr
    header, *rows = listed.lines
    assert header.split() == HEADER
    by_id = {row.split()[0]: row for row in rows}
    assert set(by_id) == tasks.in_group
    first = by_id[tasks.first].split()
    assert first[1:3] == ["pending", "test-prov/cli-wt"]
    assert first[3].endswith("Z") and len(first[3]) == len("2026-11-23T10:00:00Z")
    assert by_id[tasks.first].endswith("first task")
    assert by_id[tasks.waiting].split()[1] == "unscheduled"
    # fixed widths (rows print as they stream): every column starts where its header does
    for column in ("STATE", "TASK QUEUE", "CREATED", "NAME"):
        start = header.index(column)
        assert all(row[start - 1] == " " and row[start] != " " for row in rows), column


async def test_list_as_json_with_filters_and_a_limit(tasks: Tasks) -> None:
    group = ("--task-group-id", tasks.group)
    every = await tasks_cli("list", *group, "--json", root_url=tasks.root_url)
    assert every.status == 0, every.stderr
    items = every.json_lines()
    assert {item["status"]["taskId"] for item in items} == tasks.in_group
    assert all("payload" in item["task"] for item in items)

    waiting = await tasks_cli(
        "list", *group, "--state", "unscheduled", "--json", root_url=tasks.root_url
    )
    assert [item["status"]["taskId"] for item in waiting.json_lines()] == [tasks.waiting]

    both = await tasks_cli(
        "list", *group, "--state", "unscheduled", "--state", "pending", "--json",
        root_url=tasks.root_url,
    )  # fmt: skip
    assert {item["status"]["taskId"] for item in both.json_lines()} == tasks.in_group

    red = await tasks_cli("list", "--tag", "team:red", "--json", root_url=tasks.root_url)
    assert [item["status"]["taskId"] for item in red.json_lines()] == [tasks.first]

    queue = await tasks_cli(
        "list", "--task-queue-id", "test-prov/other-wt", "--json", root_url=tasks.root_url
    )
    assert [item["status"]["taskId"] for item in queue.json_lines()] == [tasks.elsewhere]

    limited = await tasks_cli("list", *group, "--json", "--limit", "2", root_url=tasks.root_url)
    assert limited.status == 0, limited.stderr
    assert len(limited.json_lines()) == 2

    none = await tasks_cli("list", "--task-group-id", slugid.nice(), root_url=tasks.root_url)
    assert (none.status, [line.split() for line in none.lines]) == (0, [HEADER])
    assert none.stderr.strip() == "no tasks match"


async def test_summary_lacks_payload_and_extra(tasks: Tasks) -> None:
    summary = await tasks_cli(
        "summary", "--task-group-id", tasks.group, "--json", root_url=tasks.root_url
    )
    assert summary.status == 0, summary.stderr
    items = summary.json_lines()
    assert {item["status"]["taskId"] for item in items} == tasks.in_group
    for item in items:
        assert "payload" not in item["task"] and "extra" not in item["task"]
        assert item["task"]["metadata"]["name"]

    table = await tasks_cli("summary", "--task-group-id", tasks.group, root_url=tasks.root_url)
    assert table.status == 0, table.stderr
    assert {row.split()[0] for row in table.lines[1:]} == tasks.in_group


async def test_count_as_a_table_and_as_json(tasks: Tasks) -> None:
    counted = await tasks_cli(
        "count", "--task-group-id", tasks.group, "--json", root_url=tasks.root_url
    )
    assert counted.status == 0, counted.stderr
    body = json.loads(counted.stdout)
    assert body["total"] == 3
    assert {state: n for state, n in body["states"].items() if n} == {
        "pending": 2,
        "unscheduled": 1,
    }

    table = await tasks_cli("count", "--task-group-id", tasks.group, root_url=tasks.root_url)
    assert table.status == 0, table.stderr
    rows = dict(line.split() for line in table.lines)
    assert rows["STATE"] == "TASKS"
    assert (rows["pending"], rows["unscheduled"], rows["running"], rows["total"]) == (
        "2",
        "1",
        "0",
        "3",
    )


async def test_cancel_and_delete_need_their_scopes(tasks: Tasks) -> None:
    group = ("--task-group-id", tasks.group)
    url = tasks.root_url
    for command, scope in (("cancel", MANAGE_SCOPES[0]), ("delete", MANAGE_SCOPES[1])):
        refused = await tasks_cli(command, *group, root_url=url, client=READER)
        assert refused.status == 1
        line = refused.refused()
        assert line.startswith("queue-coordinator: InsufficientScopes: ")
        assert scope in line

        anonymous = await tasks_cli(command, *group, root_url=url)
        assert anonymous.status == 1
        assert anonymous.refused().startswith("queue-coordinator: AuthenticationFailed: ")
        assert "TASKCLUSTER_CLIENT_ID" in anonymous.stderr

    counted = await tasks_cli("count", *group, "--json", root_url=url)
    assert json.loads(counted.stdout)["total"] == 3  # nothing was touched


async def test_cancel_then_delete(tasks: Tasks) -> None:
    group = ("--task-group-id", tasks.group)
    url = tasks.root_url
    cancelled = await tasks_cli("cancel", *group, root_url=url, client=MANAGER)
    assert (cancelled.status, cancelled.stdout, cancelled.stderr) == (0, "cancelled 3 tasks\n", "")

    counted = await tasks_cli("count", *group, "--json", root_url=url)
    assert json.loads(counted.stdout)["states"]["exception"] == 3
    again = await tasks_cli("cancel", *group, "--json", root_url=url, client=MANAGER)
    assert (again.status, json.loads(again.stdout)) == (0, {"cancelled": 0})

    # temporary credentials, as TASKCLUSTER_CERTIFICATE carries them
    now = wall_clock()
    temporary = temporary_credentials(
        issuer=Credentials(client_id=ROOT["clientId"], access_token=ROOT["accessToken"]),
        client_id=ROOT["clientId"],
        scopes=["queue:manage:delete-tasks"],
        start=now - 60_000,
        expiry=now + 3_600_000,
    )
    deleted = await tasks_cli("delete", *group, "--json", root_url=url, client=temporary)
    assert (deleted.status, json.loads(deleted.stdout)) == (0, {"deleted": 3}), deleted.stderr

    gone = await tasks_cli("list", *group, "--json", root_url=url)
    assert (gone.status, gone.stdout) == (0, "")
    left = await tasks_cli("list", "--json", root_url=url)
    assert [item["status"]["taskId"] for item in left.json_lines()] == [tasks.elsewhere]
    deleted_again = await tasks_cli("delete", *group, root_url=url, client=MANAGER)
    assert (deleted_again.status, deleted_again.stdout) == (0, "deleted 0 tasks\n")


async def test_a_refused_filter_is_one_line_and_exit_1(tasks: Tasks) -> None:
    bad_date = await tasks_cli("list", "--created-after", "notadate", root_url=tasks.root_url)
    assert bad_date.status == 1
    assert "createdAfter" in bad_date.refused()

    everything = await tasks_cli("cancel", root_url=tasks.root_url, client=MANAGER)
    assert everything.status == 1
    assert everything.refused().startswith("queue-coordinator: ")


async def test_a_missing_root_url_is_one_line_and_exit_2() -> None:
    missing = await tasks_cli("count", root_url=None)
    assert missing.status == 2
    assert "TASKCLUSTER_ROOT_URL" in missing.refused()


async def test_an_unreachable_coordinator_is_one_line_and_exit_2() -> None:
    root_url = f"http://127.0.0.1:{free_port()}"
    for command in ("list", "count"):
        unreachable = await tasks_cli(command, "--state", "pending", root_url=root_url)
        assert unreachable.status == 2
        line = unreachable.refused()
        assert "cannot reach the coordinator" in line and root_url in line


async def test_a_stream_that_breaks_off_is_not_taken_for_a_complete_one() -> None:
    """The coordinator closes the connection before the end of the chunked body when the
    store fails mid-stream; a stand-in does that here after one task."""

    async def one_task_then_hang_up(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(json.dumps({"status": {"taskId": "A" * 22}, "task": {}}).encode())
        await response.write(b"\n")
        assert request.transport is not None
        request.transport.close()
        return response

    app = web.Application()
    app.router.add_get("/api/queue/v1/tasks", one_task_then_hang_up)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        broken = await tasks_cli("list", "--json", root_url=f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()
    assert broken.status == 1
    assert [item["status"]["taskId"] for item in broken.json_lines()] == ["A" * 22]
    assert len(broken.stderr.splitlines()) == 1 and "broke off" in broken.stderr
