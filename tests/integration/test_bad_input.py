"""Bad input over real HTTP: every case is answered 400, 404, 405 or 413 with a Taskcluster
error body whose message names the problem, never a 500.

Each test starts its own in-process coordinator (SQLite, no Azure, auth disabled).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
import slugid

from coordinator.domain.records import to_iso
from coordinator.service.clock import wall_clock
from devharness.api import Response, read
from devharness.tasks import METADATA, task_definition
from tests.fixtures.coordinator import WORKER, RunningCoordinator, StartCoordinator

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def assert_error(response: Response, status: int, code: str, *fragments: str) -> None:
    assert response.status == status, response.body
    assert isinstance(response.body, dict), response.body
    assert set(response.body) == {"code", "message", "requestInfo"}, response.body
    assert response.body["code"] == code, response.body
    for fragment in fragments:
        assert fragment in response.body["message"], response.body["message"]


async def put_raw(c: RunningCoordinator, task_id: str, data: bytes) -> Response:
    """createTask with ``data`` as the body, as it is (the JSON client would encode it)."""
    headers = {"Content-Type": "application/json"}
    async with c.session.put(f"{c.api}/task/{task_id}", data=data, headers=headers) as raw:
        return await read(raw)


def raw_with_payload(payload_json: str) -> bytes:
    """A valid createTask body, serialised, with ``payload`` replaced by raw JSON text."""
    text = json.dumps(task_definition(payload={"marker": 1}))
    return text.replace('{"marker": 1}', payload_json).encode("utf-8")


# --- bodies that are not acceptable JSON -------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"{not json", "request body is not valid JSON: Expecting property name"),
        (b'{"payload": {}', "request body is not valid JSON"),
        (b'{"a": "\xff"}', "request body is not UTF-8 text"),
        (raw_with_payload('{"x": NaN}'), "NaN is not a JSON number"),
        (raw_with_payload('{"x": -Infinity}'), "-Infinity is not a JSON number"),
        (raw_with_payload('{"x": 1e400}'), "number 1e400 is out of range"),
        (raw_with_payload('{"x": ' + "9" * 5000 + "}"), "request body is not valid JSON"),
        (raw_with_payload('{"x": "\\ud800"}'), "lone UTF-16 surrogate"),
        (raw_with_payload('{"x": ' + "[" * 200 + "]" * 200 + "}"), "nested too deeply"),
        (raw_with_payload('{"x": ' + "[" * 5000 + "]" * 5000 + "}"), "nested too deeply"),
    ],
    ids=[
        "malformed",
        "truncated",
        "not-utf8",
        "nan",
        "infinity",
        "float-overflow",
        "huge-integer",
        "lone-surrogate",
        "deep-nesting",
        "very-deep-nesting",
    ],
)
async def test_unacceptable_json_body(
    start_coordinator: StartCoordinator, data: bytes, fragment: str
) -> None:
    c = await start_coordinator()
    task_id = slugid.nice()
    response = await put_raw(c, task_id, data)
    assert_error(response, 400, "InputValidationError", fragment)
    assert response.body["requestInfo"]["method"] == "createTask"
    assert (await c.call("GET", f"/task/{task_id}")).status == 404


@pytest.mark.parametrize(("lists", "status"), [(126, 200), (127, 400)])
async def test_a_body_may_nest_128_levels_and_no_more(
    start_coordinator: StartCoordinator, lists: int, status: int
) -> None:
    # the definition is level 1, the payload object level 2, then the nested lists
    c = await start_coordinator()
    payload = '{"x": ' + "[" * lists + "]" * lists + "}"
    response = await put_raw(c, slugid.nice(), raw_with_payload(payload))
    assert response.status == status, response.body


async def test_acceptable_oddities_are_kept(start_coordinator: StartCoordinator) -> None:
    """What the strict parsing must not reject: surrogate pairs, NUL, big and deep-ish values."""
    c = await start_coordinator()
    task_id = slugid.nice()
    payload = '{"emoji": "\\ud83d\\ude00", "nul": "a\\u0000b", "big": 1e300, "deep": %s}' % (
        "[" * 100 + "]" * 100
    )
    assert (await put_raw(c, task_id, raw_with_payload(payload))).status == 200
    stored = (await c.call("GET", f"/task/{task_id}")).body["payload"]
    assert stored["emoji"] == "\U0001f600"
    assert stored["nul"] == "a\x00b"
    assert stored["big"] == 1e300


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ([1, 2], "body: [1, 2] is not of type 'object'"),
        ("task", "body: 'task' is not of type 'object'"),
        (None, "'created' is a required property"),  # an empty body is {}
    ],
    ids=["array", "string", "empty"],
)
async def test_create_task_body_of_the_wrong_shape(
    start_coordinator: StartCoordinator, body: Any, fragment: str
) -> None:
    c = await start_coordinator()
    response = await c.call("PUT", f"/task/{slugid.nice()}", body)
    assert_error(response, 400, "InputValidationError", "create-task-request", fragment)


# --- createTask bodies that break the schema ---------------------------------------------------

Overrides = Callable[[str, int], dict[str, Any]]
"""``(taskId, now) -> top-level fields`` to change in a valid body (``None`` deletes one)."""

SCHEMA_CASES: list[tuple[str, Overrides, str]] = [
    ("retries-string", lambda t, n: {"retries": "5"}, "body.retries: '5' is not of type 'integer'"),
    ("retries-bool", lambda t, n: {"retries": True}, "body.retries: True is not of type 'integer'"),
    ("retries-too-many", lambda t, n: {"retries": 50}, "greater than the maximum of 49"),
    ("retries-negative", lambda t, n: {"retries": -1}, "less than the minimum of 0"),
    ("priority", lambda t, n: {"priority": "urgent"}, "body.priority: 'urgent' is not one of"),
    (
        "unknown-field",
        lambda t, n: {"colour": "red"},
        "additional property 'colour' is not allowed",
    ),
    (
        "unknown-fields",
        lambda t, n: {"colour": "red", "size": 1},
        "additional properties 'colour', 'size' are not allowed",
    ),
    (
        "task-group-id",
        lambda t, n: {"taskGroupId": "not-a-slugid"},
        "body.taskGroupId: 'not-a-slugid' does not match",
    ),
    (
        "task-group-id-newline",
        lambda t, n: {"taskGroupId": slugid.nice() + "\n"},
        "body.taskGroupId",
    ),
    (
        "dependency-not-slugid",
        lambda t, n: {"dependencies": ["nope"]},
        "body.dependencies[0]: 'nope' does not match",
    ),
    ("duplicate-routes", lambda t, n: {"routes": ["a", "a"]}, "has non-unique elements"),
    ("empty-route", lambda t, n: {"routes": [""]}, "body.routes[0]: '' should be non-empty"),
    ("requires", lambda t, n: {"requires": "some"}, "body.requires: 'some' is not one of"),
    (
        "worker-type-pattern",
        lambda t, n: {"workerType": "has space"},
        "body.workerType: 'has space' does not match",
    ),
    (
        "worker-type-newline",
        lambda t, n: {"workerType": "wt\n"},
        "body.workerType: 'wt\\n' does not match",
    ),
    (
        "task-queue-id-pattern",
        lambda t, n: {"provisionerId": None, "workerType": None, "taskQueueId": "no-slash"},
        "body.taskQueueId: 'no-slash' does not match",
    ),
    (
        "no-task-queue",
        lambda t, n: {"provisionerId": None},
        "must match one of the alternatives, but: 'taskQueueId' is a required property",
    ),
    ("deadline-not-date", lambda t, n: {"deadline": "tomorrow"}, "body.deadline: 'tomorrow'"),
    (
        "created-no-zone",
        lambda t, n: {"created": to_iso(n)[:-1]},
        "body.created",
    ),
    ("missing-payload", lambda t, n: {"payload": None}, "'payload' is a required property"),
    ("payload-array", lambda t, n: {"payload": []}, "body.payload: [] is not of type 'object'"),
    (
        "owner-not-email",
        lambda t, n: {"metadata": {**METADATA, "owner": "nobody"}},
        "body.metadata.owner: 'nobody' is not a 'email'",
    ),
    (
        "source-not-http",
        lambda t, n: {"metadata": {**METADATA, "source": "ftp://x"}},
        "body.metadata.source: 'ftp://x' does not match",
    ),
    (
        "tag-not-string",
        lambda t, n: {"tags": {"kind": 1}},
        "body.tags.kind: 1 is not of type 'string'",
    ),
    ("scope-not-ascii", lambda t, n: {"scopes": ["caf\u00e9"]}, "body.scopes[0]: 'café'"),
]


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [case[1:] for case in SCHEMA_CASES],
    ids=[case[0] for case in SCHEMA_CASES],
)
async def test_create_task_schema_violation(
    start_coordinator: StartCoordinator, overrides: Overrides, fragment: str
) -> None:
    c = await start_coordinator()
    task_id = slugid.nice()
    now = wall_clock()
    body = task_definition(now)
    for key, value in overrides(task_id, now).items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    response = await c.call("PUT", f"/task/{task_id}", body)
    assert_error(response, 400, "InputValidationError", "create-task-request", fragment)
    assert response.body["requestInfo"]["payload"] == body
    assert (await c.call("GET", f"/task/{task_id}")).status == 404


async def test_too_many_and_duplicate_dependencies_say_why(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    many = task_definition(dependencies=[slugid.nice() for _ in range(101)])
    response = await c.call("PUT", f"/task/{slugid.nice()}", many)
    assert_error(response, 400, "InputValidationError", "is too long")
    assert len(response.body["message"]) < 500, "the 101 ids should not all be quoted"

    twice = slugid.nice()
    duplicate = task_definition(dependencies=[twice, twice])
    response = await c.call("PUT", f"/task/{slugid.nice()}", duplicate)
    assert_error(response, 400, "InputValidationError", "has non-unique elements", twice)


# --- createTask bodies that break the rules of docs/protocol.md ----------------------------

RULE_CASES: list[tuple[str, Overrides, str]] = [
    (
        "deadline-in-the-past",
        lambda t, n: {"created": to_iso(n - 5 * MINUTE), "deadline": to_iso(n - MINUTE)},
        "is not in the future",
    ),
    (
        "deadline-before-created",
        lambda t, n: {"created": to_iso(n + 10 * MINUTE), "deadline": to_iso(n + 5 * MINUTE)},
        "is before created",
    ),
    (
        "expires-before-deadline",
        lambda t, n: {"deadline": to_iso(n + 2 * HOUR), "expires": to_iso(n + HOUR)},
        "is before deadline",
    ),
    (
        "created-too-early",
        lambda t, n: {"created": to_iso(n - 20 * MINUTE)},
        "is more than 15 minutes from the server's time",
    ),
    (
        "created-too-late",
        lambda t, n: {"created": to_iso(n + 20 * MINUTE), "deadline": to_iso(n + HOUR)},
        "is more than 15 minutes from the server's time",
    ),
    (
        "deadline-beyond-default-maximum",
        lambda t, n: {"deadline": to_iso(n + 6 * DAY)},
        "is too far in the future: the maximum is 5 days from now",
    ),
    (
        "created-before-year-1",
        lambda t, n: {"created": "0001-01-01T00:00:00+01:00"},
        "created '0001-01-01T00:00:00+01:00' is out of range",
    ),
    (
        "deadline-after-year-9999",
        lambda t, n: {"deadline": "9999-12-31T23:59:59-01:00"},
        "deadline '9999-12-31T23:59:59-01:00' is out of range",
    ),
    (
        "depends-on-itself",
        lambda t, n: {"dependencies": [t]},
        "can't depend on itself",
    ),
    (
        "task-queue-id-contradicts",
        lambda t, n: {"taskQueueId": "other/test-wt"},
        "provisionerId 'test-prov' contradicts taskQueueId 'other/test-wt'",
    ),
    ("scope-double-star", lambda t, n: {"scopes": ["queue:**"]}, "ends in '**'"),
]


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [case[1:] for case in RULE_CASES],
    ids=[case[0] for case in RULE_CASES],
)
async def test_create_task_rule_violation(
    start_coordinator: StartCoordinator, overrides: Overrides, fragment: str
) -> None:
    c = await start_coordinator()
    task_id = slugid.nice()
    now = wall_clock()
    body = task_definition(now, **overrides(task_id, now))
    response = await c.call("PUT", f"/task/{task_id}", body)
    assert_error(response, 400, "InputError", fragment)
    assert (await c.call("GET", f"/task/{task_id}")).status == 404


async def test_expires_before_deadline_names_both(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    now = wall_clock()
    body = task_definition(now, deadline=to_iso(now + 2 * HOUR), expires=to_iso(now + HOUR))
    response = await c.call("PUT", f"/task/{slugid.nice()}", body)
    assert_error(
        response,
        400,
        "InputError",
        f"expires {to_iso(now + HOUR)} is before deadline {to_iso(now + 2 * HOUR)}",
    )


async def test_deadline_beyond_configured_maximum(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator(max_deadline_ms=DAY)
    now = wall_clock()
    too_far = task_definition(now, deadline=to_iso(now + DAY + HOUR))
    response = await c.call("PUT", f"/task/{slugid.nice()}", too_far)
    assert_error(response, 400, "InputError", "too far in the future: the maximum is 1 day")
    # just inside the maximum is fine
    await c.create(now_ms=now, deadline=to_iso(now + DAY - MINUTE))


async def test_unknown_dependency(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    known = await c.create()
    unknown = slugid.nice()
    task_id = slugid.nice()
    body = task_definition(dependencies=[known, unknown])
    response = await c.call("PUT", f"/task/{task_id}", body)
    assert_error(response, 400, "InputError", f"dependencies do not exist: {unknown}")
    assert known not in response.body["message"]
    assert (await c.call("GET", f"/task/{task_id}")).status == 404
    dependents = await c.call("GET", f"/task/{known}/dependents")
    assert dependents.body["tasks"] == []


async def test_dependency_that_expires_before_the_deadline(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    now = wall_clock()
    short_lived = await c.create(
        now_ms=now, deadline=to_iso(now + HOUR), expires=to_iso(now + HOUR)
    )
    body = task_definition(now, deadline=to_iso(now + 2 * HOUR), dependencies=[short_lived])
    response = await c.call("PUT", f"/task/{slugid.nice()}", body)
    assert_error(
        response,
        400,
        "InputError",
        f"dependencies expire before this task's deadline: {short_lived}",
    )


# --- path and query parameters ------------------------------------------------------------------

TASK = "fN1SbArXTPSVFNUvaOlinQ"


@pytest.mark.parametrize(
    ("method", "path", "body", "fragment"),
    [
        ("GET", "/task/not-a-slugid", None, "taskId: 'not-a-slugid' does not match"),
        ("GET", "/task/not-a-slugid/status", None, "taskId: 'not-a-slugid'"),
        ("PUT", "/task/not-a-slugid", "definition", "taskId: 'not-a-slugid'"),
        ("GET", f"/task/{TASK}%0A", None, f"taskId: '{TASK}\\n' does not match"),
        ("GET", f"/task/{TASK}%0A/status", None, f"taskId: '{TASK}\\n'"),
        ("PUT", f"/task/{TASK}%0A", "definition", f"taskId: '{TASK}\\n'"),
        ("POST", f"/task/{TASK[:-1]}x/cancel", None, "taskId"),
        ("POST", f"/task/{TASK}/runs/abc/claim", WORKER, "runId: 'abc' does not match"),
        ("POST", f"/task/{TASK}/runs/-1/claim", WORKER, "runId: '-1' does not match"),
        ("POST", f"/task/{TASK}/runs/%C2%B2/claim", WORKER, "runId: '²' does not match"),
        ("POST", f"/task/{TASK}/runs/1.0/claim", WORKER, "runId: '1.0'"),
        ("POST", f"/task/{TASK}/runs/0%0A/claim", WORKER, "runId: '0\\n'"),
        ("POST", f"/task/{TASK}/runs/1234567890/claim", WORKER, "runId: '1234567890'"),
        ("POST", f"/task/{TASK}/runs/abc/reclaim", None, "runId: 'abc'"),
        ("POST", f"/task/{TASK}/runs/abc/completed", None, "runId: 'abc'"),
        ("POST", f"/task/{TASK}/runs/x/exception", {"reason": "superseded"}, "runId: 'x'"),
        ("GET", f"/task-group/{TASK}x/list", None, "taskGroupId"),
        ("GET", f"/task-group/{TASK}/list?limit=0", None, "limit: '0' does not match"),
        ("GET", f"/task-group/{TASK}/list?limit=ten", None, "limit: 'ten'"),
        ("GET", f"/task-group/{TASK}/list?limit=-5", None, "limit: '-5'"),
        (
            "GET",
            f"/task-group/{TASK}/list?continuationToken=garbage",
            None,
            "continuationToken 'garbage' is not one this API issued",
        ),
        ("GET", f"/task/{TASK}/dependents?limit=1.5", None, "limit: '1.5'"),
        ("GET", "/pending/prov%2F", None, "taskQueueId: 'prov/' does not match"),
        ("GET", "/pending/a%2Fb%2Fc", None, "taskQueueId: 'a/b/c'"),
        ("GET", "/pending/has%20space/wt", None, "provisionerId: 'has space'"),
        ("GET", f"/pending/prov/{'w' * 39}", None, "workerType"),
        ("GET", "/task-queues/prov%2Fwt%0A/counts", None, "taskQueueId: 'prov/wt\\n'"),
        ("GET", "/poll-task-url/prov/w%2Ft", None, "workerType: 'w/t'"),
    ],
)
async def test_bad_path_or_query_parameter(
    start_coordinator: StartCoordinator, method: str, path: str, body: Any, fragment: str
) -> None:
    c = await start_coordinator()
    if body == "definition":
        body = task_definition()
    response = await c.call(method, path, body)
    assert_error(response, 400, "InputValidationError", fragment)


@pytest.mark.parametrize(
    "listing",
    [
        f"/task-group/{TASK}/list",
        f"/task/{TASK}/dependents",
        "/task-queues",
        "/task-queues/prov%2Fwt/pending",
        "/task-queues/prov%2Fwt/claimed",
        "/provisioners",
        "/provisioners/prov/worker-types",
        "/provisioners/prov/worker-types/wt/workers",
    ],
)
async def test_non_ascii_continuation_token_is_a_400(
    start_coordinator: StartCoordinator, listing: str
) -> None:
    c = await start_coordinator()
    response = await c.call("GET", f"{listing}?continuationToken=%C3%A9")
    assert_error(response, 400, "InputValidationError", "continuationToken: 'é' does not match")


async def test_run_beyond_the_runs_is_not_found(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    task_id = await c.create()
    for action, body in [
        ("claim", WORKER),
        ("reclaim", None),
        ("completed", None),
        ("failed", None),
        ("exception", {"reason": "internal-error"}),
    ]:
        response = await c.call("POST", f"/task/{task_id}/runs/1/{action}", body)
        assert_error(response, 404, "ResourceNotFound", f"run 1 of task {task_id} does not exist")
    huge = await c.call("POST", f"/task/{task_id}/runs/999999999/claim", WORKER)
    assert_error(huge, 404, "ResourceNotFound", "run 999999999")


async def test_actions_on_an_unknown_task_are_not_found(
    start_coordinator: StartCoordinator,
) -> None:
    c = await start_coordinator()
    task_id = slugid.nice()
    for method, path, body in [
        ("POST", "/schedule", None),
        ("POST", "/rerun", None),
        ("POST", "/cancel", None),
        ("GET", "/dependents", None),
        ("POST", "/runs/0/claim", WORKER),
        ("POST", "/runs/0/reclaim", None),
        ("POST", "/runs/0/completed", None),
        ("POST", "/runs/0/exception", {"reason": "superseded"}),
    ]:
        response = await c.call(method, f"/task/{task_id}{path}", body)
        assert_error(response, 404, "ResourceNotFound", f"task {task_id} does not exist")


# --- worker request bodies ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"workerId": "w1"}, "'workerGroup' is a required property"),
        (None, "'workerGroup' is a required property"),
        ({"workerGroup": "wg", "workerId": "w 1"}, "body.workerId: 'w 1' does not match"),
        ({"workerGroup": "wg", "workerId": 7}, "body.workerId: 7 is not of type 'string'"),
        ({**WORKER, "extra": 1}, "additional property 'extra' is not allowed"),
        (["wg", "w1"], "is not of type 'object'"),
    ],
    ids=["no-worker-group", "no-body", "bad-worker-id", "worker-id-type", "extra", "array"],
)
async def test_bad_claim_body(
    start_coordinator: StartCoordinator, body: Any, fragment: str
) -> None:
    c = await start_coordinator()
    task_id = await c.create()
    response = await c.call("POST", f"/task/{task_id}/runs/0/claim", body)
    assert_error(response, 400, "InputValidationError", "task-claim-request", fragment)
    status = await c.status(task_id)
    assert status["state"] == "pending"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"reason": "bored"}, "body.reason: 'bored' is not one of"),
        ({"reason": "canceled"}, "body.reason: 'canceled' is not one of"),
        ({"reason": "claim-expired"}, "body.reason: 'claim-expired' is not one of"),
        ({}, "'reason' is a required property"),
        ({"reason": "superseded", "why": "x"}, "additional property 'why' is not allowed"),
    ],
    ids=["bored", "canceled", "claim-expired", "missing", "extra"],
)
async def test_bad_exception_reason(
    start_coordinator: StartCoordinator, body: Any, fragment: str
) -> None:
    c = await start_coordinator()
    task_id = await c.create()
    await c.claim(task_id)
    response = await c.call("POST", f"/task/{task_id}/runs/0/exception", body)
    assert_error(response, 400, "InputValidationError", "task-exception-request", fragment)
    status = await c.status(task_id)
    assert status["state"] == "running"


async def test_bad_claim_work_body(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    for tasks, fragment in [(0, "less than the minimum of 1"), (33, "greater than the maximum")]:
        response = await c.call("POST", "/claim-work/prov/wt", {**WORKER, "tasks": tasks})
        assert_error(response, 400, "InputValidationError", f"body.tasks: {tasks} is", fragment)


# --- size, routes and methods -------------------------------------------------------------------


async def test_body_over_the_size_limit(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator(max_body_bytes=2048)
    small = task_definition(payload={"data": "x" * 1000})
    assert len(json.dumps(small)) < 2048
    await c.create(payload=small["payload"])

    task_id = slugid.nice()
    large = task_definition(payload={"data": "x" * 4000})
    response = await c.call("PUT", f"/task/{task_id}", large)
    assert_error(response, 413, "InputTooLarge", "request body too large", "2048")
    assert (await c.call("GET", f"/task/{task_id}")).status == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/queue/v1/no-such-thing"),
        ("GET", "/api/queue/v1/task"),
        ("GET", f"/api/queue/v1/task/{TASK}/runs/0"),
        ("POST", f"/api/queue/v1/task/{TASK}/runs/0/finish"),
        ("GET", "/api/queue/v2/ping"),
        ("GET", "/"),
    ],
)
async def test_unknown_route_is_a_json_404(
    start_coordinator: StartCoordinator, method: str, path: str
) -> None:
    c = await start_coordinator()
    async with c.session.request(method, c.url + path) as raw:
        assert raw.content_type == "application/json"
        body = await raw.json()
    assert_error(
        Response(status=raw.status, body=body),
        404,
        "ResourceNotFound",
        f"no such endpoint: {method} {path}",
    )


async def test_wrong_method_is_a_json_405(start_coordinator: StartCoordinator) -> None:
    c = await start_coordinator()
    response = await c.call("DELETE", f"/task/{TASK}")
    assert_error(response, 405, "MethodNotAllowed", "DELETE is not allowed", "allowed: GET, PUT")
    response = await c.call("GET", f"/task/{TASK}/runs/0/claim")
    assert_error(response, 405, "MethodNotAllowed", "allowed: POST")


@pytest.mark.parametrize(
    ("what", "path", "headers"),
    [
        ("request line", "/api/queue/v1/ping?junk=" + "x" * 9000, {}),
        ("header", "/api/queue/v1/ping", {"X-Junk": "x" * 9000}),
    ],
)
async def test_an_oversized_request_line_or_header_is_a_json_400_without_a_traceback(
    start_coordinator: StartCoordinator,
    caplog: pytest.LogCaptureFixture,
    what: str,
    path: str,
    headers: dict[str, str],
) -> None:
    c = await start_coordinator()
    async with aiohttp.ClientSession() as session, session.get(c.url + path, headers=headers) as r:
        assert r.status == 400, what
        assert r.content_type == "application/json"
        body = await r.json()
    assert body["code"] == "InputError" and "could not be parsed" in body["message"]
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert not [record for record in caplog.records if record.exc_info]


@pytest.mark.parametrize(
    ("path", "unknown"),
    [
        (f"/task-group/{TASK}/list?state=failed", "state"),
        ("/ping?verbose=1", "verbose"),
        (f"/task/{TASK}/status?limit=10&x=1", "limit, x"),
    ],
)
async def test_unknown_query_parameters_are_a_400(
    start_coordinator: StartCoordinator, path: str, unknown: str
) -> None:
    c = await start_coordinator()
    response = await c.call("GET", path)
    assert_error(response, 400, "InputValidationError", f"unknown query parameters {unknown}")
