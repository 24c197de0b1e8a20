"""``queue-coordinator index`` as real child processes against a real coordinator (in this
process, auth on): an entry inserted from the shell, found, outranked, listed with its
namespaces, deleted; a completion's entry found; and the one-line failures (bad input and a
refusal: exit 1, nothing stored; no root URL: exit 2).

The coordinator serves from this test's event loop, so the CLI runs through asyncio's
subprocesses (:func:`tests.fixtures.commands.run_to_end`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

import slugid

from devharness.processes import REPO
from tests.fixtures.clients import Index, rejected, start_secured
from tests.fixtures.commands import Finished, run_to_end, taskcluster_env
from tests.fixtures.coordinator import StartCoordinator

COMMAND = str(Path(sys.executable).parent / "queue-coordinator")


async def cli(*args: str, root_url: str | None, client: Mapping[str, str] | None) -> Finished:
    """``queue-coordinator index <args>`` with only the ``TASKCLUSTER_*`` variables given."""
    env = taskcluster_env(root_url or "", client)
    if root_url is None:
        del env["TASKCLUSTER_ROOT_URL"]
    finished = await run_to_end([COMMAND, "index", *args], cwd=REPO, env=env, timeout_s=60)
    assert "Traceback" not in finished.stderr, finished.stderr
    return finished


async def test_index_commands_insert_find_list_and_delete(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {"ops": ["index:*"], "reader": ["index:find-task:*"]},
    )
    url, ops = coordinator.url, creds["ops"]
    first, second = slugid.nice(), slugid.nice()

    made = await cli(
        "insert",
        "app.v1.latest",
        first,
        "--rank",
        "3",
        "--data",
        '{"a": 1}',
        "--expires",
        "30d",
        root_url=url,
        client=ops,
    )
    assert (made.status, made.stdout) == (0, f"indexed {first} at app.v1.latest (rank 3)\n")
    outranked = await cli("insert", "app.v1.latest", second, root_url=url, client=ops)
    assert outranked.status == 0
    assert outranked.stdout == f"not indexed: {first} (rank 3) outranks it at app.v1.latest\n"
    await cli("insert", "app.odd%name", second, root_url=url, client=ops)

    found = await cli("find", "app.v1.latest", root_url=url, client=creds["reader"])
    assert (found.status, found.stdout) == (0, f"{first}\n")
    answer = json.loads(
        (await cli("find", "app.v1.latest", "--json", root_url=url, client=ops)).stdout
    )
    assert (answer["rank"], answer["data"]) == (3, {"a": 1})
    assert (await Index("aio", url, ops).findTask("app.odd%name"))["taskId"] == second

    listed = await cli("list", "app", root_url=url, client=ops)
    assert listed.status == 0
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["KIND", "INDEX", "PATH", "TASK", "ID", "RANK", "EXPIRES"]
    assert [line.split()[:2] for line in lines[1:]] == [
        ["namespace", "app.v1"],
        ["task", "app.odd%name"],
    ]
    top = await cli("list", "--json", root_url=url, client=ops)
    assert [json.loads(line)["namespace"] for line in top.stdout.splitlines()] == ["app"]

    deleted = await cli("delete", "app.v1.latest", root_url=url, client=ops)
    assert (deleted.status, deleted.stdout) == (0, "deleted the entry at app.v1.latest\n")
    status, _ = await rejected(Index("aio", url, ops).findTask("app.v1.latest"))
    assert status == 404


async def test_index_commands_fail_in_one_line(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await start_secured(
        start_coordinator, tmp_path / "clients.json", {"reader": ["index:find-task:*"]}
    )
    url = coordinator.url
    refused = await cli("insert", "app.x", slugid.nice(), root_url=url, client=creds["reader"])
    assert refused.status == 1
    assert refused.stderr.startswith("queue-coordinator: InsufficientScopes"), refused.stderr
    bad = await cli("insert", "app..x", slugid.nice(), root_url=url, client=creds["root"])
    assert bad.status == 1
    assert "is not an index path" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    missing = await cli("find", "app.none", root_url=url, client=creds["root"])
    assert (missing.status, missing.stderr.split(":")[1].strip()) == (1, "ResourceNotFound")
    no_url = await cli("find", "app.x", root_url=None, client=None)
    assert no_url.status == 2
    assert "TASKCLUSTER_ROOT_URL" in no_url.stderr
    status, _ = await rejected(Index("aio", url, creds["root"]).findTask("app.x"))
    assert status == 404
