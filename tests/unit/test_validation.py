"""Schemas, body and parameter validation, the endpoint table and the OpenAPI document."""

from __future__ import annotations

import json
import re
import re._constants as re_constants  # type: ignore[import-not-found]  # no stubs: private
import re._parser as re_parser  # type: ignore[import-not-found]
import string
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from jsonschema import Draft202012Validator

from coordinator.api import keyset, validation
from coordinator.api.endpoints import (
    API_PREFIX,
    MAX_REQUEST_LINE,
    PARAMETERS,
    TASK_FILTERS,
    Endpoint,
    task_queue_of,
)
from coordinator.api.errors import ApiError, InputValidationError
from coordinator.api.openapi import build_openapi
from coordinator.api.services import ENDPOINTS, HOOKS, QUEUE, SERVICES, Service
from coordinator.api.validation import (
    SCHEMA_BASE_URI,
    SCHEMAS_DIR,
    ResponseSchemaError,
    preload,
    schemas,
    validate,
    validate_params,
    validate_response,
)
from coordinator.domain.definitions import normalise
from coordinator.domain.records import Run, from_iso, record_from_definition
from coordinator.domain.task_queues import MAX_BATCH_RUNS, TaskQueue
from devharness.tasks import HOUR_MS, task_definition

TASK_ID = "Jgj3vp06TJCopdyHUgtfww"
GROUP_ID = "UIEP9rD1THSeI8Dzu24stg"
DEP_A = "MPQxWTCZTUizg7Xnw3JH2w"
NOW = from_iso("2026-05-01T12:00:00.000Z")

TASKCLUSTER_METHODS = {
    "ping",
    "createTask",
    "task",
    "status",
    "scheduleTask",
    "rerunTask",
    "cancelTask",
    "listTaskGroup",
    "listDependentTasks",
    "pollTaskUrls",
    "claimTask",
    "claimWork",
    "reclaimTask",
    "reportCompleted",
    "reportFailed",
    "reportException",
    "pendingTasks",
    "taskQueueCounts",
    "openapi",
    "tasks",
    "statuses",
    "getTaskGroup",
    "sealTaskGroup",
    "cancelTaskGroup",
    "changeTaskPriority",
    "changeTaskGroupPriority",
    "heartbeat",
    "lbheartbeat",
    "version",
    "listTaskQueues",
    "getTaskQueue",
    "listPendingTasks",
    "listClaimedTasks",
    "taskQueueCountsBatch",
    "listProvisioners",
    "getProvisioner",
    "listWorkerTypes",
    "getWorkerType",
    "listWorkers",
    "getWorker",
    "quarantineWorker",
    "declareWorker",
    "createArtifact",
    "finishArtifact",
    "getArtifact",
    "getLatestArtifact",
    "listArtifacts",
    "listLatestArtifacts",
    "artifactInfo",
    "latestArtifactInfo",
    "artifact",
    "latestArtifact",
}
OUR_METHODS = {
    "createTasks",
    "listTasks",
    "listTaskSummaries",
    "countTasks",
    "cancelTasks",
    "rerunTasks",
    "deleteTasks",
    "pauseTaskQueue",
    "resumeTaskQueue",
    "setTaskQueueLimits",
    "setTaskQueueDefaults",
    "claimRuns",
    "reclaimRuns",
    "resolveRuns",
    "watchRuns",
    "uploadArtifact",
    "downloadArtifact",
    "reportProgress",
    "taskProgress",
    "listRejectedInboxRows",
    "deleteRejectedInboxRow",
}
"""Methods beyond Taskcluster's."""


def slug(i: int) -> str:
    """A distinct valid slugid per ``i``."""
    return f"AAAAAAAAQAC{i:010d}A"


def minimal(**changes: Any) -> dict[str, Any]:
    """A valid createTask body of task queue ``proj/wt``, created at ``NOW`` for a day, with
    ``changes`` to its top-level fields."""
    fields = {"provisionerId": "proj", "workerType": "wt", **changes}
    return task_definition(NOW, lifetime_ms=24 * HOUR_MS, **fields)


