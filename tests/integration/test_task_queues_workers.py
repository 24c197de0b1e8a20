"""Task queues and workers as records kept from claims, through the official ``taskcluster``
client (113.x, sync ``taskcluster.Queue`` and ``taskcluster.aio.Queue``) on SQLite and
PostgreSQL: listTaskQueues, getTaskQueue, listPendingTasks, listClaimedTasks,
taskQueueCountsBatch (and the tasks resolved within a window), the provisioner-era views,
declareWorker, getWorker, listWorkers and quarantineWorker (claimWork empty and claimTask 409
for the quarantined worker only, lifted after quarantineUntil on the injected clock, seen by a
second replica within a second).

Also: the one-segment taskQueueId routes next to the existing counts routes, bad input, and
that claims and createTask only buffer their sightings (written by one flush, rate-limited).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import slugid

from coordinator.domain.listings import RESOLVED_WINDOW_MAX_S
from coordinator.domain.records import from_iso, to_iso
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import WorkerKey
from coordinator.service.clock import wall_clock
from coordinator.service.workers import SEEN_INTERVAL, WorkerService
from coordinator.store.base import Store
from devharness.azurite import AzuriteProcess
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.azurite import AzureNamespace
from tests.fixtures.clients import WT, Queue, rejected, start_secured, worker_scopes
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator

MINUTE = 60_000
KINDS = ["sync", "aio"]


def admin_scopes(prov: str) -> list[str]:
    """What an operator of the worker pools of ``prov`` holds."""
    return [f"queue:declare-worker:{prov}/*", f"queue:quarantine-worker:{prov}/*"]


@dataclass(frozen=True, kw_only=True)
class Secured:
    """A coordinator and official clients of one kind (``sync`` or ``aio``) for it."""

    coordinator: RunningCoordinator
    credentials: dict[str, dict[str, str]]
    anonymous: Queue
    root: Queue
    workers: Queue
    """Holds a worker's scopes (claim-work, claim-task, worker-id) for the provisioner."""
    admin: Queue
    """Holds :func:`admin_scopes`."""


Secure = Callable[..., Awaitable[Secured]]


@pytest.fixture
def secure(
    start_coordinator: StartCoordinator,
    azurite: AzuriteProcess,
    azure_namespace: AzureNamespace,
    tmp_path: Path,
) -> Secure:
    """Start the test's coordinator with auth on, Azure on Azurite and a given store, and get
    clients of one kind for it: ``await secure(kind, store_url, **config)``."""
    prov = azure_namespace.provisioner_id

    async def start(kind: str, store_url: str, **overrides: Any) -> Secured:
        coordinator, credentials = await start_secured(
            start_coordinator,
            tmp_path / "clients.json",
            {"worker": worker_scopes(prov), "admin": admin_scopes(prov)},
            store_url=store_url,
            azure_connection_string=azurite.connection_string,
            queue_prefix=azure_namespace.queue_prefix,
            claim_work_timeout_ms=1_000,
            **overrides,
        )
        return Secured(
            coordinator=coordinator,
            credentials=credentials,
            anonymous=Queue(kind, coordinator.url),
            root=Queue(kind, coordinator.url, credentials["root"]),
            workers=Queue(kind, coordinator.url, credentials["worker"]),
            admin=Queue(kind, coordinator.url, credentials["admin"]),
        )

    return start


def worker(worker_id: str) -> dict[str, str]:
    """A claimTask body."""
    return {"workerGroup": "wg", "workerId": worker_id}


def work(worker_id: str, tasks: int = 1) -> dict[str, Any]:
    """A claimWork body."""
    return {**worker(worker_id), "tasks": tasks}


async def pages(call: Any, *args: Any, key: str, limit: int) -> list[dict[str, Any]]:
    """Every item of a listing, read ``limit`` at a time with its continuationTokens."""
    items: list[dict[str, Any]] = []
    query: dict[str, Any] = {"limit": limit}
    while True:
        page = await call(*args, query=query)
        assert len(page[key]) <= limit
        items += page[key]
        if "continuationToken" not in page:
            return items
        query = {"limit": limit, "continuationToken": page["continuationToken"]}


