"""Concurrency keys through the HTTP API, against coordinators in this process: a task's
``concurrencyKey`` and its task queue's ``maxRunningPerKey``. Under store dispatch (SQLite and
PostgreSQL) claimWork shares the claims out among the keys, one claim after another and in a
batch, and never lets a key run more than its limit, also with two replicas on one PostgreSQL
schema and four workers claiming at once; under Azure dispatch claimTask and claimRuns answer
429 with ``Retry-After`` for a key at its limit, and claimWork releases that run's hint to come
back later while other keys' runs go through. Bad input is a 400 naming the field.

The shares measured (docs/dispatch.md): three keys of 30 tasks each, visible one key after the
other, limit 2 a key: the first 12 claims one at a time (each run finished at once) go 4, 4, 4;
a claim of 6 goes 2, 2, 2.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections import Counter
from typing import Any

import pytest
import slugid

from coordinator.domain.task_queues import TaskQueue
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator
from tests.fixtures.flow import WT, Flow

PROV = "test-prov"
QUEUE = TaskQueue(PROV, "test-wt")
LIMITS_PATH = "/task-queues/" + urllib.parse.quote(str(QUEUE), safe="") + "/limits"
KEYS = ("tenant-a", "tenant-b", "tenant-c")


@pytest.fixture(params=["sqlite", "postgres"])
def on_store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The settings of store dispatch from SQLite, or from PostgreSQL."""
    if request.param == "sqlite":
        return {}
    return {"store_url": request.getfixturevalue("postgres_schema_url")}


async def backlogs(c: RunningCoordinator, per_key: int) -> dict[str, str]:
    """``per_key`` tasks of each of :data:`KEYS`, one priority, each key's created (and
    visible) after the previous key's; taskId to key."""
    keys = {}
    for key in KEYS:
        for task_id in await c.create_many(per_key, concurrencyKey=key):
            keys[task_id] = key
    return keys


async def claim_work(
    c: RunningCoordinator, *, tasks: int, worker_id: str = "w1"
) -> list[dict[str, Any]]:
    body = {"workerGroup": "wg", "workerId": worker_id, "tasks": tasks}
    claims: list[dict[str, Any]] = (await c.ok("POST", f"/claim-work/{PROV}/test-wt", body))[
        "tasks"
    ]
    return claims


async def running_by_key(c: RunningCoordinator) -> dict[str, int]:
    return await c.parts.store.running_by_key(QUEUE)


async def test_claim_work_shares_the_claims_among_keys_within_their_limit(
    start_coordinator: StartCoordinator, on_store: dict[str, Any]
) -> None:
    c = await start_coordinator(claim_work_timeout_ms=200, run_resolvers=False, **on_store)
    limited = await c.ok("PUT", LIMITS_PATH, {"maxRunningPerKey": 2})
    assert limited["limits"]["maxRunningPerKey"] == 2
    keys = await backlogs(c, 30)
    task = await c.ok("GET", f"/task/{next(iter(keys))}")
    assert task["concurrencyKey"] == "tenant-a"  # echoed in the definition

    # one claim after another, each run finished at once: the keys take turns
    sequential: list[str] = []
    for _ in range(12):
        [claim] = await claim_work(c, tasks=1)
        sequential.append(keys[claim["status"]["taskId"]])
        assert all(n <= 2 for n in (await running_by_key(c)).values())
        await c.report(claim["status"]["taskId"], 0, "completed")
    assert Counter(sequential) == dict.fromkeys(KEYS, 4)
    assert sequential[:3] == list(KEYS)

    # a batch interleaves the keys up to each one's limit, and then nothing more comes
    batch = await claim_work(c, tasks=6)
    assert Counter(keys[claim["status"]["taskId"]] for claim in batch) == dict.fromkeys(KEYS, 2)
    assert await running_by_key(c) == dict.fromkeys(KEYS, 2)
    assert await claim_work(c, tasks=6) == []
    # a run of one key finishing frees room for that key only
    first_b = next(claim for claim in batch if keys[claim["status"]["taskId"]] == "tenant-b")
    await c.report(first_b["status"]["taskId"], 0, "completed")
    [next_claim] = await claim_work(c, tasks=6)
    assert keys[next_claim["status"]["taskId"]] == "tenant-b"

    # weights work with keys: each key still within its limit
    for claim in [*batch, next_claim]:
        if claim is not first_b:
            await c.report(claim["status"]["taskId"], 0, "completed")
    weighted = await c.ok(
        "POST",
        f"/claim-work/{PROV}/test-wt",
        {"workerGroup": "wg", "workerId": "w1", "tasks": 9, "weights": {"lowest": 5}},
    )
    shares = Counter(keys[claim["status"]["taskId"]] for claim in weighted["tasks"])
    assert shares == dict.fromkeys(KEYS, 2)

    # the limit shows on the queue, and lifting it lets the backlog through
    assert (await c.ok("GET", "/task-queues/" + urllib.parse.quote(str(QUEUE), safe="")))[
        "limits"
    ] == {"maxRunning": None, "maxClaimsPerSecond": None, "maxRunningPerKey": 2}
    await c.ok("PUT", LIMITS_PATH, {"maxRunningPerKey": None})
    assert len(await claim_work(c, tasks=10)) == 10