def maximal() -> dict[str, Any]:
    return minimal(
        taskQueueId="proj/wt",
        schedulerId="sched-1_x",
        taskGroupId=GROUP_ID,
        dependencies=[slug(i) for i in range(100)],
        requires="all-resolved",
        routes=[f"route.{i}" for i in range(63)] + ["r" * 249],
        priority="normal",
        retries=49,
        expires="2027-05-02T12:00:00+02:00",
        scopes=["queue:create-task:*", " ~printable~ "],
        payload={"image": "x", "nested": {"a": [1, 2, None]}},
        tags={"purpose": "test", "t": "x" * 4096},
        extra={"anything": [True, 1.5]},
        metadata={
            "name": "n" * 255,
            "description": "d" * 32768,
            "owner": "o@" + "x" * 253,
            "source": "http://example.com/" + "s" * (4096 - 19),
        },
    )


def problems(schema: str, instance: object) -> str:
    with pytest.raises(InputValidationError) as info:
        validate(schema, instance)
    return str(info.value)


# --- the schema files ------------------------------------------------------------------------


def test_schemas_dir_is_found_next_to_the_package() -> None:
    assert (SCHEMAS_DIR / "create-task-request.json").is_file()


@pytest.mark.parametrize("path", sorted(SCHEMAS_DIR.glob("*.json")), ids=lambda p: p.name)
def test_every_schema_file_is_a_valid_2020_12_schema(path: Any) -> None:
    schema = json.loads(path.read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == SCHEMA_BASE_URI + path.name


def test_every_schema_is_loaded() -> None:
    assert set(schemas()) == {p.stem for p in SCHEMAS_DIR.glob("*.json")}


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def test_request_schemas_reject_additional_properties_and_responses_allow_them() -> None:
    for name, schema in schemas().items():
        if name.endswith("-request"):
            assert schema["additionalProperties"] is False, name
        elif name.endswith("-response"):
            assert "additionalProperties" not in schema, name


# --- createTask bodies -----------------------------------------------------------------------


def test_minimal_and_maximal_bodies_are_valid() -> None:
    validate("create-task-request", minimal())
    validate("create-task-request", maximal())


def test_task_queue_id_alone_is_valid() -> None:
    body = minimal(taskQueueId="proj/wt")
    del body["provisionerId"], body["workerType"]
    validate("create-task-request", body)


@pytest.mark.parametrize("priority", ["highest", "very-low", "normal"])
def test_priorities_are_valid(priority: str) -> None:
    validate("create-task-request", minimal(priority=priority))


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"foo": 1}, "body: additional property 'foo' is not allowed"),
        ({"foo": 1, "bar": 2}, "body: additional properties 'foo', 'bar' are not allowed"),
        ({"provisionerId": "a.b"}, "body.provisionerId: 'a.b' does not match"),
        ({"workerType": "w" * 39}, "body.workerType: '" + "w" * 39 + "' does not match"),
        ({"workerType": ""}, "body.workerType: '' does not match"),
        ({"workerType": "wt\n"}, "body.workerType: 'wt\\n' does not match"),
        ({"schedulerId": "a b"}, "body.schedulerId: 'a b' does not match"),
        ({"taskQueueId": "a/b/c"}, "body.taskQueueId: 'a/b/c' does not match"),
        ({"taskQueueId": "ab"}, "body.taskQueueId: 'ab' does not match"),
        ({"taskGroupId": "not-a-slugid"}, "body.taskGroupId: 'not-a-slugid' does not match"),
        ({"taskGroupId": TASK_ID + "\n"}, "body.taskGroupId: "),
        ({"dependencies": ["x"]}, "body.dependencies[0]: 'x' does not match"),
        ({"dependencies": [DEP_A, DEP_A]}, "body.dependencies: ['"),
        ({"dependencies": [slug(i) for i in range(101)]}, "body.dependencies: "),
        ({"requires": "some"}, "body.requires: 'some' is not one of"),
        ({"routes": [f"r{i}" for i in range(65)]}, "body.routes: "),
        ({"routes": ["a", "a"]}, "has non-unique elements"),
        ({"routes": ["ok", ""]}, "body.routes[1]: '' should be non-empty"),
        ({"routes": ["r" * 250]}, "body.routes[0]: "),
        ({"priority": "urgent"}, "body.priority: 'urgent' is not one of"),
        ({"retries": 50}, "body.retries: 50 is greater than the maximum of 49"),
        ({"retries": -1}, "body.retries: -1 is less than the minimum of 0"),
        ({"retries": True}, "body.retries: True is not of type 'integer'"),
        ({"retries": 1.5}, "body.retries: 1.5 is not of type 'integer'"),
        ({"created": "yesterday"}, "body.created: 'yesterday' is not a 'date-time'"),
        ({"created": "2026-05-01"}, "body.created: '2026-05-01' is not a 'date-time'"),
        ({"deadline": "2026-05-01T12:00:00"}, "body.deadline: '2026-05-01T12:00:00' is not a"),
        ({"deadline": "2026-13-01T00:00:00Z"}, "body.deadline: '2026-13-01T00:00:00Z' is not a"),
        ({"expires": "2026-05-01 12:00:00Z"}, "body.expires: '2026-05-01 12:00:00Z' is not a"),
        ({"expires": "2026-05-01T12:00:00Z\n"}, "body.expires: "),
        ({"scopes": ["ok", "bad\x01"]}, "body.scopes[1]: 'bad\\x01' does not match"),
        ({"scopes": ["caf\u00e9"]}, "body.scopes[0]: 'café' does not match"),
        ({"scopes": "queue:x"}, "body.scopes: 'queue:x' is not of type 'array'"),
        ({"payload": []}, "body.payload: [] is not of type 'object'"),
        ({"extra": "x"}, "body.extra: 'x' is not of type 'object'"),
        ({"tags": {"a": 1}}, "body.tags.a: 1 is not of type 'string'"),
        ({"tags": {"a-b": "x" * 4097}}, "body.tags['a-b']: "),
        ({"deduplicationKey": ""}, "body.deduplicationKey: '' should be non-empty"),
        ({"deduplicationKey": "k" * 256}, "body.deduplicationKey: 'kkk"),
        ({"deduplicationKey": "caf\u00e9"}, "body.deduplicationKey: 'café' does not match"),
        ({"deduplicationKey": "a\nb"}, "body.deduplicationKey: 'a\\nb' does not match"),
        ({"deduplicationTtl": -1}, "body.deduplicationTtl: -1 is less than the minimum of 0"),
        ({"deduplicationTtl": 1.5}, "body.deduplicationTtl: 1.5 is not of type 'integer'"),
        ({"deduplicationTtl": True}, "body.deduplicationTtl: True is not of type 'integer'"),
    ],
)
def test_create_task_rejections(changes: dict[str, Any], expected: str) -> None:
    message = problems("create-task-request", minimal(**changes))
    assert message.startswith("body does not match the schema create-task-request: ")
    assert expected in message


