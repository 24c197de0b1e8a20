"""The rest of the Taskcluster queue API, task side, through the official client (sync and
aio) on SQLite and PostgreSQL: bulk ``tasks``/``statuses``, task groups as records (get, seal,
cancel), priority changes with their hint moves, the heartbeat endpoints and ``projectId``.
Hints are read from a real Azurite where a priority change must move one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
import slugid

from devharness.tasks import task_definition
from tests.fixtures.clients import Queue, rejected, start_secured
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator
from tests.fixtures.flow import Flow

KINDS = ["sync", "aio"]
GROUP_SCOPES = ["queue:seal-task-group:-/*", "queue:cancel-task-group:-/*"]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def secured(
    start_coordinator: StartCoordinator, tmp_path: Path, store_url: str, **scopes: list[str]
) -> tuple[RunningCoordinator, dict[str, dict[str, str]]]:
    return await start_secured(
        start_coordinator, tmp_path / "clients.json", scopes, store_url=store_url
    )


async def create(queue: Queue, **fields: Any) -> str:
    task_id: str = slugid.nice()
    await queue.createTask(task_id, task_definition(**fields))
    return task_id


async def test_tasks_and_statuses_leave_unknown_ids_out(
    start_coordinator: StartCoordinator, tmp_path: Path, store_url: str, kind: str
) -> None:
    c, creds = await secured(start_coordinator, tmp_path, store_url)
    root = Queue(kind, c.url, creds["root"])
    a, b = await create(root), await create(root, priority="high")
    unknown = slugid.nice()
    anonymous = Queue(kind, c.url)
    tasks = await anonymous.tasks({"taskIds": [b, unknown, a]})
    assert [t["taskId"] for t in tasks["tasks"]] == [b, a]
    assert tasks["tasks"][0]["task"]["priority"] == "high"
    statuses = await anonymous.statuses({"taskIds": [a, unknown]})
    assert [(s["taskId"], s["status"]["state"]) for s in statuses["statuses"]] == [(a, "pending")]
    status, error = await rejected(anonymous.tasks({"taskIds": [a] * 1001}))
    assert status == 400 and "taskIds" in error["message"]


async def test_seal_then_create_is_409_and_cancel_takes_the_unresolved(
    start_coordinator: StartCoordinator, tmp_path: Path, store_url: str, kind: str
) -> None:
    c, creds = await secured(start_coordinator, tmp_path, store_url, sealer=GROUP_SCOPES)
    root, sealer = Queue(kind, c.url, creds["root"]), Queue(kind, c.url, creds["sealer"])
    group = slugid.nice()
    pending = await create(root, taskGroupId=group)
    running = await create(root, taskGroupId=group)
    done = await create(root, taskGroupId=group)
    await create(root, taskGroupId=group, dependencies=[pending])  # unscheduled
    await root.claimTask(running, "0", {"workerGroup": "wg", "workerId": "w"})
    claim = await root.claimTask(done, "0", {"workerGroup": "wg", "workerId": "w"})
    await Queue(kind, c.url, claim["credentials"]).reportCompleted(done, "0")

    fetched = await Queue(kind, c.url).getTaskGroup(group)
    assert fetched["taskGroupId"] == group and fetched["schedulerId"] == "-"
    assert "sealed" not in fetched
    status, error = await rejected(sealer.cancelTaskGroup(group))
    assert status == 409 and "not sealed" in error["message"]
    status, error = await rejected(Queue(kind, c.url, creds["sealer"]).sealTaskGroup(slugid.nice()))
    assert status == 404

    sealed = await sealer.sealTaskGroup(group)
    assert "sealed" in sealed
    assert (await sealer.sealTaskGroup(group))["sealed"] == sealed["sealed"]  # idempotent
    late = slugid.nice()
    status, error = await rejected(root.createTask(late, task_definition(taskGroupId=group)))
    assert status == 409 and "sealed" in error["message"]
    assert (await rejected(root.task(late)))[0] == 404
    listed = await Queue(kind, c.url).listTaskGroup(group)
    assert listed["sealed"] == sealed["sealed"] and len(listed["tasks"]) == 4

    cancelled = await sealer.cancelTaskGroup(group)
    assert cancelled["taskGroupSize"] == 4
    assert cancelled["cancelledCount"] == 3 and done not in cancelled["taskIds"]
    states = {
        s["taskId"]: (s["status"]["state"], s["status"]["runs"][-1].get("reasonResolved"))
        for s in (await root.statuses({"taskIds": [pending, running, done]}))["statuses"]
    }
    assert states == {
        pending: ("exception", "canceled"),
        running: ("exception", "canceled"),
        done: ("completed", "completed"),
    }
    again = await sealer.cancelTaskGroup(group)
    assert (again["cancelledCount"], again["taskIds"]) == (0, [])


async def test_group_methods_need_taskclusters_scopes(
    start_coordinator: StartCoordinator, tmp_path: Path, store_url: str, kind: str
) -> None:
    c, creds = await secured(start_coordinator, tmp_path, store_url, nobody=[])
    root, nobody = Queue(kind, c.url, creds["root"]), Queue(kind, c.url, creds["nobody"])
    group = slugid.nice()
    task_id = await create(root, taskGroupId=group)
    for call, scope in (
        (nobody.sealTaskGroup(group), f"queue:seal-task-group:-/{group}"),
        (
            nobody.changeTaskGroupPriority(group, {"newPriority": "high"}),
            f"queue:change-task-group-priority:-/{group}",
        ),
        (
            nobody.changeTaskPriority(task_id, {"newPriority": "high"}),
            f"queue:change-task-priority:{task_id}",
        ),
    ):
        status, error = await rejected(call)
        assert status == 403 and scope in error["message"], error
    await root.sealTaskGroup(group)
    status, error = await rejected(nobody.cancelTaskGroup(group))
    assert status == 403 and f"queue:cancel-task-group:-/{group}" in error["message"]


async def test_project_id_is_defaulted_shown_and_scoped(
    start_coordinator: StartCoordinator, tmp_path: Path, store_url: str, kind: str
) -> None:
    maker = [
        "queue:create-task:lowest:test-prov/test-wt",
        "queue:scheduler-id:-",
        "queue:create-task:project:ci",
    ]
    c, creds = await secured(start_coordinator, tmp_path, store_url, maker=maker)
    queue = Queue(kind, c.url, creds["maker"])
    mine = await create(queue, projectId="ci")
    assert (await queue.task(mine))["projectId"] == "ci"
    assert (await queue.status(mine))["status"]["projectId"] == "ci"
    status, error = await rejected(queue.createTask(slugid.nice(), task_definition()))
    assert status == 403 and "queue:create-task:project:none" in error["message"]
    status, error = await rejected(
        queue.createTask(slugid.nice(), task_definition(projectId="bad project!"))
    )
    assert status == 400 and "projectId" in error["message"]


async def test_heartbeats_and_version(start_coordinator: StartCoordinator, kind: str) -> None:
    c = await start_coordinator(run_resolvers=False)
    queue = Queue(kind, c.url)
    assert await queue.heartbeat() == {}
    assert await queue.lbheartbeat() == {}
    version = await queue.version()
    assert {"source", "version", "commit", "build"} <= version.keys()
    async with aiohttp.ClientSession() as session:
        for path in ("/__heartbeat__", "/__lbheartbeat__", "/__version__"):
            async with session.get(c.url + path) as response:
                assert response.status == 200, path


# --- priority changes move hints -------------------------------------------------------------


async def test_change_task_priority_moves_a_pending_runs_hint(
    flow: Flow, kind: str, store_url: str
) -> None:
    coord = await flow.coordinator(hint_grace_ms=60_000, store_url=store_url)
    queue = Queue(kind, coord.url)
    task_id = await flow.create(coord, priority="low")
    await flow.wait_for_hint(task_id, 0, priority="low")

    changed = await queue.changeTaskPriority(task_id, {"newPriority": "highest"})
    assert changed["status"]["priority"] == "highest"
    assert (await queue.task(task_id))["priority"] == "highest"
    await flow.wait_for_hint(task_id, 0, priority="highest")
    # the old hint is stale: claimed through the new one, the old one answers 409
    await coord.claim(task_id, 0)
    assert (await coord.try_claim(task_id, 0, worker_id="w2")).status == 409
    # a running run keeps its claim; a resolved task can't change any more
    same = await queue.changeTaskPriority(task_id, {"newPriority": "lowest"})
    assert same["status"]["state"] == "running"
    await coord.report(task_id, 0, "completed")
    status, error = await rejected(queue.changeTaskPriority(task_id, {"newPriority": "high"}))
    assert status == 409 and "resolved" in error["message"]
    status, error = await rejected(queue.changeTaskPriority(task_id, {"newPriority": "normal"}))
    assert status == 400


async def test_change_task_group_priority_changes_every_unresolved_task(
    flow: Flow, kind: str, store_url: str
) -> None:
    coord = await flow.coordinator(hint_grace_ms=60_000, store_url=store_url)
    queue = Queue(kind, coord.url)
    group = slugid.nice()
    pending = [await flow.create(coord, taskGroupId=group) for _ in range(3)]
    resolved = await flow.create(coord, taskGroupId=group)
    await coord.claim(resolved, 0)
    await coord.report(resolved, 0, "failed")

    answer = await queue.changeTaskGroupPriority(group, {"newPriority": "very-high"})
    assert answer["tasksAffected"] == 3 and sorted(answer["taskIds"]) == sorted(pending)
    assert (answer["schedulerId"], answer["newPriority"]) == ("-", "very-high")
    for task_id in pending:
        await flow.wait_for_hint(task_id, 0, priority="very-high")
    assert (await queue.task(resolved))["priority"] == "lowest"
