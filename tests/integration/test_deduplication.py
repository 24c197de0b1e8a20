"""Deduplication keys over HTTP, against in-process coordinators on SQLite and PostgreSQL: a
held key answers the holder's status to createTask and createTasks with another taskId, the
same taskId stays idempotent, 50 concurrent creates with one key make one task (on two
replicas of one PostgreSQL store too), a resolved holder keeps its key for its
deduplicationTtl (an injected clock) and then hands it over, and bad keys or TTLs are a 400
that creates nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import slugid

from devharness.tasks import task_definition
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator
from tests.fixtures.stores import driver_url

KEY = "rebuild docs@main"
SECOND = 1000


@pytest.fixture(params=["sqlite", "postgres"])
def any_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return driver_url(request, lambda: f"sqlite:///{tmp_path / 'dedup.db'}", "postgres_schema_url")


async def put(c: RunningCoordinator, task_id: str, **fields: Any) -> dict[str, Any]:
    """createTask of a task with ``fields``, asserting a 200; the status answered."""
    body = await c.ok("PUT", f"/task/{task_id}", task_definition(**fields))
    status: dict[str, Any] = body["status"]
    return status


async def resolve(c: RunningCoordinator, task_id: str) -> None:
    assert (await c.try_claim(task_id, 0)).status == 200
    await c.ok("POST", f"/task/{task_id}/runs/0/completed")


async def test_a_held_key_answers_the_holders_status_and_creates_nothing(
    start_coordinator: StartCoordinator, any_store_url: str
) -> None:
    c = await start_coordinator(store_url=any_store_url, run_resolvers=False)
    first, second = slugid.nice(), slugid.nice()
    body = task_definition(deduplicationKey=KEY)
    created = (await c.ok("PUT", f"/task/{first}", body))["status"]
    assert created["taskId"] == first
    answer = await put(c, second, deduplicationKey=KEY, retries=1)
    assert answer == await c.status(first)
    assert (await c.call("GET", f"/task/{second}")).status == 404
    definition = await c.ok("GET", f"/task/{first}")
    assert (definition["deduplicationKey"], definition["deduplicationTtl"]) == (KEY, 0)
    # the holder's own taskId is createTask's idempotency, as ever
    assert (await c.ok("PUT", f"/task/{first}", body))["status"] == created
    changed = await c.call("PUT", f"/task/{first}", {**body, "retries": 1})
    assert changed.status == 409, changed.body
    # another task queue has keys of its own
    other = await put(c, slugid.nice(), deduplicationKey=KEY, workerType="other-wt")
    assert other["taskId"] != first


async def test_fifty_concurrent_creates_with_one_key_make_one_task(
    start_coordinator: StartCoordinator, any_store_url: str
) -> None:
    c = await start_coordinator(store_url=any_store_url, run_resolvers=False)
    task_ids = [slugid.nice() for _ in range(50)]
    answers = await asyncio.gather(*(put(c, t, deduplicationKey=KEY) for t in task_ids))
    named = {answer["taskId"] for answer in answers}
    assert len(named) == 1 and named <= set(task_ids)
    found = await asyncio.gather(*(c.call("GET", f"/task/{t}/status") for t in task_ids))
    assert sorted(r.status for r in found) == [200] + [404] * 49


async def test_two_replicas_racing_on_one_key_make_one_task(
    start_coordinator: StartCoordinator, postgres_schema_url: str
) -> None:
    replicas = [
        await start_coordinator(store_url=postgres_schema_url, run_resolvers=False)
        for _ in range(2)
    ]
    task_ids = [slugid.nice() for _ in range(50)]
    answers = await asyncio.gather(
        *(put(replicas[i % 2], t, deduplicationKey=KEY) for i, t in enumerate(task_ids))
    )
    assert len({answer["taskId"] for answer in answers}) == 1
    found = await asyncio.gather(*(replicas[0].call("GET", f"/task/{t}") for t in task_ids))
    assert [r.status for r in found].count(200) == 1


async def test_a_resolved_holder_keeps_its_key_for_its_ttl_then_hands_it_over(
    start_coordinator: StartCoordinator, any_store_url: str
) -> None:
    clock = FakeClock()
    c = await start_coordinator(store_url=any_store_url, clock=clock, run_resolvers=False)
    first = slugid.nice()
    await put(c, first, deduplicationKey=KEY, deduplicationTtl=60)
    await resolve(c, first)
    clock.advance(59.999)
    assert (await put(c, slugid.nice(), deduplicationKey=KEY))["taskId"] == first
    clock.advance(0.001)
    second = slugid.nice()
    taken = await put(c, second, deduplicationKey=KEY)
    assert taken["taskId"] == second and taken["state"] == "pending"
    assert (await put(c, slugid.nice(), deduplicationKey=KEY))["taskId"] == second
    # a TTL of 0: free as soon as the holder resolves; a rerun would hold it again
    await resolve(c, second)
    third = slugid.nice()
    assert (await put(c, third, deduplicationKey=KEY))["taskId"] == third


async def test_create_tasks_deduplicates_each_keyed_item(
    start_coordinator: StartCoordinator, any_store_url: str
) -> None:
    c = await start_coordinator(store_url=any_store_url, run_resolvers=False)
    holder = await c.create(deduplicationKey=KEY)
    items = [
        {"taskId": slugid.nice(), "task": task_definition(deduplicationKey=KEY)},
        {"taskId": slugid.nice(), "task": task_definition()},
        {"taskId": slugid.nice(), "task": task_definition(deduplicationKey="fresh")},
        {"taskId": slugid.nice(), "task": task_definition(deduplicationKey="fresh")},
    ]
    answer = await c.ok("PUT", "/tasks", {"tasks": items})
    named = [item["status"]["taskId"] for item in answer["tasks"]]
    assert [item["taskId"] for item in answer["tasks"]] == [i["taskId"] for i in items]
    assert named == [holder, items[1]["taskId"], items[2]["taskId"], items[2]["taskId"]]
    for item in (items[0], items[3]):
        assert (await c.call("GET", f"/task/{item['taskId']}")).status == 404


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"deduplicationKey": ""}, "deduplicationKey"),
        ({"deduplicationKey": "k" * 256}, "deduplicationKey"),
        ({"deduplicationKey": "café"}, "deduplicationKey"),
        ({"deduplicationKey": "a\tb"}, "deduplicationKey"),
        ({"deduplicationKey": 7}, "deduplicationKey"),
        ({"deduplicationKey": "k", "deduplicationTtl": -1}, "deduplicationTtl"),
        ({"deduplicationKey": "k", "deduplicationTtl": 1.5}, "deduplicationTtl"),
        ({"deduplicationKey": "k", "deduplicationTtl": "60"}, "deduplicationTtl"),
        ({"deduplicationTtl": 60}, "without deduplicationKey"),
    ],
)
async def test_bad_keys_and_ttls_are_refused_naming_the_field(
    start_coordinator: StartCoordinator, fields: dict[str, Any], fragment: str
) -> None:
    c = await start_coordinator(run_resolvers=False)
    task_id = slugid.nice()
    response = await c.call("PUT", f"/task/{task_id}", task_definition(**fields))
    assert response.status == 400, response.body
    assert fragment in response.body["message"]
    assert (await c.call("GET", f"/task/{task_id}")).status == 404
    # the longest key is fine
    assert (await put(c, slugid.nice(), deduplicationKey="~" * 255))["state"] == "pending"