@pytest.mark.parametrize("missing", ["created", "deadline", "payload", "metadata"])
def test_required_fields(missing: str) -> None:
    body = minimal()
    del body[missing]
    assert f"body: '{missing}' is a required property" in problems("create-task-request", body)


@pytest.mark.parametrize("keep", [(), ("provisionerId",), ("workerType",)])
def test_worker_pool_is_required(keep: tuple[str, ...]) -> None:
    body = {
        k: v for k, v in minimal().items() if k not in {"provisionerId", "workerType"} - {*keep}
    }
    message = problems("create-task-request", body)
    assert "body: must match one of the alternatives, but: 'taskQueueId' is a required" in message


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"name": "n" * 256}, "body.metadata.name: "),
        ({"description": "d" * 32769}, "body.metadata.description: "),
        ({"owner": "x"}, "body.metadata.owner: 'x' is not a 'email'"),
        ({"owner": "o@" + "x" * 254}, "body.metadata.owner: "),
        ({"source": "ftp://example.com"}, "body.metadata.source: 'ftp://example.com' does not"),
        ({"source": "https://a b"}, "body.metadata.source: 'https://a b' is not a 'uri'"),
        ({"source": "https://" + "s" * 4089}, "is too long"),
        ({"license": "MIT"}, "body.metadata: additional property 'license' is not allowed"),
    ],
)
def test_metadata_rejections(metadata: dict[str, Any], expected: str) -> None:
    body = minimal()
    body["metadata"] = {**body["metadata"], **metadata}
    assert expected in problems("create-task-request", body)


def test_missing_metadata_field() -> None:
    body = minimal()
    del body["metadata"]["owner"]
    assert "body.metadata: 'owner' is a required property" in problems("create-task-request", body)