# --- every method through the official client ----------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_task_queues_and_workers_through_the_official_client(
    kind: str, store_url: str, secure: Secure, azure_namespace: AzureNamespace
) -> None:
    prov = azure_namespace.provisioner_id
    pool, other = f"{prov}/{WT}", f"{prov}/other"
    c = await secure(kind, store_url)
    anonymous, root, workers, admin = c.anonymous, c.root, c.workers, c.admin
    first, second, elsewhere = (slugid.nice() for _ in range(3))
    for task_id, worker_type in ((first, WT), (second, WT), (elsewhere, "other")):
        await root.createTask(task_id, task_definition(provisionerId=prov, workerType=worker_type))

    # --- a task queue is there as soon as a task was created in it (reads need no credentials)
    task_queue = await anonymous.getTaskQueue(pool)
    assert task_queue["taskQueueId"] == pool
    assert (task_queue["stability"], task_queue["description"]) == ("experimental", "")
    assert from_iso(task_queue["expires"]) > from_iso(task_queue["lastDateActive"])
    listed = await pages(anonymous.listTaskQueues, key="taskQueues", limit=1)
    assert [q["taskQueueId"] for q in listed if q["taskQueueId"].startswith(prov)] == [
        other,
        pool,
    ]
    provisioners = (await anonymous.listProvisioners())["provisioners"]
    assert prov in [p["provisionerId"] for p in provisioners]
    provisioner = await anonymous.getProvisioner(prov)
    assert (provisioner["provisionerId"], provisioner["actions"]) == (prov, [])
    worker_types = await pages(anonymous.listWorkerTypes, prov, key="workerTypes", limit=1)
    assert [(w["workerType"], w["taskQueueId"]) for w in worker_types] == [
        ("other", other),
        (WT, pool),
    ]
    worker_type = await anonymous.getWorkerType(prov, WT)
    assert (worker_type["taskQueueId"], worker_type["actions"]) == (pool, [])

    # --- pending, oldest first, one page at a time; counts of many queues at once
    pending = await pages(anonymous.listPendingTasks, pool, key="tasks", limit=1)
    assert [(t["taskId"], t["runId"]) for t in pending] == [(first, 0), (second, 0)]
    assert pending[0]["task"]["taskQueueId"] == pool
    assert from_iso(pending[0]["inserted"]) <= from_iso(pending[1]["inserted"])
    batch = await anonymous.taskQueueCountsBatch({"taskQueueIds": [pool, other, f"{prov}/none"]})
    assert [
        (c["taskQueueId"], c["pendingTasks"], c["claimedTasks"]) for c in batch["taskQueueCounts"]
    ] == [(pool, 2, 0), (other, 1, 0), (f"{prov}/none", 0, 0)]

    # --- a claim records the worker and its recent task; the claimed list shows it
    [claim] = (await workers.claimWork(pool, work("w1")))["tasks"]
    assert claim["status"]["taskId"] == first
    [claimed] = (await anonymous.listClaimedTasks(pool))["tasks"]
    assert (claimed["taskId"], claimed["runId"], claimed["workerId"]) == (first, 0, "w1")
    assert claimed["claimed"] == claim["status"]["runs"][0]["started"]
    assert claimed["task"]["taskQueueId"] == pool
    [still_pending] = (await anonymous.listPendingTasks(pool))["tasks"]
    assert still_pending["taskId"] == second
    seen = await anonymous.getWorker(prov, WT, "wg", "w1")
    assert seen["recentTasks"] == [{"taskId": first, "runId": 0}]
    assert (seen["taskQueueId"], seen["actions"], seen["quarantineDetails"]) == (pool, [], [])
    assert from_iso(seen["quarantineUntil"]) < from_iso(seen["firstClaim"])  # never quarantined
    [listed_worker] = (await anonymous.listWorkers(prov, WT))["workers"]
    assert listed_worker["latestTask"] == {"taskId": first, "runId": 0}
    assert "quarantineUntil" not in listed_worker

    # --- declareWorker: one scope per property, expiry never moves back
    expires = to_iso(from_iso(claim["takenUntil"]) + 7 * 24 * 60 * MINUTE)
    status, body = await rejected(workers.declareWorker(prov, WT, "wg", "w2", {"expires": expires}))
    assert (status, body["code"]) == (403, "InsufficientScopes")
    assert f"queue:declare-worker:{pool}/wg/w2#expires" in body["message"]
    declared = await admin.declareWorker(prov, WT, "wg", "w2", {"expires": expires})
    assert (declared["workerId"], declared["expires"], declared["recentTasks"]) == (
        "w2",
        expires,
        [],
    )
    again = await anonymous.declareWorker(prov, WT, "wg", "w2", {})  # no property, no scope
    assert again["expires"] == expires
    listed_workers = await pages(anonymous.listWorkers, prov, WT, key="workers", limit=1)
    assert [w["workerId"] for w in listed_workers] == ["w1", "w2"]

    # --- unknown ids: 404 where Taskcluster answers 404, empty or zeros elsewhere
    for call in (
        anonymous.getTaskQueue(f"{prov}/none"),
        anonymous.getWorkerType(prov, "none"),
        anonymous.getProvisioner(f"{prov}-none"),
        anonymous.getWorker(prov, WT, "wg", "nobody"),
        admin.quarantineWorker(prov, WT, "wg", "nobody", {"quarantineUntil": expires}),
    ):
        status, body = await rejected(call)
        assert (status, body["code"]) == (404, "ResourceNotFound")
    assert (await anonymous.listWorkers(prov, "none"))["workers"] == []
    assert (await anonymous.listWorkerTypes(f"{prov}-none"))["workerTypes"] == []
    assert (await anonymous.listPendingTasks(f"{prov}/none"))["tasks"] == []
    assert (await anonymous.listClaimedTasks(f"{prov}/none"))["tasks"] == []


