"""The index service (docs/index-service.md) through the official ``taskcluster.Index`` client,
unmodified, sync and aio, against an in-process coordinator with authentication on: a task's
completion indexes its ``index.*`` routes with its ``extra.index``, Taskcluster's rank rule
(completions and insertTask), every method with its scopes and paging, findArtifactFromTask's
redirect, expiry, and the bad input that is a 4xx with nothing stored. The store's part is
tests/integration/store/test_index.py's; taskgraph's use, tests/e2e/test_taskgraph_index.py's."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import slugid
import taskcluster

from coordinator.resolvers import index_sweeper
from devharness.tasks import task_definition
from tests.fixtures.clients import (
    Credentials,
    Index,
    Queue,
    missing_scopes,
    rejected,
    start_secured,
    worker_scopes,
)
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator

PROV = "index-prov"
INDEX = "/api/index/v1"
PRODUCER = [
    f"queue:create-task:lowest:{PROV}/wt",
    "queue:scheduler-id:-",
    "queue:create-task:project:none",
    "queue:route:*",
]
WORKER = [*worker_scopes(PROV), "queue:resolve-task:*"]


async def secured(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> tuple[RunningCoordinator, dict[str, Credentials]]:
    return await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {
            "producer": PRODUCER,
            "worker": WORKER,
            "reader": ["index:find-task:project.*", "index:list-*", "queue:get-artifact:*"],
            "indexer": ["index:insert-task:project.*", "index:delete-task:project.*"],
            "nobody": [],
        },
    )


async def complete(
    coordinator: RunningCoordinator, creds: dict[str, Credentials], **fields: Any
) -> str:
    """A task of ``fields`` created by the producer, claimed and completed by the worker."""
    task_id: str = slugid.nice()
    queue = Queue("aio", coordinator.url, creds["producer"])
    await queue.createTask(task_id, task_definition(provisionerId=PROV, workerType="wt", **fields))
    worker = Queue("aio", coordinator.url, creds["worker"])
    await worker.claimTask(task_id, "0", {"workerGroup": "wg", "workerId": "w1"})
    await worker.reportCompleted(task_id, "0")
    return task_id


def entry_body(task_id: str, rank: Any = 0, **fields: Any) -> dict[str, Any]:
    return {
        "taskId": task_id,
        "rank": rank,
        "data": {},
        "expires": taskcluster.fromNowJSON("1 day"),
        **fields,
    }


@pytest.mark.parametrize("kind", ["sync", "aio"])
async def test_a_completion_indexes_its_routes_with_its_extra_index(
    kind: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    expires = taskcluster.fromNowJSON("2 days")
    task_id = await complete(
        coordinator,
        creds,
        routes=["index.project.app.v1.latest", "index.project.app.rev-abc", "tc-treeherder.x"],
        extra={"index": {"rank": 7, "data": {"built": "yes"}, "expires": expires}},
    )
    index = Index(kind, coordinator.url, creds["reader"])
    found = await index.findTask("project.app.v1.latest")
    assert {key: found[key] for key in ("namespace", "taskId", "rank", "data")} == {
        "namespace": "project.app.v1.latest",
        "taskId": task_id,
        "rank": 7,
        "data": {"built": "yes"},
    }
    assert found["expires"][:19] == expires[:19]
    assert (await index.findTask("project.app.rev-abc"))["taskId"] == task_id

    top = await index.listNamespaces("")
    assert [n["namespace"] for n in top["namespaces"]] == ["project"]
    under = await index.listNamespaces("project.app")
    assert [(n["namespace"], n["name"]) for n in under["namespaces"]] == [("project.app.v1", "v1")]
    # a namespace lists while its entries may: until the midnight after the latest expiry
    assert under["namespaces"][0]["expires"].endswith("T00:00:00.000Z")
    listed = await index.listTasks("project.app")
    assert [(t["namespace"], t["taskId"]) for t in listed["tasks"]] == [
        ("project.app.rev-abc", task_id)
    ]
    counted = coordinator.parts.metrics.registry.get_sample_value(
        "index_completion_entries_total", {"result": "written"}
    )
    assert counted == 2


async def test_the_rank_rule_decides_which_completion_stays(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    route = ["index.project.ranked"]
    high = await complete(coordinator, creds, routes=route, extra={"index": {"rank": 5}})
    await complete(coordinator, creds, routes=route, extra={"index": {"rank": 4}})
    index = Index("aio", coordinator.url, creds["reader"])
    assert (await index.findTask("project.ranked"))["taskId"] == high
    # an equal rank: the later completion wins
    same = await complete(coordinator, creds, routes=route, extra={"index": {"rank": 5}})
    assert (await index.findTask("project.ranked"))["taskId"] == same
    # no extra.index: rank 0, outranked
    await complete(coordinator, creds, routes=route)
    assert (await index.findTask("project.ranked"))["taskId"] == same


async def test_a_completion_whose_extra_index_is_malformed_is_not_indexed(
    start_coordinator: StartCoordinator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    caplog.set_level(logging.WARNING, "coordinator.service.transitions")
    task_id = await complete(
        coordinator, creds, routes=["index.project.bad"], extra={"index": {"rank": "high"}}
    )
    status, body = await rejected(
        Index("aio", coordinator.url, creds["reader"]).findTask("project.bad")
    )
    assert status == 404, body
    assert f"task not indexed (rank 'high' is not an integer (a 64-bit one)) taskId={task_id}" in (
        caplog.text
    )
    assert (await Queue("aio", coordinator.url, creds["producer"]).status(task_id))["status"][
        "state"
    ] == "completed"
    refused = coordinator.parts.metrics.registry.get_sample_value(
        "index_completion_entries_total", {"result": "refused"}
    )
    assert refused == 1


async def test_failed_and_exception_runs_are_not_indexed(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    queue = Queue("aio", coordinator.url, creds["producer"])
    worker = Queue("aio", coordinator.url, creds["worker"])
    task_id = slugid.nice()
    await queue.createTask(
        task_id,
        task_definition(provisionerId=PROV, workerType="wt", routes=["index.project.failed"]),
    )
    await worker.claimTask(task_id, "0", {"workerGroup": "wg", "workerId": "w1"})
    await worker.reportFailed(task_id, "0")
    status, _ = await rejected(
        Index("aio", coordinator.url, creds["reader"]).findTask("project.failed")
    )
    assert status == 404


@pytest.mark.parametrize("kind", ["sync", "aio"])
async def test_insert_task_keeps_the_rank_rule_and_delete_task_removes(
    kind: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    indexer = Index(kind, coordinator.url, creds["indexer"])
    first, second, third = slugid.nice(), slugid.nice(), slugid.nice()
    stored = await indexer.insertTask("project.manual", entry_body(first, 10, data={"n": 1}))
    assert (stored["taskId"], stored["rank"], stored["data"]) == (first, 10, {"n": 1})
    # outranked: 200, and the answer is the entry that stays
    kept = await indexer.insertTask("project.manual", entry_body(second, 9))
    assert kept["taskId"] == first
    replaced = await indexer.insertTask("project.manual", entry_body(third, 10))
    assert replaced["taskId"] == third
    reader = Index(kind, coordinator.url, creds["reader"])
    assert (await reader.findTask("project.manual"))["taskId"] == third

    assert await indexer.deleteTask("project.manual") == {}
    status, _ = await rejected(reader.findTask("project.manual"))
    assert status == 404
    assert await indexer.deleteTask("project.manual") == {}  # nothing there: still {}
    # the namespace stays
    namespaces = await reader.listNamespaces("")
    assert [n["name"] for n in namespaces["namespaces"]] == ["project"]


async def test_an_expired_entry_is_not_found_is_replaced_by_any_rank_and_is_swept(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    indexer = Index("aio", coordinator.url, creds["indexer"])
    reader = Index("aio", coordinator.url, creds["reader"])
    old = slugid.nice()
    past = taskcluster.fromNowJSON("-1 hour")
    await indexer.insertTask("project.old.entry", entry_body(old, 100, expires=past))
    status, body = await rejected(reader.findTask("project.old.entry"))
    assert (status, body["code"]) == (404, "ResourceNotFound")
    assert (await reader.listTasks("project.old"))["tasks"] == []
    assert await index_sweeper.run_once(coordinator.parts.index) >= 1
    assert await coordinator.parts.store.get_indexed_tasks([("project.old", "entry")]) == []

    await indexer.insertTask("project.old.entry", entry_body(old, 100, expires=past))
    new = slugid.nice()
    assert (await indexer.insertTask("project.old.entry", entry_body(new, 1)))["taskId"] == new


async def test_find_tasks_at_index_pages_through_the_paths_it_finds(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    indexer = Index("aio", coordinator.url, creds["indexer"])
    ids = {}
    for name in ("a", "b", "c"):
        ids[name] = slugid.nice()
        await indexer.insertTask(f"project.many.{name}", entry_body(ids[name]))
    reader = Index("aio", coordinator.url, creds["reader"])
    paths = ["project.many.c", "project.many.missing", "project.many.a", "project.many.b"]
    everything = await reader.findTasksAtIndex({"indexes": paths})
    assert [t["taskId"] for t in everything["tasks"]] == [ids["c"], ids["a"], ids["b"]]
    assert "continuationToken" not in everything

    seen, token = [], None
    for _ in range(5):
        query: dict[str, Any] = {"limit": 1}
        if token:
            query["continuationToken"] = token
        page = await reader.findTasksAtIndex(payload={"indexes": paths}, query=query)
        seen += [t["namespace"] for t in page["tasks"]]
        token = page.get("continuationToken")
        if token is None:
            break
    assert seen == ["project.many.c", "project.many.a", "project.many.b"]

    status, body = await rejected(
        reader.findTasksAtIndex({"indexes": ["project.many.a", "other.x"]})
    )
    assert status == 403
    assert "index:find-task:other.x" in missing_scopes(body)


async def test_listings_page_by_name(start_coordinator: StartCoordinator, tmp_path: Path) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    indexer = Index("aio", coordinator.url, creds["indexer"])
    for name in ("e", "d", "c", "b", "a"):
        await indexer.insertTask(f"project.paged.{name}", entry_body(slugid.nice()))
        await indexer.insertTask(f"project.paged.{name}.x", entry_body(slugid.nice()))
    reader = Index("sync", coordinator.url, creds["reader"])
    for method, key in (("listTasks", "tasks"), ("listNamespaces", "namespaces")):
        names: list[str] = []
        query: dict[str, Any] = {"limit": 2}
        while True:
            page = await getattr(reader, method)("project.paged", query=query)
            names += [item["namespace"].rsplit(".", 1)[1] for item in page[key]]
            if "continuationToken" not in page:
                break
            query = {"limit": 2, "continuationToken": page["continuationToken"]}
        assert names == ["a", "b", "c", "d", "e"], method


async def test_find_artifact_from_task_redirects_as_get_latest_artifact(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    task_id = slugid.nice()
    queue = Queue("aio", coordinator.url, creds["producer"])
    await queue.createTask(
        task_id,
        task_definition(provisionerId=PROV, workerType="wt", routes=["index.project.art"]),
    )
    worker = Queue("aio", coordinator.url, creds["worker"])
    claim = await worker.claimTask(task_id, "0", {"workerGroup": "wg", "workerId": "w1"})
    run = Queue("aio", coordinator.url, claim["credentials"])
    for name in ("public/build.txt", "private/key.txt"):
        await run.createArtifact(
            task_id,
            "0",
            name,
            {
                "storageType": "reference",
                "url": f"https://example.com/{name}",
                "expires": taskcluster.fromNowJSON("1 day"),
                "contentType": "text/plain",
            },
        )
    await worker.reportCompleted(task_id, "0")

    async with aiohttp.ClientSession() as session:
        base = f"{coordinator.url}{INDEX}/task/project.art/artifacts"
        async with session.get(f"{base}/public/build.txt", allow_redirects=False) as response:
            assert response.status == 303
            assert response.headers["Location"] == "https://example.com/public/build.txt"
        # anonymous callers hold public/* only
        async with session.get(f"{base}/private/key.txt", allow_redirects=False) as response:
            assert response.status == 401  # as getLatestArtifact answers them
            assert "queue:get-artifact:private/key.txt" in (await response.text())
        async with session.get(
            f"{coordinator.url}{INDEX}/task/project.none/artifacts/public/build.txt",
            allow_redirects=False,
        ) as response:
            assert response.status == 404
    # the official client's signed URL, by a caller holding the scope
    reader = Index("sync", coordinator.url, creds["reader"])
    url = reader.official.buildSignedUrl("findArtifactFromTask", "project.art", "private/key.txt")
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, allow_redirects=False) as response,
    ):
        assert response.status == 303
        assert response.headers["Location"] == "https://example.com/private/key.txt"


async def test_every_method_refuses_a_caller_without_its_scopes(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    nobody = Index("aio", coordinator.url, creds["nobody"])
    calls = {
        "index:find-task:project.x": nobody.findTask("project.x"),
        "index:list-namespaces:project": nobody.listNamespaces("project"),
        "index:list-namespaces:": nobody.listNamespaces(""),
        "index:list-tasks:project": nobody.listTasks("project"),
        "index:insert-task:project.x": nobody.insertTask("project.x", entry_body(slugid.nice())),
        "index:delete-task:project.x": nobody.deleteTask("project.x"),
    }
    for scope, call in calls.items():
        status, body = await rejected(call)
        assert status == 403, scope
        assert scope in missing_scopes(body), (scope, body)


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("project." + "x" * 250, None, "at most 255 characters"),
        ("project..x", None, "is not an index path"),
        ("project.x", {"rank": 1.5}, "rank"),
        ("project.x", {"rank": "1"}, "rank"),
        ("project.x", {"data": [1]}, "data"),
        ("project.x", {"data": {"big": "x" * 40_000}}, "32768"),
        ("project.x", {"expires": "tomorrow"}, "expires"),
        ("project.x", {"taskId": "not-a-slugid"}, "taskId"),
    ],
)
async def test_bad_input_is_a_400_and_stores_nothing(
    path: str,
    body: dict[str, Any] | None,
    says: str,
    start_coordinator: StartCoordinator,
    tmp_path: Path,
) -> None:
    coordinator, creds = await start_secured(
        start_coordinator, tmp_path / "clients.json", {"admin": ["index:*"]}
    )
    admin = Index("aio", coordinator.url, creds["admin"])
    status, answer = await rejected(
        admin.insertTask(path, {**entry_body(slugid.nice()), **(body or {})})
    )
    assert status == 400, answer
    assert says in answer["message"], answer["message"]
    assert (await admin.listNamespaces(""))["namespaces"] == []
    status, _ = await rejected(admin.findTasksAtIndex({"indexes": ["project..x"]}))
    assert status == 400


async def test_completions_through_two_replicas_leave_the_highest_rank(
    start_coordinator: StartCoordinator, postgres_schema_url: str
) -> None:
    replicas = [await start_coordinator(store_url=postgres_schema_url) for _ in range(2)]
    first = replicas[0]
    ranks = list(range(12))
    task_ids = [
        await first.create(routes=["index.rep.latest"], extra={"index": {"rank": rank}})
        for rank in ranks
    ]
    for task_id in task_ids:
        await first.claim(task_id)
    # every completion at once, alternating between the replicas: each writes its entry in
    # its own transaction, and the rank rule leaves the highest
    await asyncio.gather(
        *(
            replicas[i % 2].report(task_id, 0, "completed")
            for i, task_id in enumerate(reversed(task_ids))
        )
    )
    for replica in replicas:
        found = await Index("aio", replica.url).findTask("rep.latest")
        assert (found["taskId"], found["rank"]) == (task_ids[-1], ranks[-1])
    written = sum(
        replica.parts.metrics.registry.get_sample_value(
            "index_completion_entries_total", {"result": "written"}
        )
        or 0
        for replica in replicas
    )
    assert written == len(task_ids)  # each completion wrote once, whichever replica