def test_every_problem_is_named_in_one_message() -> None:
    body = minimal(foo=1, retries=99, routes=["ok", ""])
    body["metadata"]["owner"] = "x"
    message = problems("create-task-request", body)
    for part in (
        "body: additional property 'foo' is not allowed",
        "body.metadata.owner: 'x' is not a 'email'",
        "body.retries: 99 is greater than the maximum",
        "body.routes[1]: '' should be non-empty",
    ):
        assert part in message


def test_long_instances_are_cut_short_in_messages() -> None:
    message = problems("create-task-request", minimal(payload=["x" * 10_000]))
    assert "body.payload: " in message
    assert len(message) < 500


def test_non_object_body() -> None:
    assert "body: None is not of type 'object'" in problems("create-task-request", None)


def test_offsets_and_fractions_are_valid_date_times() -> None:
    for created in ("2026-05-01T14:00:00.123456+02:00", "2026-05-01t12:00:00z"):
        validate("create-task-request", minimal(created=created))


def test_unknown_schema_is_a_lookup_error() -> None:
    with pytest.raises(KeyError, match="no schema named 'nope'"):
        validate("nope", {})


# --- other request bodies --------------------------------------------------------------------


def test_claim_requests() -> None:
    validate("task-claim-request", {"workerGroup": "g", "workerId": "w"})
    validate("claim-work-request", {"workerGroup": "g", "workerId": "w", "tasks": 32})
    assert "body: additional property 'x' is not allowed" in problems(
        "task-claim-request", {"workerGroup": "g", "workerId": "w", "x": 1}
    )
    assert "body: 'workerId' is a required property" in problems(
        "task-claim-request", {"workerGroup": "g"}
    )
    for tasks, why in ((0, "less than the minimum of 1"), (33, "greater than the maximum of 32")):
        message = problems(
            "claim-work-request", {"workerGroup": "g", "workerId": "w", "tasks": tasks}
        )
        assert f"body.tasks: {tasks} is {why}" in message
    assert "body: 'tasks' is a required property" in problems(
        "claim-work-request", {"workerGroup": "g", "workerId": "w"}
    )


@pytest.mark.parametrize(
    "reason",
    [
        "worker-shutdown",
        "malformed-payload",
        "resource-unavailable",
        "internal-error",
        "superseded",
        "intermittent-task",
    ],
)
def test_exception_reasons(reason: str) -> None:
    validate("task-exception-request", {"reason": reason})


@pytest.mark.parametrize("reason", ["canceled", "claim-expired", "deadline-exceeded", ""])
def test_reasons_workers_may_not_report(reason: str) -> None:
    assert "body.reason: " in problems("task-exception-request", {"reason": reason})


# --- parameters ------------------------------------------------------------------------------


def test_good_parameters() -> None:
    validate_params(
        {
            "taskId": TASK_ID,
            "taskGroupId": GROUP_ID,
            "runId": "0",
            "provisionerId": "proj",
            "workerType": "wt",
            "taskQueueId": "proj/wt",
            "limit": "1000",
            "continuationToken": "WyJhIl0.cL4J8sh616LH9Y6VlhrDsg",
            "unknownQueryParameter": "anything",
        }
    )


def test_bad_parameters_are_all_named() -> None:
    with pytest.raises(InputValidationError) as info:
        validate_params(
            {
                "taskId": "abc",
                "runId": "x",
                "limit": "0",
                "taskQueueId": "proj",
                "workerType": "a.b",
            }
        )
    message = str(info.value)
    for name in ("taskId: 'abc'", "runId: 'x'", "limit: '0'", "taskQueueId: 'proj'", "workerType"):
        assert name in message


def test_every_route_parameter_has_a_schema() -> None:
    definitions = schemas()["common"]["$defs"]
    for endpoint in ENDPOINTS:
        for name in (*endpoint.path_parameters, *endpoint.query_names):
            assert name in PARAMETERS, (endpoint.name, name)
            assert PARAMETERS[name].schema in definitions
        for parameter in endpoint.query:
            assert parameter.schema in definitions, (endpoint.name, parameter)


# --- responses -------------------------------------------------------------------------------


