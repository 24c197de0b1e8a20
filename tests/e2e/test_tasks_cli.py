"""``queue-coordinator tasks`` as a real child process against a real coordinator (in this
process, auth on): listings as tables and NDJSON with filters, summaries, counts, bulk cancel
and delete with and without their scopes (and with temporary credentials), a task's artifacts
listed (every page) and downloaded (to a file or stdout, a gzip log decoded, references and
links followed, from the directory backend and from Azure Blob Storage on Azurite), and the
one-line failures: a missing or unreachable root URL (exit 2), a refusal from the coordinator
(exit 1), an error artifact's reason (exit 1), an output file that cannot be written (exit 2).

The coordinator serves from this test's event loop, so the CLI runs through asyncio's
subprocesses, never a blocking ``subprocess.run``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import slugid
from aiohttp import web
from yarl import URL

from coordinator.api.credentials import temporary_credentials
from coordinator.service.clock import wall_clock
from devharness.api import call
from devharness.azurite import AzuriteProcess
from devharness.ports import free_port
from devharness.processes import REPO, child_env
from devharness.tasks import METADATA, task_definition
from hawk_signing import Credentials
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator

ROOT = {"clientId": "root", "accessToken": "root-token-" + "r" * 33}
MANAGER = {"clientId": "ops/manager", "accessToken": "manager-token-" + "m" * 30}
READER = {"clientId": "ops/reader", "accessToken": "reader-token-" + "e" * 31}
MANAGE_SCOPES = [
    "queue:manage:cancel-tasks",
    "queue:manage:delete-tasks",
    "queue:manage:rerun-tasks",
]
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


def write_clients(tmp_path: Path) -> Path:
    """The clients file of ROOT, MANAGER and READER (anonymous callers get the default
    scopes: queue:get-artifact:public/*)."""
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
    return clients_file


@pytest.fixture
async def tasks(start_coordinator: StartCoordinator, tmp_path: Path) -> Tasks:
    coordinator = await start_coordinator(auth_enabled=True, clients_file=write_clients(tmp_path))
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


async def test_cancel_rerun_and_delete_need_their_scopes(tasks: Tasks) -> None:
    group = ("--task-group-id", tasks.group)
    url = tasks.root_url
    for command, scope in zip(("cancel", "delete", "rerun"), MANAGE_SCOPES, strict=True):
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


async def test_cancel_rerun_then_delete(tasks: Tasks) -> None:
    group = ("--task-group-id", tasks.group)
    url = tasks.root_url
    cancelled = await tasks_cli("cancel", *group, root_url=url, client=MANAGER)
    assert (cancelled.status, cancelled.stdout, cancelled.stderr) == (0, "cancelled 3 tasks\n", "")

    counted = await tasks_cli("count", *group, "--json", root_url=url)
    assert json.loads(counted.stdout)["states"]["exception"] == 3
    rerun = await tasks_cli("rerun", *group, root_url=url, client=MANAGER)
    assert (rerun.status, rerun.stdout, rerun.stderr) == (0, "rerun 3 tasks\n", "")
    rerun_again = await tasks_cli("rerun", *group, "--json", root_url=url, client=MANAGER)
    assert json.loads(rerun_again.stdout) == {"rerun": 0, "matched": 0}
    counted = await tasks_cli("count", *group, "--json", root_url=url)
    assert json.loads(counted.stdout)["states"]["pending"] == 3
    cancelled = await tasks_cli("cancel", *group, root_url=url, client=MANAGER)
    assert cancelled.stdout == "cancelled 3 tasks\n"
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


async def test_half_given_credentials_are_one_line_and_exit_2() -> None:
    root_url = f"http://127.0.0.1:{free_port()}"
    half = await tasks_cli("count", root_url=root_url, client={"clientId": "c", "accessToken": ""})
    assert half.status == 2
    assert "TASKCLUSTER_CLIENT_ID is set but TASKCLUSTER_ACCESS_TOKEN is not" in half.refused()


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


# --- artifacts -----------------------------------------------------------------------------

LOG_TEXT = "".join(f"line {n}: the build says hello\n" for n in range(2_000))
REPORT = b'{"passed": 12, "failed": 0}\n'
MANY = 1_001
"""Artifacts of run 0: one more than the coordinator's largest page, so listing them takes two."""


async def root_call(
    coordinator: RunningCoordinator, method: str, path: str, body: Any = None
) -> Any:
    """One request signed by ROOT, asserting a 200; the answer's body."""
    credentials = Credentials.from_json(ROOT)
    response = await call(
        coordinator.session, method, coordinator.api + path, body, credentials=credentials
    )
    assert response.status == 200, (method, path, response.body)
    return response.body


@dataclass(frozen=True, kw_only=True)
class Artifacts:
    """A task whose run 0 (resolved ``exception``, retried) holds ``public/first.txt`` and
    :data:`MANY` ``public/many/<n>`` links, and whose running run 1 holds a gzip log, a private
    report, an error artifact and a reference to the log."""

    coordinator: RunningCoordinator
    task_id: str
    first_names: list[str]

    @property
    def root_url(self) -> str:
        return self.coordinator.url


async def upload(
    coordinator: RunningCoordinator,
    run: str,
    name: str,
    content: bytes,
    *,
    content_type: str,
    expires: str,
    encoding: str | None = None,
) -> None:
    """createArtifact (s3) then the PUT of ``content`` to its putUrl, as a worker does."""
    created = await root_call(
        coordinator,
        "POST",
        f"{run}/artifacts/{quote(name, safe='')}",
        {"storageType": "s3", "expires": expires, "contentType": content_type},
    )
    headers = {"Content-Type": content_type}
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    async with coordinator.session.put(
        URL(created["putUrl"], encoded=True), data=content, headers=headers
    ) as response:
        assert response.status == 200, await response.text()


async def upload_log_and_report(coordinator: RunningCoordinator, run: str, *, expires: str) -> None:
    """:func:`upload` the gzip ``public/logs/live_backing.log`` (:data:`LOG_TEXT`) and
    ``private/report.json`` (:data:`REPORT`) to ``run`` (``/task/<id>/runs/<n>``)."""
    await upload(
        coordinator, run, "public/logs/live_backing.log", gzip.compress(LOG_TEXT.encode()),
        content_type="text/plain", encoding="gzip", expires=expires,
    )  # fmt: skip
    await upload(
        coordinator, run, "private/report.json", REPORT,
        content_type="application/json", expires=expires,
    )  # fmt: skip


@pytest.fixture
async def artifacts(tasks: Tasks) -> Artifacts:
    coordinator = tasks.coordinator
    task_id = await create(coordinator, workerType="cli-wt")
    expires = (await root_call(coordinator, "GET", f"/task/{task_id}"))["expires"]
    worker = {"workerGroup": "wg", "workerId": "w1"}
    run0, run1 = f"/task/{task_id}/runs/0", f"/task/{task_id}/runs/1"

    await root_call(coordinator, "POST", f"{run0}/claim", worker)
    await upload(
        coordinator, run0, "public/first.txt", b"run 0 was here\n",
        content_type="text/plain", expires=expires,
    )  # fmt: skip
    many = [f"public/many/{n:04}" for n in range(MANY)]
    link = {"storageType": "link", "expires": expires, "artifact": "public/first.txt"}
    for start in range(0, MANY, 50):
        await asyncio.gather(
            *(
                root_call(coordinator, "POST", f"{run0}/artifacts/{quote(name, safe='')}", link)
                for name in many[start : start + 50]
            )
        )
    await root_call(coordinator, "POST", f"{run0}/exception", {"reason": "worker-shutdown"})

    await root_call(coordinator, "POST", f"{run1}/claim", worker)
    await upload_log_and_report(coordinator, run1, expires=expires)
    missing = {
        "storageType": "error",
        "expires": expires,
        "reason": "file-missing-on-worker",
        "message": "no such file: dist/app.tar.gz",
    }
    await root_call(coordinator, "POST", f"{run1}/artifacts/public%2Fapp.tar.gz", missing)
    log_url = f"{coordinator.api}{run1}/artifacts/public%2Flogs%2Flive_backing.log"
    reference = {
        "storageType": "reference",
        "expires": expires,
        "url": log_url,
        "contentType": "text/plain",
    }
    await root_call(coordinator, "POST", f"{run1}/artifacts/public%2Flog-elsewhere", reference)
    return Artifacts(
        coordinator=coordinator, task_id=task_id, first_names=["public/first.txt", *many]
    )


RUN1_NAMES = [
    "private/report.json",
    "public/app.tar.gz",
    "public/log-elsewhere",
    "public/logs/live_backing.log",
]


async def test_artifacts_lists_the_latest_run_or_the_one_asked_for(artifacts: Artifacts) -> None:
    latest = await tasks_cli(
        "artifacts", artifacts.task_id, root_url=artifacts.root_url, client=ROOT
    )
    assert latest.status == 0, latest.stderr
    header, *rows = latest.lines
    assert header.split() == ["NAME", "STORAGE", "CONTENT", "TYPE", "EXPIRES"]
    by_name = {row.split()[0]: row.split()[1:] for row in rows}
    assert list(by_name) == RUN1_NAMES
    assert by_name["private/report.json"][:2] == ["s3", "application/json"]
    assert by_name["public/app.tar.gz"][0] == "error"
    assert by_name["public/log-elsewhere"][:2] == ["reference", "text/plain"]
    assert by_name["public/logs/live_backing.log"][:2] == ["s3", "text/plain"]
    expires = by_name["public/logs/live_backing.log"][2]
    assert expires.endswith("Z") and len(expires) == len("2026-11-23T10:00:00Z")
    for column in ("STORAGE", "CONTENT TYPE", "EXPIRES"):
        start = header.index(column)
        assert all(row[start - 1] == " " and row[start] != " " for row in rows), column

    # run 0: every page of a listing longer than one
    first = await tasks_cli(
        "artifacts", artifacts.task_id, "--run-id", "0", "--json",
        root_url=artifacts.root_url, client=ROOT,
    )  # fmt: skip
    assert first.status == 0, first.stderr
    items = first.json_lines()
    assert [item["name"] for item in items] == artifacts.first_names
    assert {item["storageType"] for item in items[1:]} == {"link"}

    # anonymous callers hold queue:get-artifact:public/* only (the clients file's default)
    anonymous = await tasks_cli("artifacts", artifacts.task_id, root_url=artifacts.root_url)
    assert anonymous.status == 1
    line = anonymous.refused()
    assert line.startswith("queue-coordinator: AuthenticationFailed: ")
    assert f"queue:list-artifacts:{artifacts.task_id}" in line and "TASKCLUSTER_CLIENT_ID" in line

    no_run = await tasks_cli(
        "artifacts", artifacts.task_id, "--run-id", "7", root_url=artifacts.root_url, client=ROOT
    )
    assert no_run.status == 1
    assert no_run.refused().startswith("queue-coordinator: ResourceNotFound: ")


async def test_download_to_a_file_and_to_stdout(artifacts: Artifacts, tmp_path: Path) -> None:
    url, task_id = artifacts.root_url, artifacts.task_id
    downloads = tmp_path / "downloads"  # tmp_path is the coordinator's data directory too
    downloads.mkdir()
    target = downloads / "report.json"
    saved = await tasks_cli(
        "download", task_id, "private/report.json", "-o", str(target), root_url=url, client=ROOT
    )
    assert (saved.status, saved.stdout) == (0, ""), saved.stderr
    assert target.read_bytes() == REPORT
    assert saved.stderr.strip() == f"wrote {len(REPORT)} bytes to {target}"
    assert os.listdir(downloads) == ["report.json"]  # no partial file left beside it

    printed = await tasks_cli("download", task_id, "private/report.json", root_url=url, client=ROOT)
    assert (printed.status, printed.stdout, printed.stderr) == (0, REPORT.decode(), "")

    # the log was uploaded gzipped (Content-Encoding: gzip): it reads as text, anonymously
    log = await tasks_cli("download", task_id, "public/logs/live_backing.log", root_url=url)
    assert (log.status, log.stdout) == (0, LOG_TEXT), log.stderr

    # a reference artifact's URL (here the log's getArtifact URL) is followed too
    elsewhere = await tasks_cli("download", task_id, "public/log-elsewhere", root_url=url)
    assert (elsewhere.status, elsewhere.stdout) == (0, LOG_TEXT), elsewhere.stderr

    # an earlier run, and a link (run 0's public/many/* point at public/first.txt)
    first = await tasks_cli("download", task_id, "public/many/0007", "--run-id", "0", root_url=url)
    assert (first.status, first.stdout) == (0, "run 0 was here\n"), first.stderr


async def test_download_refusals(artifacts: Artifacts, tmp_path: Path) -> None:
    url, task_id = artifacts.root_url, artifacts.task_id
    downloads = tmp_path / "downloads"  # tmp_path is the coordinator's data directory too
    downloads.mkdir()
    target = downloads / "out"

    private = await tasks_cli(
        "download", task_id, "private/report.json", "-o", str(target), root_url=url
    )
    assert private.status == 1
    line = private.refused()
    assert line.startswith("queue-coordinator: AuthenticationFailed: ")
    assert "queue:get-artifact:private/report.json" in line and "TASKCLUSTER_CLIENT_ID" in line
    assert not target.exists()

    error = await tasks_cli(
        "download", task_id, "public/app.tar.gz", "-o", str(target), root_url=url, client=ROOT
    )
    assert error.status == 1
    assert error.refused() == (
        "queue-coordinator: file-missing-on-worker: no such file: dist/app.tar.gz"
    )
    assert os.listdir(downloads) == []  # neither the file nor a partial one

    missing = await tasks_cli("download", task_id, "public/nothing", root_url=url, client=ROOT)
    assert missing.status == 1
    assert missing.refused().startswith("queue-coordinator: ResourceNotFound: ")

    nowhere = downloads / "no-such-dir" / "report.json"
    unwritable = await tasks_cli(
        "download", task_id, "private/report.json", "-o", str(nowhere), root_url=url, client=ROOT
    )
    assert unwritable.status == 2
    assert str(nowhere) in unwritable.refused()


async def test_download_from_azure_blob_storage(
    start_coordinator: StartCoordinator,
    tmp_path: Path,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
) -> None:
    """getArtifact redirects to a SAS URL of the blob: fetched as it is, gzip replayed by
    Azure (the stored Content-Encoding) and decoded."""
    coordinator = await start_coordinator(
        auth_enabled=True,
        clients_file=write_clients(tmp_path),
        artifacts="azure",
        azure_connection_string=azurite.connection_string,
        queue_prefix=azure_namespace.queue_prefix,
    )
    task_id = await create(coordinator, workerType="cli-wt")
    expires = (await root_call(coordinator, "GET", f"/task/{task_id}"))["expires"]
    run = f"/task/{task_id}/runs/0"
    await root_call(coordinator, "POST", f"{run}/claim", {"workerGroup": "wg", "workerId": "w1"})
    await upload_log_and_report(coordinator, run, expires=expires)

    log = await tasks_cli(
        "download", task_id, "public/logs/live_backing.log", root_url=coordinator.url
    )
    assert (log.status, log.stdout) == (0, LOG_TEXT), log.stderr
    report = await tasks_cli(
        "download", task_id, "private/report.json", root_url=coordinator.url, client=ROOT
    )
    assert (report.status, report.stdout) == (0, REPORT.decode()), report.stderr