@pytest.mark.parametrize("kind", KINDS)
async def test_quarantine_through_the_official_client(
    kind: str, store_url: str, secure: Secure, azure_namespace: AzureNamespace
) -> None:
    prov = azure_namespace.provisioner_id
    pool = f"{prov}/{WT}"
    clock = FakeClock()
    c = await secure(kind, store_url, clock=clock)
    anonymous, root, workers, admin = c.anonymous, c.root, c.workers, c.admin
    tasks = [slugid.nice() for _ in range(3)]
    definition = task_definition(clock.now, provisionerId=prov, workerType=WT)
    await root.createTask(tasks[0], definition)
    [claim] = (await workers.claimWork(pool, work("w1")))["tasks"]
    assert claim["status"]["taskId"] == tasks[0]
    for task_id in tasks[1:]:
        await root.createTask(task_id, definition)

    # Taskcluster's scope, and the caller's clientId in the details.
    until = to_iso(clock.now + 5 * MINUTE)
    request = {"quarantineUntil": until, "quarantineInfo": "disk full"}
    status, _ = await rejected(workers.quarantineWorker(prov, WT, "wg", "w1", request))
    assert status == 403
    quarantined = await admin.quarantineWorker(prov, WT, "wg", "w1", request)
    assert quarantined["quarantineUntil"] == until
    [details] = quarantined["quarantineDetails"]
    assert (details["clientId"], details["quarantineInfo"]) == ("admin", "disk full")
    assert from_iso(quarantined["expires"]) >= clock.now + 24 * 60 * MINUTE

    # claimWork answers no tasks, at the end of its long poll (1 s here), and leaves the hints
    started = time.monotonic()
    assert (await workers.claimWork(pool, work("w1", 4)))["tasks"] == []
    assert time.monotonic() - started >= 0.9
    status, body = await rejected(workers.claimTask(tasks[1], "0", worker("w1")))
    assert (status, body["code"]) == (409, "RequestConflict")
    assert f"quarantined until {until}" in body["message"]
    # another worker is unaffected
    [other] = (await workers.claimWork(pool, work("w2")))["tasks"]
    [remaining] = {*tasks[1:]} - {other["status"]["taskId"]}
    only = await anonymous.listWorkers(prov, WT, query={"quarantined": "true"})
    assert [(w["workerId"], w["quarantineUntil"]) for w in only["workers"]] == [("w1", until)]
    others = await anonymous.listWorkers(prov, WT, query={"quarantined": "false"})
    assert [w["workerId"] for w in others["workers"]] == ["w2"]

    # lifted once quarantineUntil has passed
    clock.advance(5 * 60 + 1)
    claimed = await workers.claimTask(remaining, "0", worker("w1"))
    assert claimed["status"]["state"] == "running"
    recent = (await anonymous.getWorker(prov, WT, "wg", "w1"))["recentTasks"]
    assert recent == [{"taskId": tasks[0], "runId": 0}, {"taskId": remaining, "runId": 0}]
    assert (await anonymous.listWorkers(prov, WT, query={"quarantined": "true"}))["workers"] == []