async def test_two_replicas_and_four_workers_never_run_a_key_beyond_its_limit(
    start_coordinator: StartCoordinator, postgres_schema_url: str
) -> None:
    settings = {"store_url": postgres_schema_url, "claim_work_timeout_ms": 300}
    a = await start_coordinator(**settings)
    b = await start_coordinator(**settings)
    await a.ok("PUT", LIMITS_PATH, {"maxRunningPerKey": 2})
    await b.parts.controls.refresh()  # what its refresher does within the second
    keys = await backlogs(a, 10)
    claimed: list[str] = []
    highest: Counter[str] = Counter()

    async def worker(index: int) -> None:
        replica = (a, b)[index % 2]
        while len(claimed) < len(keys):
            claims = await claim_work(replica, tasks=2, worker_id=f"w{index}")
            running = await running_by_key(a)  # from the store, with the claims held
            for key, count in running.items():
                highest[key] = max(highest[key], count)
            assert all(count <= 2 for count in running.values()), running
            for claim in claims:
                claimed.append(claim["status"]["taskId"])
            await asyncio.sleep(0)  # the claim held while the others claim
            for claim in claims:
                await replica.report(claim["status"]["taskId"], 0, "completed")

    async with asyncio.timeout(60):
        await asyncio.gather(*(worker(index) for index in range(4)))
    assert sorted(claimed) == sorted(keys)  # each run once
    assert set(highest.values()) <= {1, 2}
    # the first claims spread over every key though tenant-a's backlog came first
    assert set(keys[task_id] for task_id in claimed[:6]) == set(KEYS)


async def claim_answer(c: RunningCoordinator, task_id: str) -> tuple[int, str | None, Any]:
    url = f"{c.api}/task/{task_id}/runs/0/claim"
    async with c.session.post(url, json={"workerGroup": "wg", "workerId": "w1"}) as response:
        return response.status, response.headers.get("Retry-After"), await response.json()


async def test_azure_dispatch_refuses_a_key_at_its_limit_and_its_hint_comes_back(
    flow: Flow,
) -> None:
    c = await flow.coordinator()
    limits = "/task-queues/" + urllib.parse.quote(f"{flow.prov}/{WT}", safe="") + "/limits"
    await c.ok("PUT", limits, {"maxRunningPerKey": 1})
    a1, a2, b1, b2 = [await flow.create(c, concurrencyKey=key) for key in ("a", "a", "b", "b")]
    for task_id in (a1, a2, b1, b2):
        await flow.wait_for_hint(task_id, 0)

    assert (await claim_answer(c, a1))[0] == 200
    status, retry_after, body = await claim_answer(c, a2)
    assert (status, retry_after, body["code"]) == (429, "1", "TooManyRequests")
    assert "concurrency key 'a'" in body["message"]
    assert "maxRunningPerKey is 1" in body["message"]
    claim_runs = {
        "workerGroup": "wg",
        "workerId": "w1",
        "runs": [{"taskId": a2, "runId": 0}, {"taskId": b1, "runId": 0}],
    }
    refused, granted = (await c.ok("POST", "/claim-runs", claim_runs))["claims"]
    assert (refused["error"]["status"], refused["error"]["retryAfter"]) == (429, 1)
    assert granted["status"]["state"] == "running"
    await c.report(b1, 0, "completed")

    # claimWork over the hints: a2's key is full, b2's has room again
    claims = await flow.claim_work(c, tasks=4, worker_id="w2")
    assert [claim["status"]["taskId"] for claim in claims] == [b2]
    assert (await c.status(a2))["state"] == "pending"
    await flow.wait_for_hint(a2, 0)  # released, not deleted: it comes back

    await c.report(a1, 0, "completed")

    async def a2_claimed() -> bool:
        return any(c["status"]["taskId"] == a2 for c in await flow.claim_work(c, worker_id="w2"))

    await wait_until(a2_claimed, within=10, what="a2 claimed once its key has room")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (LIMITS_PATH, {"maxRunningPerKey": 0}, "maxRunningPerKey"),
        (LIMITS_PATH, {"maxRunningPerKey": -3}, "maxRunningPerKey"),
        (LIMITS_PATH, {"maxRunningPerKey": 1.5}, "maxRunningPerKey"),
        (LIMITS_PATH, {"maxRunningPerKey": "2"}, "maxRunningPerKey"),
        ("/task/{task_id}", {"concurrencyKey": ""}, "concurrencyKey"),
        ("/task/{task_id}", {"concurrencyKey": "k" * 256}, "concurrencyKey"),
        ("/task/{task_id}", {"concurrencyKey": "tab\there"}, "concurrencyKey"),
        ("/task/{task_id}", {"concurrencyKey": 7}, "concurrencyKey"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    start_coordinator: StartCoordinator, path: str, body: dict[str, Any], field: str
) -> None:
    c = await start_coordinator(run_resolvers=False)
    if path.startswith("/task/"):
        task_path = path.format(task_id=slugid.nice())
        response = await c.call("PUT", task_path, task_definition(**body))
    else:
        response = await c.call("PUT", path, body)
    assert response.status == 400, response.body
    assert field in response.body["message"], response.body
