"""The queue v1 REST API end to end: real HTTP against the real app, without Azure.

Each test starts its own in-process coordinator (SQLite in the test's temporary directory,
auth disabled). Time is driven with :class:`FakeClock` where a test depends on it; background
effects (dependency resolution) are awaited with :func:`wait_until`, never with sleeps.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlencode

import pytest
import slugid

from coordinator.api.endpoints import HOOKS_PREFIX
from coordinator.domain.records import to_iso
from coordinator.service.clock import wall_clock
from devharness.tasks import task_definition
from devharness.waiting import wait_until
from tests.fixtures.coordinator import (
    CLAIM_FIELDS,
    WORKER,
    FakeClock,
    RunningCoordinator,
    StartCoordinator,
)

ISO_MS_Z = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
CLAIM_TIMEOUT_MS = 1_200_000


def whole_second_clock() -> FakeClock:
    """A clock at the current whole second, so expected timestamps are easy to write down."""
    return FakeClock((wall_clock() // 1000) * 1000)


def assert_conflict(response: Any, fragment: str) -> None:
    assert response.status == 409, response.body
    assert response.body["code"] == "RequestConflict"
    assert fragment in response.body["message"], response.body["message"]


# --- ping and OpenAPI ----------------------------------------------------------------------


async def test_ping(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    response = await c.call("GET", "/ping")
    assert response.status == 200
    assert response.body["alive"] is True
    assert isinstance(response.body["uptime"], int | float)
    assert response.body["uptime"] >= 0


SPEC_ROUTES = [
    ("get", "/ping"),
    ("put", "/task/{taskId}"),
    ("get", "/task/{taskId}"),
    ("get", "/task/{taskId}/status"),
    ("post", "/task/{taskId}/schedule"),
    ("post", "/task/{taskId}/rerun"),
    ("post", "/task/{taskId}/cancel"),
    ("get", "/task-group/{taskGroupId}/list"),
    ("get", "/task/{taskId}/dependents"),
    ("get", "/poll-task-url/{provisionerId}/{workerType}"),
    ("post", "/task/{taskId}/runs/{runId}/claim"),
    ("post", "/claim-work/{provisionerId}/{workerType}"),
    ("post", "/claim-work/{taskQueueId}"),
    ("post", "/task/{taskId}/runs/{runId}/reclaim"),
    ("post", "/task/{taskId}/runs/{runId}/completed"),
    ("post", "/task/{taskId}/runs/{runId}/failed"),
    ("post", "/task/{taskId}/runs/{runId}/exception"),
    ("get", "/pending/{provisionerId}/{workerType}"),
    ("get", "/pending/{taskQueueId}"),
    ("get", "/task-queues/{provisionerId}/{workerType}/counts"),
    ("get", "/task-queues/{taskQueueId}/counts"),
]


async def test_openapi_document_lists_every_route(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    response = await c.call("GET", "/openapi.json")
    assert response.status == 200
    document = response.body
    assert document["openapi"].startswith("3.1")
    assert document["servers"] == [{"url": c.api}]
    missing = [
        f"{method.upper()} {route}"
        for method, route in SPEC_ROUTES
        if method not in document["paths"].get(route, {})
    ]
    assert not missing, f"routes missing from the OpenAPI document: {missing}"
    claim_operation = document["paths"]["/task/{taskId}/runs/{runId}/claim"]["post"]
    assert claim_operation["operationId"] == "claimTask"
    assert "task-claim-response" in document["components"]["schemas"]


async def test_the_hooks_service_has_its_own_openapi_document(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    document = await c.ok("GET", "/openapi.json", prefix=HOOKS_PREFIX)
    assert document["info"]["title"] == "Hooks"
    assert document["servers"] == [{"url": c.url + HOOKS_PREFIX}]
    assert document["paths"]["/hooks/{hookGroupId}/{hookId}"]["put"]["operationId"] == (
        "createHook"
    )
    assert "/task/{taskId}" not in document["paths"]
    assert "hook-definition" in document["components"]["schemas"]


# --- createTask, task, status -----------------------------------------------------------------


DEFAULTS = {
    "schedulerId": "-",
    "projectId": "none",
    "dependencies": [],
    "requires": "all-completed",
    "routes": [],
    "priority": "lowest",
    "retries": 5,
    "scopes": [],
    "tags": {},
    "extra": {},
}


@pytest.mark.parametrize(
    "queue_fields",
    [
        {"provisionerId": "prov-a", "workerType": "wt_1"},
        {"taskQueueId": "prov-a/wt_1"},
        {"taskQueueId": "prov-a/wt_1", "provisionerId": "prov-a", "workerType": "wt_1"},
    ],
    ids=["provisionerId+workerType", "taskQueueId", "both-agreeing"],
)
async def test_create_task_fills_defaults_and_normalises_times(
    start_coordinator: StartCoordinator, queue_fields: dict[str, str]
) -> None:
    clock = whole_second_clock()
    c = await start_coordinator(clock=clock)
    now = datetime.fromtimestamp(clock.now / 1000, tz=UTC)
    plus_two = timezone(timedelta(hours=2))
    body = task_definition(clock.now)
    del body["provisionerId"], body["workerType"]
    body.update(queue_fields)
    # microseconds and a +02:00 offset: stored truncated to ms, in UTC, with Z
    body["created"] = (now + timedelta(microseconds=123_456)).astimezone(plus_two).isoformat()
    body["deadline"] = (now + timedelta(hours=1)).astimezone(plus_two).isoformat()
    task_id = slugid.nice()

    created = await c.call("PUT", f"/task/{task_id}", body)
    assert created.status == 200, created.body
    status = created.body["status"]
    expected_deadline = to_iso(clock.now + 3_600_000)
    assert set(status) == {
        "taskId",
        "provisionerId",
        "workerType",
        "taskQueueId",
        "schedulerId",
        "projectId",
        "taskGroupId",
        "priority",
        "deadline",
        "expires",
        "retriesLeft",
        "state",
        "runs",
    }
    assert status["taskId"] == task_id
    assert (status["provisionerId"], status["workerType"]) == ("prov-a", "wt_1")
    assert status["taskQueueId"] == "prov-a/wt_1"
    assert status["schedulerId"] == "-"
    assert status["taskGroupId"] == task_id
    assert status["deadline"] == expected_deadline
    assert status["retriesLeft"] == 5
    assert status["state"] == "pending"
    assert status["runs"] == [
        {
            "runId": 0,
            "state": "pending",
            "reasonCreated": "scheduled",
            "scheduled": to_iso(clock.now),
        }
    ]
    assert await c.status(task_id) == status

    definition = await c.call("GET", f"/task/{task_id}")
    assert definition.status == 200
    task = definition.body
    assert set(task) == {
        *DEFAULTS,
        *("provisionerId", "workerType", "taskQueueId", "taskGroupId"),
        *("created", "deadline", "expires", "payload", "metadata"),
    }
    assert (task["provisionerId"], task["workerType"]) == ("prov-a", "wt_1")
    assert task["taskQueueId"] == "prov-a/wt_1"
    assert task["taskGroupId"] == task_id
    assert {k: task[k] for k in DEFAULTS} == DEFAULTS
    assert task["created"] == to_iso(clock.now + 123)
    assert task["deadline"] == expected_deadline
    # expires defaults to the deadline plus one calendar year
    deadline = datetime.fromtimestamp((clock.now + 3_600_000) / 1000, tz=UTC)
    try:
        year_later = deadline.replace(year=deadline.year + 1)
    except ValueError:  # 29 February
        year_later = deadline.replace(year=deadline.year + 1, month=3, day=1)
    assert task["expires"] == year_later.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert status["expires"] == task["expires"]
    for field in ("created", "deadline", "expires"):
        assert ISO_MS_Z.fullmatch(task[field]), task[field]
    assert task["payload"] == {} and task["metadata"] == body["metadata"]


async def test_create_task_keeps_given_fields(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    group = slugid.nice()
    now = wall_clock()
    body = task_definition(
        now,
        schedulerId="sched",
        taskGroupId=group,
        routes=["index.a", "index.b"],
        priority="normal",
        retries=0,
        expires=to_iso(now + 7_200_000),
        scopes=["secrets:get:x"],
        tags={"kind": "test"},
        extra={"n": [1, 2]},
        payload={"command": ["true"]},
    )
    task_id = slugid.nice()
    assert (await c.call("PUT", f"/task/{task_id}", body)).status == 200
    task = (await c.call("GET", f"/task/{task_id}")).body
    assert task["schedulerId"] == "sched"
    assert task["taskGroupId"] == group
    assert task["routes"] == ["index.a", "index.b"]
    assert task["priority"] == "lowest"  # normal is a synonym
    assert task["retries"] == 0
    assert task["expires"] == to_iso(now + 7_200_000)
    assert task["scopes"] == ["secrets:get:x"]
    assert task["tags"] == {"kind": "test"}
    assert task["extra"] == {"n": [1, 2]}
    assert task["payload"] == {"command": ["true"]}
    status = await c.status(task_id)
    assert status["retriesLeft"] == 0
    assert status["schedulerId"] == "sched"
    assert status["taskGroupId"] == group


async def test_a_payload_beyond_64_bit_integers_and_ascii_comes_back_exactly(
    start_coordinator: StartCoordinator,
) -> None:
    # The coordinator encodes with orjson, which refuses integers beyond 64 bits: those
    # bodies take the standard library's path, and nothing may come back changed.
    c = await start_coordinator()
    payload = {"big": 2**70, "negative": -(2**64), "max": 2**63 - 1, "text": "Grüße ✓ 名前"}
    task_id = await c.create(payload=payload)
    assert (await c.call("GET", f"/task/{task_id}")).body["payload"] == payload
    assert (await c.claim(task_id))["task"]["payload"] == payload
    batch = await c.ok("POST", "/claim-runs", {**WORKER, "runs": [{"taskId": task_id, "runId": 0}]})
    assert batch["claims"][0]["task"]["payload"] == payload


async def test_integral_float_retries_are_stored_as_an_integer(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    task_id = await c.create(retries=3.0)  # JSON Schema counts 3.0 as an integer
    task = (await c.call("GET", f"/task/{task_id}")).body
    status = await c.status(task_id)
    assert type(task["retries"]) is int and task["retries"] == 3
    assert type(status["retriesLeft"]) is int and status["retriesLeft"] == 3
    # the same task sent with 3 is the same definition
    same = await c.call(
        "PUT",
        f"/task/{task_id}",
        task_definition(**{k: task[k] for k in ("created", "deadline")}, retries=3),
    )
    assert same.status == 200


async def test_create_task_is_idempotent(start_coordinator: StartCoordinator) -> None:
    clock = whole_second_clock()
    c = await start_coordinator(clock=clock)
    body = task_definition(clock.now)
    task_id = slugid.nice()
    first = await c.call("PUT", f"/task/{task_id}", body)
    assert first.status == 200

    again = await c.call("PUT", f"/task/{task_id}", body)
    assert again.status == 200
    assert again.body == first.body

    # the same instants written differently are the same definition
    respelled = dict(body, created=body["created"].replace(".000Z", "+00:00"), priority="normal")
    assert (await c.call("PUT", f"/task/{task_id}", respelled)).status == 200

    # after the task progressed, a repeat returns the current status
    clock.advance(5)
    await c.claim(task_id)
    clock.advance(5)
    repeat = await c.call("PUT", f"/task/{task_id}", body)
    assert repeat.status == 200
    assert repeat.body["status"]["state"] == "running"
    assert repeat.body["status"]["runs"][0]["workerId"] == "w1"
    assert repeat.body == {"status": await c.status(task_id)}


@pytest.mark.parametrize(
    "change",
    [
        {"retries": 4},
        {"priority": "high"},
        {"payload": {"different": True}},
        {"workerType": "other-wt"},
        {"extra": {"n": 1.5}},
    ],
    ids=lambda change: next(iter(change)),
)
async def test_create_task_with_a_different_body_conflicts(
    start_coordinator: StartCoordinator, change: dict[str, Any]
) -> None:
    c = await start_coordinator()
    body = task_definition(extra={"n": 1})
    task_id = slugid.nice()
    assert (await c.call("PUT", f"/task/{task_id}", body)).status == 200
    response = await c.call("PUT", f"/task/{task_id}", {**body, **change})
    assert_conflict(response, "already exists with a different definition")
    assert (await c.call("GET", f"/task/{task_id}")).body["extra"] == {"n": 1}


@pytest.mark.parametrize(
    ("path", "method_name"),
    [("/task/{id}", "task"), ("/task/{id}/status", "status")],
)
async def test_unknown_task_is_resource_not_found(
    start_coordinator: StartCoordinator, path: str, method_name: str
) -> None:
    c = await start_coordinator()
    task_id = slugid.nice()
    response = await c.call("GET", path.format(id=task_id))
    assert response.status == 404
    body = response.body
    assert set(body) == {"code", "message", "requestInfo"}
    assert body["code"] == "ResourceNotFound"
    assert task_id in body["message"] and "does not exist" in body["message"]
    info = body["requestInfo"]
    assert set(info) == {"method", "params", "payload", "time"}
    assert info["method"] == method_name
    assert info["params"] == {"taskId": task_id}
    assert info["payload"] == {}
    assert ISO_MS_Z.fullmatch(info["time"]), info["time"]


async def test_error_request_info_echoes_the_payload(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = slugid.nice()
    response = await c.try_claim(task_id, 0)
    assert response.status == 404
    assert response.body["requestInfo"]["method"] == "claimTask"
    assert response.body["requestInfo"]["params"] == {"taskId": task_id, "runId": "0"}
    assert response.body["requestInfo"]["payload"] == WORKER


# --- scheduleTask, rerunTask, cancelTask ----------------------------------------------------


async def test_schedule_task_with_unresolved_dependencies(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    dependency = await c.create()
    task_id = await c.create(dependencies=[dependency])
    assert (await c.status(task_id))["state"] == "unscheduled"

    status = (await c.ok("POST", f"/task/{task_id}/schedule"))["status"]
    assert status["state"] == "pending"
    assert [(r["runId"], r["reasonCreated"]) for r in status["runs"]] == [(0, "scheduled")]

    # idempotent: a second schedule adds nothing
    again = (await c.ok("POST", f"/task/{task_id}/schedule"))["status"]
    assert again == status
    # and the dependency's completion later adds nothing either
    await c.claim(dependency)
    await c.report(dependency, 0, "completed")
    await c.parts.service.drain()
    assert await c.status(task_id) == status


async def test_schedule_task_past_deadline_conflicts(start_coordinator: StartCoordinator) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=False)
    dependency = await c.create(now_ms=clock.now)
    task_id = await c.create(now_ms=clock.now, dependencies=[dependency])
    clock.advance(3601)
    response = await c.call("POST", f"/task/{task_id}/schedule")
    assert_conflict(response, "past its deadline")


async def test_rerun_task(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = await c.create(retries=2)
    await c.claim(task_id)
    await c.report(task_id, 0, "exception", "intermittent-task")
    await c.claim(task_id, 1)
    await c.report(task_id, 1, "failed")
    assert (await c.status(task_id))["retriesLeft"] == 1

    status = (await c.ok("POST", f"/task/{task_id}/rerun"))["status"]
    assert status["state"] == "pending"
    assert status["retriesLeft"] == 2  # restored
    assert [(r["state"], r["reasonCreated"]) for r in status["runs"]] == [
        ("exception", "scheduled"),
        ("failed", "task-retry"),
        ("pending", "rerun"),
    ]
    # on a pending task it is a no-op
    assert (await c.ok("POST", f"/task/{task_id}/rerun"))["status"] == status


async def test_rerun_unscheduled_task_conflicts(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = await c.create(dependencies=[await c.create()])
    response = await c.call("POST", f"/task/{task_id}/rerun")
    assert_conflict(response, "unscheduled")
    assert (await c.status(task_id))["runs"] == []


async def test_cancel_unscheduled_task(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = await c.create(dependencies=[await c.create()])
    status = (await c.ok("POST", f"/task/{task_id}/cancel"))["status"]
    assert status["state"] == "exception"
    [run] = status["runs"]
    assert (run["state"], run["reasonCreated"], run["reasonResolved"]) == (
        "exception",
        "exception",
        "canceled",
    )
    assert "resolved" in run


async def test_cancel_pending_task(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = await c.create()
    status = (await c.ok("POST", f"/task/{task_id}/cancel"))["status"]
    assert [(r["state"], r["reasonResolved"]) for r in status["runs"]] == [
        ("exception", "canceled")
    ]
    assert_conflict(await c.try_claim(task_id, 0), "not pending")


async def test_cancel_running_task(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = await c.create()
    await c.claim(task_id)
    status = (await c.ok("POST", f"/task/{task_id}/cancel"))["status"]
    assert status["state"] == "exception"
    assert status["runs"][0]["reasonResolved"] == "canceled"
    assert status["runs"][0]["workerId"] == "w1"
    # the worker learns about it when it next reclaims or reports
    assert_conflict(await c.call("POST", f"/task/{task_id}/runs/0/reclaim"), "not running")
    assert_conflict(await c.call("POST", f"/task/{task_id}/runs/0/completed"), "not running")


async def test_cancel_resolved_task_is_a_no_op(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = await c.create()
    await c.claim(task_id)
    completed = await c.report(task_id, 0, "completed")
    status = (await c.ok("POST", f"/task/{task_id}/cancel"))["status"]
    assert status == completed
    assert status["state"] == "completed"


# --- claims and reports ---------------------------------------------------------------------


async def test_claim_returns_the_claim(start_coordinator: StartCoordinator) -> None:
    clock = whole_second_clock()
    c = await start_coordinator(clock=clock)
    task_id = await c.create(now_ms=clock.now, scopes=["secrets:get:x"])
    clock.advance(2)
    body = await c.claim(task_id)
    assert set(body) == CLAIM_FIELDS
    assert body["runId"] == 0
    assert (body["workerGroup"], body["workerId"]) == ("wg", "w1")
    assert body["takenUntil"] == to_iso(clock.now + CLAIM_TIMEOUT_MS)
    assert body["task"] == (await c.call("GET", f"/task/{task_id}")).body
    assert body["status"]["state"] == "running"
    run = body["status"]["runs"][0]
    assert run["started"] == to_iso(clock.now)
    assert run["takenUntil"] == body["takenUntil"]
    credentials = body["credentials"]
    assert set(credentials) >= {"clientId", "accessToken", "certificate"}
    assert all(isinstance(credentials[k], str) and credentials[k] for k in credentials)
    assert "secrets:get:x" in credentials["certificate"]
    assert body["status"] == await c.status(task_id)


async def test_claim_repeat_and_claim_by_another_worker(
    start_coordinator: StartCoordinator,
) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock)
    task_id = await c.create(now_ms=clock.now)
    first = await c.claim(task_id)
    clock.advance(30)
    repeat = await c.claim(task_id)
    assert repeat["takenUntil"] == first["takenUntil"]
    assert repeat["status"] == first["status"]

    other = await c.try_claim(task_id, 0, worker_id="w2")
    assert_conflict(other, "already claimed by wg/w1")
    assert (await c.status(task_id))["runs"][0]["workerId"] == "w1"


async def test_claim_past_deadline_conflicts(start_coordinator: StartCoordinator) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock)
    task_id = await c.create(now_ms=clock.now)  # deadline in one hour
    clock.advance(3600)
    response = await c.try_claim(task_id, 0)
    assert_conflict(response, "past its deadline")


async def test_reclaim_extends_the_claim(start_coordinator: StartCoordinator) -> None:
    clock = whole_second_clock()
    c = await start_coordinator(clock=clock)
    task_id = await c.create(now_ms=clock.now)
    claimed = await c.claim(task_id)
    clock.advance(600)
    response = await c.call("POST", f"/task/{task_id}/runs/0/reclaim")
    assert response.status == 200, response.body
    body = response.body
    assert set(body) == {"status", "runId", "workerGroup", "workerId", "takenUntil", "credentials"}
    assert body["takenUntil"] == to_iso(clock.now + CLAIM_TIMEOUT_MS)
    assert body["takenUntil"] > claimed["takenUntil"]
    assert (body["runId"], body["workerGroup"], body["workerId"]) == (0, "wg", "w1")
    assert set(body["credentials"]) >= {"clientId", "accessToken", "certificate"}
    assert body["credentials"]["certificate"] != claimed["credentials"]["certificate"]
    assert (await c.status(task_id))["runs"][0]["takenUntil"] == body["takenUntil"]


async def test_reclaim_resolved_run_conflicts(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = await c.create()
    await c.claim(task_id)
    await c.report(task_id, 0, "completed")
    response = await c.call("POST", f"/task/{task_id}/runs/0/reclaim")
    assert_conflict(response, "is completed, not running")


async def test_reclaim_past_deadline_conflicts(start_coordinator: StartCoordinator) -> None:
    clock = FakeClock()
    c = await start_coordinator(clock=clock, run_resolvers=False)
    task_id = await c.create(now_ms=clock.now)
    await c.claim(task_id)
    clock.advance(3600)
    assert_conflict(await c.call("POST", f"/task/{task_id}/runs/0/reclaim"), "past its deadline")


@pytest.mark.parametrize(
    ("path", "body", "state", "reason", "other_path", "other_body"),
    [
        ("completed", None, "completed", "completed", "failed", None),
        ("failed", None, "failed", "failed", "completed", None),
        (
            "exception",
            {"reason": "malformed-payload"},
            "exception",
            "malformed-payload",
            "exception",
            {"reason": "internal-error"},
        ),
    ],
    ids=["completed", "failed", "exception"],
)
async def test_report_repeat_is_accepted_and_a_different_report_conflicts(
    start_coordinator: StartCoordinator,
    path: str,
    body: Any,
    state: str,
    reason: str,
    other_path: str,
    other_body: Any,
) -> None:
    c = await start_coordinator()
    task_id = await c.create()
    await c.claim(task_id)
    reported = (await c.ok("POST", f"/task/{task_id}/runs/0/{path}", body))["status"]
    assert reported["state"] == state
    [run] = reported["runs"]  # these never retry
    assert (run["state"], run["reasonResolved"]) == (state, reason)
    assert "resolved" in run

    repeat = await c.call("POST", f"/task/{task_id}/runs/0/{path}", body)
    assert repeat.status == 200
    assert repeat.body["status"] == reported

    different = await c.call("POST", f"/task/{task_id}/runs/0/{other_path}", other_body)
    assert_conflict(different, "not running")
    assert await c.status(task_id) == reported


async def test_report_on_a_pending_run_conflicts(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = await c.create()
    response = await c.call("POST", f"/task/{task_id}/runs/0/completed")
    assert_conflict(response, "is pending, not running")


@pytest.mark.parametrize(
    ("reason", "reason_created"),
    [("worker-shutdown", "retry"), ("intermittent-task", "task-retry")],
)
async def test_retrying_exception_adds_a_run(
    start_coordinator: StartCoordinator, reason: str, reason_created: str
) -> None:
    c = await start_coordinator()
    task_id = await c.create(retries=3)
    await c.claim(task_id)
    status = await c.report(task_id, 0, "exception", reason)
    assert status["state"] == "pending"
    assert status["retriesLeft"] == 2
    assert [(r["state"], r.get("reasonResolved"), r["reasonCreated"]) for r in status["runs"]] == [
        ("exception", reason, "scheduled"),
        ("pending", None, reason_created),
    ]
    # the repeat is still accepted and adds nothing more
    repeat = await c.ok("POST", f"/task/{task_id}/runs/0/exception", {"reason": reason})
    assert repeat["status"] == status
    # the old run can no longer be claimed; the new one can
    assert_conflict(await c.try_claim(task_id, 0), "is not the last run")
    assert (await c.claim(task_id, 1, worker_id="w2"))["runId"] == 1


async def test_retries_exhaust(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = await c.create(retries=2)
    for run_id in range(3):
        await c.claim(task_id, run_id)
        await c.report(task_id, run_id, "exception", "worker-shutdown")
    status = await c.status(task_id)
    assert status["state"] == "exception"
    assert status["retriesLeft"] == 0
    assert [r["reasonCreated"] for r in status["runs"]] == ["scheduled", "retry", "retry"]
    assert all(r["reasonResolved"] == "worker-shutdown" for r in status["runs"])
    missing = await c.try_claim(task_id, 3)
    assert missing.status == 404


@pytest.mark.parametrize(
    "reason", ["malformed-payload", "resource-unavailable", "internal-error", "superseded"]
)
async def test_other_exception_reasons_never_retry(
    start_coordinator: StartCoordinator, reason: str
) -> None:
    c = await start_coordinator()
    task_id = await c.create(retries=5)
    await c.claim(task_id)
    status = await c.report(task_id, 0, "exception", reason)
    assert status["state"] == "exception"
    assert status["retriesLeft"] == 5
    assert len(status["runs"]) == 1


# --- dependencies ---------------------------------------------------------------------------


async def test_dependent_becomes_pending_when_its_dependencies_complete(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    first, second = await c.create(), await c.create()
    dependent = await c.create(dependencies=[first, second])
    assert (await c.status(dependent))["state"] == "unscheduled"

    await c.claim(first)
    await c.report(first, 0, "completed")
    await c.parts.service.drain()
    assert (await c.status(dependent))["state"] == "unscheduled"  # second still pending

    await c.claim(second)
    await c.report(second, 0, "completed")

    async def pending() -> bool:
        return bool((await c.status(dependent))["state"] == "pending")

    await wait_until(pending, within=10, what="the dependent to become pending")
    [run] = (await c.status(dependent))["runs"]
    assert run["reasonCreated"] == "scheduled"
    assert (await c.claim(dependent))["status"]["state"] == "running"


async def test_dependency_completed_before_creation_schedules_at_once(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    dependency = await c.create()
    await c.claim(dependency)
    await c.report(dependency, 0, "completed")
    dependent = slugid.nice()
    response = await c.call("PUT", f"/task/{dependent}", task_definition(dependencies=[dependency]))
    assert response.status == 200
    assert response.body["status"]["state"] == "pending"


@pytest.mark.parametrize(
    ("requires", "expected"),
    [("all-resolved", "pending"), ("all-completed", "unscheduled")],
)
async def test_failed_dependency(
    start_coordinator: StartCoordinator, requires: str, expected: str
) -> None:
    c = await start_coordinator()
    dependency = await c.create()
    dependent = await c.create(dependencies=[dependency], requires=requires)
    # a sibling that needs only resolution: once it is pending, the dependents were examined
    witness = await c.create(dependencies=[dependency], requires="all-resolved")
    await c.claim(dependency)
    await c.report(dependency, 0, "failed")

    async def witness_pending() -> bool:
        return bool((await c.status(witness))["state"] == "pending")

    await wait_until(witness_pending, within=10, what="dependents of the failed task examined")
    await c.parts.service.drain()
    assert (await c.status(dependent))["state"] == expected


# --- listings -------------------------------------------------------------------------------


async def collect_pages(
    c: RunningCoordinator, path: str, key: str, value: str, limit: int
) -> list[list[str]]:
    pages: list[list[str]] = []
    token: str | None = None
    while True:
        params = {"limit": str(limit)}
        if token is not None:
            params["continuationToken"] = token
        response = await c.call("GET", f"{path}?{urlencode(params)}")
        assert response.status == 200, response.body
        assert response.body[key] == value
        pages.append([entry["status"]["taskId"] for entry in response.body["tasks"]])
        token = response.body.get("continuationToken")
        if token is None:
            return pages
        assert len(pages) < 20, "paging does not terminate"


async def test_list_task_group_pages(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    group = slugid.nice()
    members = [await c.create(taskGroupId=group) for _ in range(7)]
    await c.create()  # another group

    pages = await collect_pages(c, f"/task-group/{group}/list", "taskGroupId", group, limit=3)
    assert [len(page) for page in pages] == [3, 3, 1]
    assert [task_id for page in pages for task_id in page] == sorted(members)

    whole = await c.call("GET", f"/task-group/{group}/list")
    assert whole.status == 200
    assert "continuationToken" not in whole.body
    entry = whole.body["tasks"][0]
    assert entry["status"] == await c.status(entry["status"]["taskId"])
    assert entry["task"] == (await c.call("GET", f"/task/{entry['status']['taskId']}")).body


async def test_list_task_group_of_an_unknown_group_is_404_as_in_taskcluster(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    group = slugid.nice()
    response = await c.call("GET", f"/task-group/{group}/list")
    assert response.status == 404, response.body
    assert response.body["code"] == "ResourceNotFound"
    assert group in response.body["message"]


async def test_list_dependent_tasks_pages(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    dependency = await c.create()
    dependents = [await c.create(dependencies=[dependency]) for _ in range(5)]
    await c.create(dependencies=[await c.create()])  # depends on something else

    pages = await collect_pages(c, f"/task/{dependency}/dependents", "taskId", dependency, limit=2)
    assert [len(page) for page in pages] == [2, 2, 1]
    assert [task_id for page in pages for task_id in page] == sorted(dependents)


async def test_list_dependents_of_an_unknown_task_is_not_found(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    response = await c.call("GET", f"/task/{slugid.nice()}/dependents")
    assert response.status == 404
    assert response.body["code"] == "ResourceNotFound"


# --- counts ---------------------------------------------------------------------------------


async def test_pending_tasks_and_task_queue_counts(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    tasks = [await c.create(provisionerId="count-prov", workerType="count-wt") for _ in range(4)]
    await c.create(provisionerId="count-prov", workerType="elsewhere")
    await c.claim(tasks[0])
    await c.claim(tasks[1])
    await c.claim(tasks[2])
    await c.report(tasks[2], 0, "completed")

    ids = {
        "provisionerId": "count-prov",
        "workerType": "count-wt",
        "taskQueueId": "count-prov/count-wt",
    }
    for path in ("/pending/count-prov/count-wt", "/pending/count-prov%2Fcount-wt"):
        response = await c.call("GET", path)
        assert response.status == 200, (path, response.body)
        assert response.body == {**ids, "pendingTasks": 1}, path

    for path in (
        "/task-queues/count-prov/count-wt/counts",
        "/task-queues/count-prov%2Fcount-wt/counts",
    ):
        response = await c.call("GET", path)
        assert response.status == 200, (path, response.body)
        assert response.body == {
            **ids,
            "pending": 1,
            "delayed": 0,
            "running": 2,
            "pendingTasks": 1,
            "claimedTasks": 2,
        }, path

    empty = await c.call("GET", "/pending/nobody/here")
    assert empty.body["pendingTasks"] == 0


async def test_poll_task_urls_says_to_use_claim_work_under_store_dispatch(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()  # no storage account: store dispatch
    urls = await c.call("GET", "/poll-task-url/prov/wt")
    assert urls.status == 404
    assert "COORDINATOR_DISPATCH=store" in urls.body["message"]
    assert "claimWork" in urls.body["message"]
    task_id = await c.create()
    work = await c.call("POST", "/claim-work/test-prov/test-wt", {**WORKER, "tasks": 1})
    assert work.status == 200
    assert [claim["status"]["taskId"] for claim in work.body["tasks"]] == [task_id]