async def test_a_quarantine_reaches_another_replica_within_a_second(
    postgres_schema_url: str,
    secure: Secure,
    start_coordinator: StartCoordinator,
    azure_namespace: AzureNamespace,
) -> None:
    prov = azure_namespace.provisioner_id
    first = await secure("aio", postgres_schema_url)
    config = first.coordinator.config
    second = await start_coordinator(
        auth_enabled=True,
        clients_file=config.clients_file,
        store_url=config.store_url,
        azure_connection_string=config.azure_connection_string,
        queue_prefix=config.queue_prefix,
    )
    workers = Queue("aio", second.url, first.credentials["worker"])
    task_id = slugid.nice()
    await first.root.createTask(task_id, task_definition(provisionerId=prov, workerType=WT))
    await first.admin.declareWorker(prov, WT, "wg", "w1", {})
    until = to_iso(wall_clock() + 10 * MINUTE)
    await first.admin.quarantineWorker(prov, WT, "wg", "w1", {"quarantineUntil": until})
    quarantined_at = time.monotonic()
    key = WorkerKey(task_queue=TaskQueue(prov, WT), worker_group="wg", worker_id="w1")

    # Watched in the second replica's copy, not by claiming: a claim that came too early
    # would take the task.
    await wait_until(
        lambda: second.parts.workers.quarantined_until(key) is not None,
        what="the other replica to know of the quarantine",
    )
    # Reloaded every second: within one interval and the pass itself, which on a starved
    # two-core machine has taken over a second more (a clean-clone CI run).
    assert time.monotonic() - quarantined_at < 3.0
    status, body = await rejected(workers.claimTask(task_id, "0", worker("w1")))
    assert (status, body["code"]) == (409, "RequestConflict")


# --- routes and bad input ---------------------------------------------------------------------


async def test_one_segment_task_queue_routes_beside_the_counts_routes(
    start_coordinator: StartCoordinator,
) -> None:
    """``prov%2Fwt`` is one segment: getTaskQueue, listPendingTasks and listClaimedTasks do not
    swallow each other's paths nor the two forms of taskQueueCounts, and POST
    ``/task-queues/counts`` is taskQueueCountsBatch, not a task queue named ``counts``."""
    c = await start_coordinator()
    task_id = await c.create(provisionerId="prov", workerType="wt")
    get = await c.call("GET", "/task-queues/prov%2Fwt")
    assert (get.status, get.body["taskQueueId"]) == (200, "prov/wt")
    pending = await c.call("GET", "/task-queues/prov%2Fwt/pending")
    assert [t["taskId"] for t in pending.body["tasks"]] == [task_id]
    claimed = await c.call("GET", "/task-queues/prov%2Fwt/claimed")
    assert claimed.body == {"tasks": []}
    for path in ("/task-queues/prov%2Fwt/counts", "/task-queues/prov/wt/counts"):
        counts = await c.call("GET", path)
        assert (counts.status, counts.body["pendingTasks"]) == (200, 1), path
    batch = await c.call("POST", "/task-queues/counts", {"taskQueueIds": ["prov/wt"]})
    assert batch.body["taskQueueCounts"][0]["pendingTasks"] == 1
    # A fixed path serves only its own methods: GET is not taken as a task queue named counts
    named_counts = await c.call("GET", "/task-queues/counts")
    assert named_counts.status == 405
    two_segments = await c.call("GET", "/task-queues/prov/wt")
    assert two_segments.status == 404
    three_parts = await c.call("GET", "/task-queues/prov%2Fwt%2Fx/pending")
    assert three_parts.status == 400 and "taskQueueId: 'prov/wt/x'" in three_parts.body["message"]
    # declareWorker has no `workers/` segment; getWorker and quarantineWorker have one
    declared = await c.call("PUT", "/provisioners/prov/worker-types/wt/workers/w1", {})
    assert (declared.status, declared.body["workerGroup"]) == (200, "workers")
    worker_path = "/provisioners/prov/worker-types/wt/workers/workers/w1"
    assert (await c.call("GET", worker_path)).body["workerId"] == "w1"