def _record_with_runs() -> Any:
    definition = normalise(
        TASK_ID, {**minimal(), "dependencies": [DEP_A]}, now=NOW, max_deadline_ms=5 * 86_400_000
    )
    record = record_from_definition(TASK_ID, definition)
    done = Run(
        run_id=0,
        state="exception",
        reason_created="scheduled",
        reason_resolved="worker-shutdown",
        scheduled=NOW,
        visible_at=NOW,
        worker_group="g",
        worker_id="w",
        taken_until=NOW + 1_200_000,
        started=NOW + 1,
        resolved=NOW + 2,
    )
    running = Run(
        run_id=1,
        state="running",
        reason_created="retry",
        scheduled=NOW + 2,
        visible_at=NOW + 2,
        worker_group="g",
        worker_id="w",
        taken_until=NOW + 1_200_002,
        started=NOW + 3,
    )
    return record.replace(runs=(done, running), retries_left=4)


def test_real_records_match_the_response_schemas() -> None:
    record = _record_with_runs()
    definition = dict(record.definition)
    status = record.status()
    credentials = {"clientId": "task-client/x", "accessToken": "t", "certificate": "{}"}
    claim = {
        "status": status,
        "runId": 1,
        "workerGroup": "g",
        "workerId": "w",
        "takenUntil": status["runs"][1]["takenUntil"],
        "task": definition,
        "credentials": credentials,
    }
    validate_response("task-definition-response", definition)
    validate_response("task-status-response", {"status": status})
    validate_response("task-claim-response", claim)
    validate_response("claim-work-response", {"tasks": [claim]})
    reclaim = {k: v for k, v in claim.items() if k != "task"}
    validate_response("task-reclaim-response", reclaim)
    entry = {"task": definition, "status": status}
    validate_response(
        "list-task-group-response",
        {
            "taskGroupId": TASK_ID,
            "schedulerId": "-",
            "expires": "2027-05-01T12:00:00.000Z",
            "tasks": [entry],
            "continuationToken": "next",
        },
    )
    validate_response("list-dependent-tasks-response", {"taskId": DEP_A, "tasks": [entry]})


def test_small_responses() -> None:
    validate_response("ping-response", {"alive": True, "uptime": 1.5})
    validate_response(
        "poll-task-urls-response",
        {
            "queues": [
                {
                    "signedPollUrl": "http://127.0.0.1:10001/devstoreaccount1/q/messages?sig=x",
                    "signedDeleteUrl": "http://127.0.0.1:10001/devstoreaccount1/q/messages/"
                    "{{messageId}}?popreceipt={{popReceipt}}&sig=x",
                    "signedReleaseUrl": "http://127.0.0.1:10001/devstoreaccount1/q/messages/"
                    "{{messageId}}?popreceipt={{popReceipt}}&visibilitytimeout=0&sig=x",
                }
            ],
            "expires": "2026-05-01T12:30:00.000Z",
        },
    )
    pool = {"provisionerId": "proj", "workerType": "wt", "taskQueueId": "proj/wt"}
    validate_response("pending-tasks-response", {**pool, "pendingTasks": 3})
    validate_response(
        "task-queue-counts-response", {**pool, "pending": 3, "delayed": 1, "running": 0}
    )
    validate_response(
        "error",
        {
            "code": "InputError",
            "message": "bad",
            "requestInfo": {
                "method": "createTask",
                "params": {"taskId": TASK_ID},
                "payload": {"x": 1},
                "time": "2026-05-01T12:00:00.000Z",
            },
        },
    )


def test_responses_may_carry_additional_properties() -> None:
    validate_response("ping-response", {"alive": True, "uptime": 0, "version": "1"})


def test_bad_response_is_our_bug() -> None:
    status = _record_with_runs().status()
    status["runs"][0]["state"] = "lost"
    with pytest.raises(ResponseSchemaError) as info:
        validate_response("task-status-response", {"status": status})
    assert isinstance(info.value, AssertionError)
    assert not isinstance(info.value, ApiError)
    assert "response.status.runs[0].state: 'lost' is not one of" in str(info.value)


def test_task_definition_response_needs_both_worker_pool_forms() -> None:
    definition = dict(_record_with_runs().definition)
    del definition["taskQueueId"]
    with pytest.raises(ResponseSchemaError, match="'taskQueueId' is a required property"):
        validate_response("task-definition-response", definition)


# --- endpoint table --------------------------------------------------------------------------


def test_every_taskcluster_method_has_an_endpoint() -> None:
    assert {e.name for e in ENDPOINTS} == TASKCLUSTER_METHODS | OUR_METHODS


