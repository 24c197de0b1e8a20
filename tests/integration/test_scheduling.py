"""Scheduling beyond Taskcluster over HTTP: notBefore, retryDelay, retryPriority,
claimTimeout and createTasks, against real coordinators (SQLite), and against a real Azurite
where hints matter. Time inside the lifecycle is driven by an injected clock where the test
is about it; Azure's own time is real."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import slugid

from coordinator.azure.hint_codec import decode_hint
from coordinator.domain.records import from_iso, to_iso
from devharness.api import call as signed_call
from devharness.tasks import task_definition
from hawk_signing import Credentials
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator
from tests.fixtures.flow import Flow

SECOND = 1000


async def counts(c: RunningCoordinator) -> tuple[int, int, int]:
    response = await c.call("GET", "/task-queues/test-prov%2Ftest-wt/counts")
    assert response.status == 200, response.body
    return response.body["pending"], response.body["delayed"], response.body["running"]


# --- notBefore -------------------------------------------------------------------------------


async def test_a_not_before_task_is_delayed_and_refused_until_then(
    start_coordinator: StartCoordinator,
) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=False)
    not_before = clock.now + 60 * SECOND
    task_id = await c.create(notBefore=to_iso(not_before))

    assert (await c.status(task_id))["runs"][0]["state"] == "pending"
    assert await counts(c) == (0, 1, 0)
    early = await c.try_claim(task_id, 0)
    assert early.status == 409, early.body
    assert f"can't be claimed before {to_iso(not_before)}" in early.body["message"]
    definition = (await c.call("GET", f"/task/{task_id}")).body
    assert definition["notBefore"] == to_iso(not_before)

    clock.now = not_before
    assert await counts(c) == (1, 0, 0)
    assert (await c.try_claim(task_id, 0)).status == 200
    assert await counts(c) == (0, 0, 1)


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"notBefore": "AFTER"}, "after the deadline"),
        ({"retryDelay": {"base": 1, "schedule": [1]}}, "retryDelay"),
        ({"retryDelay": {"base": -1}}, "retryDelay"),
        ({"retryDelay": {"schedule": [1] * 50}}, "retryDelay"),
        ({"retryDelay": {"schedule": []}}, "retryDelay"),
        ({"retryDelay": {"base": 1, "factor": 0.5}}, "retryDelay"),
        ({"retryPriority": "urgent"}, "retryPriority"),
        ({"claimTimeout": 29}, "claimTimeout"),
        ({"claimTimeout": 86_401}, "claimTimeout"),
        ({"notBefore": "tomorrow"}, "notBefore"),
    ],
)
async def test_bad_scheduling_fields_are_refused_naming_the_field(
    start_coordinator: StartCoordinator, fields: dict[str, Any], fragment: str
) -> None:
    c = await start_coordinator(run_resolvers=False)
    body = task_definition(**fields)
    if body.get("notBefore") == "AFTER":
        body["notBefore"] = to_iso(from_iso(body["deadline"]) + 1)
    task_id = slugid.nice()
    response = await c.call("PUT", f"/task/{task_id}", body)
    assert response.status == 400, response.body
    assert response.body["code"] in ("InputValidationError", "InputError")
    assert fragment in response.body["message"]
    assert (await c.call("GET", f"/task/{task_id}")).status == 404


# --- retryDelay, retryPriority, claimTimeout ------------------------------------------------


async def test_retries_are_spaced_as_the_tasks_policy_says(
    start_coordinator: StartCoordinator,
) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=False)
    task_id = await c.create(retries=3, retryDelay={"base": 10, "factor": 3, "max": 60})
    for run_id, delay in enumerate([10, 30, 60]):
        assert (await c.try_claim(task_id, run_id)).status == 200
        reported = await c.call(
            "POST", f"/task/{task_id}/runs/{run_id}/exception", {"reason": "intermittent-task"}
        )
        assert reported.status == 200, reported.body
        retry = reported.body["status"]["runs"][-1]
        assert (retry["state"], retry["reasonCreated"]) == ("pending", "task-retry")
        assert (await c.try_claim(task_id, run_id + 1)).status == 409
        assert await counts(c) == (0, 1, 0)
        clock.advance(delay)
    assert (await c.try_claim(task_id, 3)).status == 200


async def test_retry_after_delays_the_retry_instead_of_the_tasks_policy(
    start_coordinator: StartCoordinator,
) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=False)
    single, batched = await c.create(retries=2), await c.create(retries=2)
    for task_id in (single, batched):
        assert (await c.try_claim(task_id, 0)).status == 200
    reported = await c.call(
        "POST",
        f"/task/{single}/runs/0/exception",
        {"reason": "intermittent-task", "retryAfter": 90},
    )
    assert reported.status == 200, reported.body
    item = {"taskId": batched, "runId": 0, "resolution": "exception"}
    resolved = await c.ok(
        "POST",
        "/resolve-runs",
        {"reports": [{**item, "reason": "intermittent-task", "retryAfter": 30.5}]},
    )
    assert "status" in resolved["reports"][0], resolved
    assert await counts(c) == (0, 2, 0)
    clock.advance(30.5)
    assert (await c.try_claim(single, 1)).status == 409
    assert (await c.try_claim(batched, 1)).status == 200
    clock.advance(59.5)
    assert (await c.try_claim(single, 1)).status == 200


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"reason": "malformed-payload", "retryAfter": 5}, "retryAfter is only for reason"),
        ({"reason": "worker-shutdown", "retryAfter": 0}, "retryAfter is only for reason"),
        ({"reason": "intermittent-task", "retryAfter": -1}, "retryAfter"),
        ({"reason": "intermittent-task", "retryAfter": "5"}, "retryAfter"),
        ({"reason": "intermittent-task", "retryAfter": 2 * 86_400}, "retryAfter must be from 0"),
    ],
)
async def test_a_bad_retry_after_is_a_400_naming_it_and_changes_nothing(
    start_coordinator: StartCoordinator, body: dict[str, Any], fragment: str
) -> None:
    c = await start_coordinator(run_resolvers=False)
    single, batched = await c.create(retries=2), await c.create(retries=2)
    for task_id in (single, batched):
        assert (await c.try_claim(task_id, 0)).status == 200
    refused = await c.call("POST", f"/task/{single}/runs/0/exception", body)
    assert refused.status == 400, refused.body
    assert fragment in refused.body["message"]
    item = {"taskId": batched, "runId": 0, "resolution": "exception", **body}
    answer = await c.call("POST", "/resolve-runs", {"reports": [item]})
    if answer.status == 200:  # a refusal of this item alone, as its single call answers
        assert answer.body["reports"][0]["error"]["status"] == 400, answer.body
        assert fragment in answer.body["reports"][0]["error"]["message"]
    else:  # the schema refuses the whole request
        assert answer.status == 400 and fragment in answer.body["message"], answer.body
    for task_id in (single, batched):
        assert [run["state"] for run in (await c.status(task_id))["runs"]] == ["running"]


async def test_a_tasks_claim_timeout_sets_taken_until(start_coordinator: StartCoordinator) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=False)
    task_id = await c.create(claimTimeout=30)
    claimed = await c.try_claim(task_id, 0)
    assert claimed.status == 200
    assert claimed.body["takenUntil"] == to_iso(clock.now + 30 * SECOND)
    clock.advance(10)
    reclaimed = await c.call("POST", f"/task/{task_id}/runs/0/reclaim")
    assert reclaimed.body["takenUntil"] == to_iso(clock.now + 30 * SECOND)


# --- createTasks ------------------------------------------------------------------------------


def batch(count: int, **fields: Any) -> list[dict[str, Any]]:
    return [{"taskId": slugid.nice(), "task": task_definition(**fields)} for _ in range(count)]


async def test_create_tasks_creates_a_thousand_in_one_request(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(run_resolvers=False)
    group = slugid.nice()
    items = batch(1000, taskGroupId=group)
    response = await c.call("PUT", "/tasks", {"tasks": items})
    assert response.status == 200, response.body
    results = response.body["tasks"]
    assert [r["taskId"] for r in results] == [item["taskId"] for item in items]
    assert {r["status"]["state"] for r in results} == {"pending"}
    assert await counts(c) == (1000, 0, 0)
    listed = await c.call("GET", f"/task-group/{group}/list")
    assert len(listed.body["tasks"]) == 1000

    again = await c.call("PUT", "/tasks", {"tasks": items})
    assert again.status == 200
    assert again.body == response.body  # idempotent, item by item


async def test_create_tasks_answers_each_item_as_create_task_would(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(run_resolvers=False)
    existing = await c.create()
    first, second, bad_schema, bad_input, clash, dependent = batch(6)
    bad_schema["task"]["priority"] = "urgent"
    bad_input["task"]["dependencies"] = [slugid.nice()]
    clash["taskId"] = existing
    clash["task"]["metadata"]["name"] = "not the same"
    dependent["task"]["dependencies"] = [first["taskId"], existing]
    items = [first, second, bad_schema, bad_input, clash, dependent, dict(first)]
    response = await c.call("PUT", "/tasks", {"tasks": items})
    assert response.status == 200, response.body
    results = response.body["tasks"]
    assert [r["taskId"] for r in results] == [i["taskId"] for i in items]
    assert results[0]["status"]["state"] == "pending"
    assert results[1]["status"]["state"] == "pending"
    assert results[2]["error"]["code"] == "InputValidationError"
    assert "tasks[2].task.priority" in results[2]["error"]["message"]
    assert results[3]["error"]["code"] == "InputError"
    assert "dependencies do not exist" in results[3]["error"]["message"]
    assert results[4]["error"]["code"] == "RequestConflict"
    assert results[5]["status"]["state"] == "unscheduled"
    assert results[6] == results[0]  # the same task twice, identically: one task
    for refused in (bad_schema, bad_input):
        assert (await c.call("GET", f"/task/{refused['taskId']}")).status == 404

    # the dependency inside the batch is real: completing it schedules the dependent
    for task_id in (first["taskId"], existing):
        await c.claim(task_id, 0)
        await c.report(task_id, 0, "completed")
    await c.parts.service.drain()
    assert (await c.status(dependent["taskId"]))["state"] == "pending"


@pytest.mark.parametrize("count", [0, 1001])
async def test_create_tasks_refuses_an_empty_or_oversized_batch(
    start_coordinator: StartCoordinator, count: int
) -> None:
    c = await start_coordinator(run_resolvers=False)
    items = batch(count)
    response = await c.call("PUT", "/tasks", {"tasks": items})
    assert response.status == 400, response.body
    assert "tasks" in response.body["message"]
    assert await counts(c) == (0, 0, 0)


async def test_a_batch_repeating_a_task_id_differently_writes_nothing(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator(run_resolvers=False)
    items = batch(3)
    twin = {"taskId": items[0]["taskId"], "task": task_definition(priority="high")}
    response = await c.call("PUT", "/tasks", {"tasks": [*items, twin]})
    assert response.status == 400, response.body
    assert response.body["code"] == "InputError"
    assert "tasks[3]" in response.body["message"]
    assert await counts(c) == (0, 0, 0)


async def test_create_tasks_needs_every_items_scopes(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    clients = tmp_path / "clients.json"
    clients.write_text(
        json.dumps(
            {
                "issuer": "issuer",
                "clients": [
                    {"clientId": "issuer", "accessToken": "i" * 44, "scopes": ["*"]},
                    {
                        "clientId": "maker",
                        "accessToken": "m" * 44,
                        "scopes": [
                            "queue:create-task:lowest:test-prov/test-wt",
                            "queue:scheduler-id:-",
                            "queue:create-task:project:none",
                        ],
                    },
                ],
            }
        )
    )
    clients.chmod(0o600)
    c = await start_coordinator(run_resolvers=False, auth_enabled=True, clients_file=clients)
    maker = Credentials(client_id="maker", access_token="m" * 44)
    allowed = batch(2)
    elsewhere = batch(1, workerType="other-wt")
    refused = await signed_call(
        c.session, "PUT", c.api + "/tasks", {"tasks": allowed + elsewhere}, credentials=maker
    )
    assert refused.status == 403, refused.body
    assert "queue:create-task:lowest:test-prov/other-wt" in refused.body["message"]
    assert await counts(c) == (0, 0, 0)
    created = await signed_call(
        c.session, "PUT", c.api + "/tasks", {"tasks": allowed}, credentials=maker
    )
    assert created.status == 200, created.body
    assert await counts(c) == (2, 0, 0)


# --- against Azurite ---------------------------------------------------------------------------


async def test_a_delayed_task_stays_invisible_then_is_claimed(flow: Flow) -> None:
    coord = await flow.coordinator()
    not_before = time.time() + 3
    task_id = await flow.create(coord, notBefore=to_iso(int(not_before * 1000)))
    await flow.wait_for_hint(task_id, 0, within=15)
    assert time.time() >= not_before - 0.1, "the hint became visible before notBefore"
    urls = await flow.poll_urls(coord)
    lowest = urls[-1]
    messages = await flow.get(lowest["signedPollUrl"])
    # the hint, perhaps twice: a hint whose put was confirmed late is put again (hints are
    # at least once), and both come visible at notBefore
    assert {decode_hint(m["MessageText"]) for m in messages} == {(task_id, 0)}
    await coord.claim(task_id, 0)


async def test_a_thousand_tasks_in_one_request_each_get_a_hint(flow: Flow) -> None:
    # a grace longer than the batch takes: the hint keeper must not re-put what is in flight
    coord = await flow.coordinator(hint_grace_ms=60_000)
    await coord.create_many(1000, provisionerId=flow.prov, workerType="wt")
    assert await flow.count() == 1000
    await coord.parts.service.drain()
    assert not await coord.parts.service.hints_due(int(time.time() * 1000) + 60_000, 10)


async def test_a_retry_hint_appears_when_the_tasks_policy_says(flow: Flow) -> None:
    coord = await flow.coordinator(hint_grace_ms=60_000)
    task_id = await flow.create(coord, retries=2, retryDelay={"schedule": [2]})
    await flow.wait_for_hint(task_id, 0)
    await coord.claim(task_id, 0)
    reported = time.monotonic()
    await coord.report(task_id, 0, "exception", "intermittent-task")
    assert await flow.count() == 2  # run 0's hint was never deleted here; run 1's is invisible
    assert (task_id, 1) not in await flow.peek()
    await flow.wait_for_hint(task_id, 1)
    assert time.monotonic() - reported >= 1.5
    await coord.claim(task_id, 1)