async def test_counts_batch_adds_the_tasks_resolved_within_a_window_on_the_coordinators_clock(
    start_coordinator: StartCoordinator, store_url: str
) -> None:
    """``resolvedWithin``: each queue's tasks resolved in the last N seconds of the
    coordinator's clock, by outcome; without it the counts are as taskQueueCounts'."""
    clock = FakeClock()
    c = await start_coordinator(store_url=store_url, clock=clock)

    async def resolved(outcome: str, worker_type: str = "build") -> None:
        task_id = await c.create(now_ms=clock.now, provisionerId="prov", workerType=worker_type)
        await c.claim(task_id)
        await c.report(task_id, 0, outcome)

    await resolved("completed")
    clock.advance(30 * 60)
    for outcome in ("completed", "completed", "failed"):
        await resolved(outcome)
    build: dict[str, Any] = {"now_ms": clock.now, "provisionerId": "prov", "workerType": "build"}
    await c.ok("POST", f"/task/{await c.create(**build)}/cancel")
    await c.claim(await c.create(**build))
    await resolved("failed", "lint")

    ids = ["prov/build", "prov/lint", "prov/none"]
    since = clock.now - 20 * 60_000
    answer = await c.ok(
        "POST", "/task-queues/counts", {"taskQueueIds": ids, "resolvedWithin": 1200}
    )
    assert [(q["taskQueueId"], q["running"], q["resolved"]) for q in answer["taskQueueCounts"]] == [
        ("prov/build", 1, {"since": to_iso(since), "completed": 2, "failed": 1, "exception": 1}),
        ("prov/lint", 0, {"since": to_iso(since), "completed": 0, "failed": 1, "exception": 0}),
        ("prov/none", 0, {"since": to_iso(since), "completed": 0, "failed": 0, "exception": 0}),
    ]
    hour = await c.ok(
        "POST", "/task-queues/counts", {"taskQueueIds": ids[:1], "resolvedWithin": 3600}
    )
    assert hour["taskQueueCounts"][0]["resolved"]["completed"] == 3
    plain = await c.ok("POST", "/task-queues/counts", {"taskQueueIds": ids[:1]})
    assert "resolved" not in plain["taskQueueCounts"][0]
    widest = {"taskQueueIds": ids[:1], "resolvedWithin": RESOLVED_WINDOW_MAX_S}
    assert (await c.call("POST", "/task-queues/counts", widest)).status == 200
    # JSON's 1200.0 is the integer 1200, as the schema reads it
    as_float = await c.ok(
        "POST", "/task-queues/counts", {"taskQueueIds": ids[:1], "resolvedWithin": 1200.0}
    )
    assert as_float["taskQueueCounts"][0]["resolved"]["since"] == to_iso(since)


HUGE_TIME = "WzEwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAsICJhIl0"
"""A forged token: ``[10**30, "a"]``, a time beyond what the store holds."""