def test_endpoints_are_unique_and_name_existing_schemas() -> None:
    assert len({(e.method, e.route) for e in ENDPOINTS}) == len(ENDPOINTS)
    assert len({e.operation_id for e in ENDPOINTS}) == len(ENDPOINTS)
    for endpoint in ENDPOINTS:
        for name in (endpoint.input, endpoint.output):
            assert name is None or name in schemas(), (endpoint.name, name)


def test_task_queue_variants() -> None:
    routes = {(e.name, e.route) for e in ENDPOINTS}
    for name, prefix, suffix in (
        ("claimWork", "/claim-work", ""),
        ("pendingTasks", "/pending", ""),
        ("taskQueueCounts", "/task-queues", "/counts"),
    ):
        assert (name, f"{prefix}/{{provisionerId}}/{{workerType}}{suffix}") in routes
        assert (name, f"{prefix}/{{taskQueueId}}{suffix}") in routes
    assert task_queue_of({"taskQueueId": "proj/wt"}) == TaskQueue("proj", "wt")
    assert task_queue_of({"provisionerId": "proj", "workerType": "wt"}) == TaskQueue("proj", "wt")


# --- OpenAPI ---------------------------------------------------------------------------------


def _resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


@pytest.mark.parametrize("service", SERVICES, ids=lambda service: service.title)
def test_openapi_document_covers_every_endpoint(service: Service) -> None:
    document = build_openapi("http://127.0.0.1:8080/", service)
    assert document["openapi"] == "3.1.0"
    assert document["info"]["title"] == service.title
    assert document["servers"] == [{"url": "http://127.0.0.1:8080" + service.prefix}]
    for endpoint in service.endpoints:
        operation = document["paths"][endpoint.route][endpoint.method.lower()]
        assert operation["operationId"] == endpoint.operation_id
        assert operation["x-taskcluster-method"] == endpoint.name
        assert [p["name"] for p in operation.get("parameters", [])] == [
            *endpoint.path_parameters,
            *(["filter"] if endpoint.filters is not None else []),
            *(parameter.name for parameter in endpoint.query),
        ]
        assert ("requestBody" in operation) == (endpoint.input is not None or endpoint.uploads)
        for status in (str(endpoint.success), "400", "401", "403", "404", "409", "413", "500"):
            assert status in operation["responses"]
    assert sum(len(methods) for methods in document["paths"].values()) == len(service.endpoints)


def test_openapi_documents_hold_the_schemas_their_operations_reach() -> None:
    documents = {
        s.title: set(build_openapi("http://x", s)["components"]["schemas"]) for s in SERVICES
    }

    def only(title: str) -> set[str]:
        others = [names for other, names in documents.items() if other != title]
        return documents[title].difference(*others)

    assert set().union(*documents.values()) == set(schemas())
    assert "create-hook-request" in only("Hooks")
    assert "create-task-request" in only("Queue")
    assert "create-client-request" in only("Auth Service")
    assert "insert-task-request" in only("Index Service")
    assert "set-secret-request" in only("Secrets Service")
    assert "purge-cache-request" in only("Purge Cache Service")
    assert {"common", "error", "ping-response"} <= set.intersection(*documents.values())


@pytest.mark.parametrize("service", SERVICES, ids=lambda service: service.title)
def test_openapi_references_all_resolve_inside_the_document(service: Service) -> None:
    document = build_openapi("http://example.com", service)
    refs = [value for key, value in _walk(document) if key == "$ref"]
    assert len(refs) > 50
    for ref in refs:
        assert _resolve(document, ref) is not None
    assert not any(key == "$id" for key, _ in _walk(document))
    json.dumps(document)


@pytest.mark.parametrize(
    ("service", "route", "method", "body_title"),
    [
        (QUEUE, "/task/{taskId}", "put", "Task Definition Request"),
        (HOOKS, "/hooks/{hookGroupId}/{hookId}", "put", "Hook creation request"),
    ],
    ids=["Queue", "Hooks"],
)
def test_openapi_error_responses_use_the_error_schema(
    service: Service, route: str, method: str, body_title: str
) -> None:
    document = build_openapi("http://example.com", service)
    operation = document["paths"][route][method]
    error = _resolve(document, operation["responses"]["409"]["$ref"])
    schema = error["content"]["application/json"]["schema"]
    assert _resolve(document, schema["$ref"])["title"] == "Error"
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert _resolve(document, body["$ref"])["title"] == body_title