@pytest.mark.parametrize(
    ("method", "path", "body", "fragment"),
    [
        ("POST", "/task-queues/counts", {"taskQueueIds": ["p/w", "p/w"]}, "non-unique"),
        ("POST", "/task-queues/counts", {"taskQueueIds": [f"p/w{n}" for n in range(1001)]}, "long"),
        ("POST", "/task-queues/counts", {"taskQueueIds": ["p"]}, "taskQueueIds[0]"),
        ("POST", "/task-queues/counts", {}, "'taskQueueIds' is a required property"),
        (
            "POST",
            "/task-queues/counts",
            {"taskQueueIds": ["p/w"], "resolvedWithin": RESOLVED_WINDOW_MAX_S + 1},
            "resolvedWithin",
        ),
        (
            "POST",
            "/task-queues/counts",
            {"taskQueueIds": [], "resolvedWithin": 0},
            "resolvedWithin",
        ),
        ("GET", "/provisioners/p/worker-types/w/workers?quarantined=yes", None, "quarantined"),
        ("GET", "/task-queues?continuationToken=garbage", None, "is not one this API issued"),
        ("GET", "/task-queues/p%2Fw/pending?continuationToken=WyJhIiwiYiJd", None, "not one"),
        ("GET", f"/task-queues/p%2Fw/claimed?continuationToken={HUGE_TIME}", None, "not one"),
        ("GET", "/task-queues?continuationToken=WyJhXHUwMDAwIiwgImIiXQ", None, "not one"),
        ("GET", "/task-queues?limit=0", None, "limit: '0'"),
        ("PUT", "/provisioners/p/worker-types/w/workers/g/w", {}, "'quarantineUntil' is a"),
        ("PUT", "/provisioners/p/worker-types/w/g/w", {"expires": "soon"}, "expires"),
        ("PUT", "/provisioners/p/worker-types/w/g/w", {"firstClaim": "x"}, "'firstClaim'"),
        ("GET", "/provisioners/p/worker-types/w/workers/g/w%20x", None, "workerId: 'w x'"),
    ],
)
async def test_bad_input_is_400_saying_what_was_wrong(
    start_coordinator: StartCoordinator, method: str, path: str, body: Any, fragment: str
) -> None:
    c = await start_coordinator()
    response = await c.call(method, path, body)
    assert response.status == 400, response.body
    assert fragment in response.body["message"]


# --- sightings are buffered, written by one flush, and rate-limited -------------------------


async def test_claims_and_creates_only_buffer_their_sightings(
    start_coordinator: StartCoordinator,
) -> None:
    """No store write on the request: the records appear with the next flush (here called by
    hand, the background actors being off), all of them in one write."""
    c = await start_coordinator(run_resolvers=False)
    parts = c.parts
    task_id = await c.create(provisionerId="prov", workerType="wt")
    await c.claim(task_id)
    key = WorkerKey(task_queue=TaskQueue("prov", "wt"), worker_group="wg", worker_id="w1")
    assert await parts.store.worker(key) is None
    assert await parts.store.task_queue(key.task_queue, now=parts.service.clock()) is None
    assert await parts.workers.flush() == 2  # the queue and the worker, one store write
    stored = await parts.store.worker(key)
    assert stored is not None and [run.task_id for run in stored.recent_tasks] == [task_id]
    assert await parts.workers.flush() == 0


async def test_sightings_without_a_claim_are_written_once_per_interval(store: Store) -> None:
    clock = FakeClock()
    workers = WorkerService(store=store, clock=clock)
    key = WorkerKey(task_queue=TaskQueue("prov", "wt"), worker_group="wg", worker_id="w1")
    workers.worker_seen(key)
    workers.worker_seen(key)
    assert await workers.flush() == 2
    clock.advance(60)
    workers.worker_seen(key)  # polled again a minute later: nothing to write
    assert await workers.flush() == 0
    stored = await store.worker(key)
    assert stored is not None and stored.last_date_active == clock.now - MINUTE
    clock.advance(SEEN_INTERVAL / 1000)
    workers.worker_seen(key)
    assert await workers.flush() == 2
    stored = await store.worker(key)
    assert stored is not None and stored.last_date_active == clock.now