def test_preload_builds_every_validator() -> None:
    preload(endpoint for service in SERVICES for endpoint in service.endpoints)
    validate("task-claim-request", {"workerGroup": "g", "workerId": "w"})


# --- what the OpenAPI document promises ------------------------------------------------------


def _operations(
    document: dict[str, Any], service: Service = QUEUE
) -> Iterator[tuple[Endpoint, dict[str, Any]]]:
    for endpoint in service.endpoints:
        yield endpoint, document["paths"][endpoint.route][endpoint.method.lower()]


def test_openapi_shows_each_operations_scopes() -> None:
    document = build_openapi("http://example.com", QUEUE)
    declared = 0
    for endpoint, operation in _operations(document):
        assert operation.get("x-scopes") == endpoint.scopes, endpoint.operation_id
        assert operation.get("x-run-scopes") == endpoint.run_scopes, endpoint.operation_id
        for template in (endpoint.scopes, endpoint.run_scopes):
            if template is not None:
                declared += 1
                assert json.dumps(template, indent=2) in operation["description"]
    assert declared == 44  # 40 operations declare scopes, 4 calls on runs run_scopes
    claim = document["paths"]["/task/{taskId}/runs/{runId}/claim"]["post"]
    assert claim["x-scopes"] == {
        "AllOf": [
            "queue:claim-task:<provisionerId>/<workerType>",
            "queue:worker-id:<workerGroup>/<workerId>",
        ]
    }
    assert "x-scopes" not in document["paths"]["/task/{taskId}"]["get"]  # reads need none


def test_openapi_shows_each_hook_operations_scopes() -> None:
    document = build_openapi("http://example.com", HOOKS)
    for endpoint, operation in _operations(document, HOOKS):
        assert operation.get("x-scopes") == endpoint.scopes, endpoint.operation_id
    hook = document["paths"]["/hooks/{hookGroupId}/{hookId}"]
    assert hook["put"]["x-scopes"] == {
        "AllOf": [
            "hooks:modify-hook:<hookGroupId>/<hookId>",
            "assume:hook-id:<hookGroupId>/<hookId>",
        ]
    }
    assert hook["get"]["x-scopes"] == "hooks:get:<hookGroupId>:<hookId>"


def test_openapi_requires_a_filter_where_the_api_does() -> None:
    document = build_openapi("http://example.com", QUEUE)
    for endpoint, operation in _operations(document):
        filters = [p for p in operation.get("parameters", []) if p["name"] == "filter"]
        if endpoint.filters is None:
            assert not filters, endpoint.operation_id
            continue
        [parameter] = filters
        assert (parameter["in"], parameter["style"], parameter["explode"]) == (
            "query",
            "form",
            True,
        )
        assert set(parameter["schema"]["properties"]) == set(TASK_FILTERS)
        assert parameter["schema"]["additionalProperties"] is False
        required = endpoint.name in ("cancelTasks", "rerunTasks", "deleteTasks")
        assert parameter["required"] is required, endpoint.operation_id
        assert ("minProperties" in parameter["schema"]) is required
        state = parameter["schema"]["properties"]["state"]
        assert (state["type"], state["minItems"], state["maxItems"]) == ("array", 1, 7)


def test_openapi_bounds_the_management_listings_limit() -> None:
    document = build_openapi("http://example.com", QUEUE)
    limits = {
        endpoint.name: next(p for p in operation["parameters"] if p["name"] == "limit")
        for endpoint, operation in _operations(document)
        if any(parameter.name == "limit" for parameter in endpoint.query)
    }
    bounded = _resolve(document, limits["listTasks"]["schema"]["$ref"])
    assert re.fullmatch(bounded["pattern"].strip("^$"), "1000")
    assert not re.fullmatch(bounded["pattern"].strip("^$"), "1001")
    capped = _resolve(document, limits["listTaskGroup"]["schema"]["$ref"])  # Taskcluster caps
    assert re.fullmatch(capped["pattern"].strip("^$"), "5000")


@pytest.mark.parametrize(
    "key", [("a",), ("x" * 38, "y" * 38), (-(2**63), "z" * 38), (2**63 - 1, "a")]
)
def test_issued_continuation_tokens_match_their_parameter_schema(key: tuple[Any, ...]) -> None:
    app = web.Application()
    app[keyset.TOKEN_KEY] = b"k" * 32
    token = keyset.token(make_mocked_request("GET", "/x", app=app), key)
    validate_params({"continuationToken": token})
    with pytest.raises(InputValidationError):
        validate_params({"continuationToken": token + "x"})  # the signature has its length


_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")


def _bytes_per_character(schema: dict[str, Any]) -> int:
    """The most bytes one character of a value of ``schema`` takes percent-encoded: 1 for an
    unreserved character, 3 for another ASCII one, 12 for a character beyond the pattern's
    reach (four UTF-8 bytes, each ``%XX``)."""
    pattern = schema.get("pattern")
    if pattern is None:
        return 12
    characters: set[str] = set()
    stack = list(re_parser.parse(pattern))
    while stack:
        op, arg = stack.pop()
        if op is re_constants.LITERAL:
            characters.add(chr(arg))
        elif op is re_constants.IN:
            for inner_op, inner_arg in arg:
                if inner_op is re_constants.LITERAL:
                    characters.add(chr(inner_arg))
                elif inner_op is re_constants.RANGE:
                    characters |= {chr(c) for c in range(inner_arg[0], inner_arg[1] + 1)}
                else:  # a negated class or a category: anything, as far as we know
                    return 12
        elif op in (re_constants.MAX_REPEAT, re_constants.MIN_REPEAT):
            stack.extend(arg[2])
        elif op is re_constants.SUBPATTERN:
            stack.extend(arg[3])
        elif op is re_constants.BRANCH:
            for branch in arg[1]:
                stack.extend(branch)
        elif op is not re_constants.AT:
            return 12
    return max(1 if c in _UNRESERVED else 3 if c.isascii() else 12 for c in characters)


def _longest_value(definition: str) -> int:
    """The longest value of a parameter schema, percent-encoded, in bytes."""
    schema = schemas()["common"]["$defs"][definition]
    if "enum" in schema:
        return max(len(quote(value, safe="")) for value in schema["enum"])
    assert "maxLength" in schema, f"{definition} needs a maxLength"
    return int(schema["maxLength"]) * _bytes_per_character(schema)


def test_every_query_the_document_allows_fits_the_request_line() -> None:
    longest = 0
    for endpoint in ENDPOINTS:
        path = API_PREFIX + endpoint.route
        for name in endpoint.path_parameters:
            value = "x" * _longest_value(PARAMETERS[name].schema)
            path = path.replace(f"{{{name}}}", value)
        filters = [PARAMETERS[name] for name in TASK_FILTERS if endpoint.filters is not None]
        query = "&".join(
            f"{parameter.name}={'x' * _longest_value(parameter.schema)}"
            for parameter in [*filters, *endpoint.query]
            for _ in range(parameter.repeat)
        )
        line = f"{endpoint.method} {path}?{query} HTTP/1.1"
        assert len(line) <= MAX_REQUEST_LINE, (endpoint.operation_id, len(line))
        longest = max(longest, len(line))
    assert longest > MAX_REQUEST_LINE * 0.8  # the bound is tight, not vacuous


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ("claim-runs-request", ("properties", "runs", "maxItems")),
        ("reclaim-runs-request", ("properties", "runs", "maxItems")),
        ("watch-runs-request", ("properties", "runs", "maxItems")),
        ("resolve-runs-request", ("properties", "reports", "maxItems")),
        ("claim-work-request", ("properties", "tasks", "maximum")),
        ("claim-work-response", ("properties", "tasks", "maxItems")),
    ],
)
def test_the_batch_schemas_say_max_batch_runs(schema: str, path: tuple[str, ...]) -> None:
    found: Any = json.loads((SCHEMAS_DIR / f"{schema}.json").read_text())
    for key in path:
        found = found[key]
    assert found == MAX_BATCH_RUNS


def test_only_the_hot_paths_of_work_leave_their_built_answers_unchecked() -> None:
    built = {e.operation_id for e in ENDPOINTS if e.built_output}
    assert built == {
        "createTasks",
        "claimWork",
        "claimWorkByTaskQueueId",
        "claimRuns",
        "resolveRuns",
    }
    # the suite checks them all the same (tests/conftest.py)
    assert validation.CHECK_BUILT_OUTPUT
