"""Scope templates: how they expand, and what each endpoint of the table declares.

The expressions below are Taskcluster's for each method (services/queue/src/api.js), written
out by hand, so that a change to a template in the endpoint table shows here as a change to
what a caller must hold.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.api.endpoints import Endpoint, url_parameters
from coordinator.api.pipeline import declared
from coordinator.api.services import ENDPOINTS
from coordinator.domain.scopes import (
    CREATE_TASK_SCOPES,
    Expression,
    create_task_requirement,
    expand,
    held_scopes,
    priority_ladder,
    satisfies,
    template_parameters,
    valid_scope,
)


def _endpoint(operation_id: str) -> Endpoint:
    return next(e for e in ENDPOINTS if e.operation_id == operation_id)


def test_placeholders_are_filled_once() -> None:
    assert expand("a:<x>/<y>", {"x": "1", "y": "<x>"}) == "a:1/<x>"
    assert expand("plain", {}) == "plain"


def test_for_splices_one_operand_per_element_and_if_keeps_one_when_true() -> None:
    template = {
        "AllOf": [
            "first",
            {"for": "route", "in": "routes", "each": "queue:route:<route>"},
            {"if": "held", "then": "held:<who>"},
        ]
    }
    assert expand(template, {"routes": ["a", "b"], "held": False}) == {
        "AllOf": ["first", "queue:route:a", "queue:route:b"]
    }
    assert expand(template, {"routes": [], "held": True, "who": "w"}) == {
        "AllOf": ["first", "held:w"]
    }
    assert template_parameters(template) == {"routes", "held", "who"}


def test_an_object_element_binds_its_keys() -> None:
    template = {"AllOf": [{"for": "task", "in": "tasks", "each": {"AnyOf": ["t:<id>"]}}]}
    assert expand(template, {"tasks": [{"id": "1"}, {"id": "2"}]}) == {
        "AllOf": [{"AnyOf": ["t:1"]}, {"AnyOf": ["t:2"]}]
    }


def test_a_missing_or_mistyped_parameter_is_a_bug_not_a_403() -> None:
    with pytest.raises(KeyError, match="<y>"):
        expand("a:<y>", {})
    with pytest.raises(TypeError, match="<y>"):
        expand("a:<y>", {"y": 7})
    with pytest.raises(ValueError, match="AnyOf or AllOf"):
        expand({"OneOf": ["a"]}, {})


def test_create_task_requirement_is_the_template_with_the_priority_ladder() -> None:
    assert priority_ladder("normal") == priority_ladder("lowest")
    assert priority_ladder("very-high") == ("highest", "very-high")
    assert create_task_requirement(
        priority="high",
        provisioner_id="p",
        worker_type="w",
        scheduler_id="s",
        project_id="proj",
        routes=["r"],
        scopes=["x:<y>"],
    ) == {
        "AllOf": [
            "x:<y>",
            "queue:route:r",
            "queue:create-task:project:proj",
            "queue:scheduler-id:s",
            {
                "AnyOf": [
                    "queue:create-task:highest:p/w",
                    "queue:create-task:very-high:p/w",
                    "queue:create-task:high:p/w",
                ]
            },
        ]
    }
    assert _endpoint("createTask").scopes is CREATE_TASK_SCOPES


T, G = "fN1SbArXTPSVFNUvaOlinQ", "UIEP9rD1THSeI8Dzu24stg"
TASK_PATH = {"taskId": T}
RUN_PATH = {"taskId": T, "runId": "007"}  # run 7: the path's runId is the number it is
WORKER_PATH = {"provisionerId": "p", "workerType": "w", "workerGroup": "g", "workerId": "i"}
STORED_TASK = {"schedulerId": "s", "taskGroupId": G, "projectId": "proj"}

CASES: list[tuple[str, dict[str, str], dict[str, Any], Expression]] = [
    (
        "scheduleTask",
        TASK_PATH,
        STORED_TASK,
        {
            "AnyOf": [
                f"queue:schedule-task:s/{G}/{T}",
                "queue:schedule-task-in-project:proj",
            ]
        },
    ),
    (
        "cancelTask",
        TASK_PATH,
        STORED_TASK,
        {"AnyOf": [f"queue:cancel-task:s/{G}/{T}", "queue:cancel-task-in-project:proj"]},
    ),
    (
        "changeTaskPriority",
        TASK_PATH,
        {"taskQueueId": "p/w"},
        {
            "AnyOf": [
                f"queue:change-task-priority:{T}",
                "queue:change-task-priority-in-queue:p/w",
            ]
        },
    ),
    (
        "sealTaskGroup",
        {"taskGroupId": G},
        {"schedulerId": "s"},
        f"queue:seal-task-group:s/{G}",
    ),
    (
        "pollTaskUrls",
        {"provisionerId": "p", "workerType": "w"},
        {},
        "queue:poll-task-urls:p/w",
    ),
    (
        "claimTask",
        RUN_PATH,
        {"provisionerId": "p", "workerType": "w", "workerGroup": "g", "workerId": "i"},
        {"AllOf": ["queue:claim-task:p/w", "queue:worker-id:g/i"]},
    ),
    (
        "claimWorkByTaskQueueId",
        {"taskQueueId": "p/w"},
        {"workerGroup": "g", "workerId": "i"},
        {"AllOf": ["queue:claim-work:p/w", "queue:worker-id:g/i"]},
    ),
    ("reclaimTask", RUN_PATH, {}, f"queue:reclaim-task:{T}/7"),
    ("reportException", RUN_PATH, {}, f"queue:resolve-task:{T}/7"),
    (
        "declareWorker",
        WORKER_PATH,
        {"properties": ("expires",)},
        {"AllOf": ["queue:declare-worker:p/w/g/i#expires"]},
    ),
    ("declareWorker", WORKER_PATH, {"properties": ()}, {"AllOf": []}),
    ("quarantineWorker", WORKER_PATH, {}, "queue:quarantine-worker:p/w/g/i"),
    ("cancelTasks", {}, {}, "queue:manage:cancel-tasks"),
]


@pytest.mark.parametrize(("operation_id", "path", "supplied", "expected"), CASES)
def test_each_endpoint_declares_taskclusters_scopes(
    operation_id: str, path: dict[str, str], supplied: dict[str, Any], expected: Expression
) -> None:
    endpoint = _endpoint(operation_id)
    assert declared(endpoint, {**url_parameters(path), **supplied}) == expected


def test_the_batch_calls_declare_their_scopes_per_run() -> None:
    held = {"taskId": T, "runId": "0", "held": True, "workerGroup": "g", "workerId": "i"}
    assert declared(_endpoint("resolveRuns"), held, run=True) == {
        "AnyOf": [f"queue:resolve-task:{T}/0", "queue:worker-id:g/i"]
    }
    unheld = {"taskId": T, "runId": "0", "held": False}
    assert declared(_endpoint("reclaimRuns"), unheld, run=True) == {
        "AnyOf": [f"queue:reclaim-task:{T}/0"]
    }
    assert declared(_endpoint("watchRuns"), held, run=True) == {
        "AnyOf": [f"queue:reclaim-task:{T}/0", "queue:worker-id:g/i"]
    }
    claim_runs = _endpoint("claimRuns")
    assert declared(claim_runs, {"workerGroup": "g", "workerId": "i"}) == "queue:worker-id:g/i"
    assert declared(claim_runs, {"taskQueueId": "p/w"}, run=True) == "queue:claim-task:p/w"


def _scopes_of(expression: Expression) -> list[str]:
    if isinstance(expression, str):
        return [expression]
    return [scope for operand in next(iter(expression.values())) for scope in _scopes_of(operand)]


HELD_RUN = {"taskId": T, "runId": "0", "held": True, "workerGroup": "g", "workerId": "i"}
TEMPLATE_CASES = [
    (_endpoint(operation_id).scopes, {**url_parameters(path), **supplied})
    for operation_id, path, supplied, _ in CASES
] + [
    (_endpoint("resolveRuns").run_scopes, HELD_RUN),
    (_endpoint("reclaimRuns").run_scopes, {"taskId": T, "runId": "0", "held": False}),
    (_endpoint("watchRuns").run_scopes, HELD_RUN),
    (_endpoint("claimRuns").run_scopes, {"taskQueueId": "p/w"}),
    (
        CREATE_TASK_SCOPES,
        {
            "priorities": priority_ladder("high"),
            "provisionerId": "p",
            "workerType": "w",
            "schedulerId": "s",
            "projectId": "proj",
            "routes": ("r1", "r2"),
            "scopes": ("x:<y>", "secrets:get:a"),
        },
    ),
]


@pytest.mark.parametrize(("template", "params"), TEMPLATE_CASES)
def test_deciding_on_the_template_agrees_with_deciding_on_its_expansion(
    template: Any, params: dict[str, Any]
) -> None:
    expression = expand(template, params)
    scopes = _scopes_of(expression)
    candidates = [
        (),
        ("*",),
        ("queue:*",),
        ("queue:resolve-task:*", "queue:worker-id:g/*"),
        tuple(scopes),
        *((scope,) for scope in scopes),
        *((scope[: len(scope) // 2] + "*",) for scope in scopes),
        *((scope + "x",) for scope in scopes),
    ]
    for held in candidates:
        assert held_scopes(held).satisfy_template(template, params) == satisfies(held, expression)


def test_only_a_trailing_star_is_a_wildcard() -> None:
    held = held_scopes(("queue:cre*te", "a:b*", "exact"))
    assert held.grants("exact") and held.grants("a:b") and held.grants("a:bc*")
    assert not held.grants("queue:create") and not held.grants("exac") and not held.grants("a:")
    assert held.grants("queue:cre*te") and not held_scopes(()).grants("")


def test_create_tasks_requires_every_distinct_items_create_task_scopes() -> None:
    item = {
        "priorities": ("highest",),
        "provisionerId": "p",
        "workerType": "w",
        "schedulerId": "-",
        "projectId": "none",
        "routes": (),
        "scopes": (),
    }
    expression = declared(_endpoint("createTasks"), {"tasks": [item, {**item, "workerType": "v"}]})
    assert expression == {
        "AllOf": [
            expand(CREATE_TASK_SCOPES, item),
            expand(CREATE_TASK_SCOPES, {**item, "workerType": "v"}),
        ]
    }


def test_the_dispatch_checks_before_the_handler_only_what_the_path_supplies() -> None:
    assert {e.operation_id for e in ENDPOINTS if e.scopes_from_url} == {
        "pollTaskUrls",
        "reclaimTask",
        "reportCompleted",
        "reportFailed",
        "reportException",
        "reportProgress",
        "cancelTasks",
        "rerunTasks",
        "deleteTasks",
        "quarantineWorker",
        "pauseTaskQueue",
        "resumeTaskQueue",
        "setTaskQueueLimits",
        "setTaskQueueDefaults",
        "listRejectedInboxRows",
        "deleteRejectedInboxRow",
        "createArtifact",
        "finishArtifact",
        "listArtifacts",
        "listLatestArtifacts",
        "artifactInfo",
        "latestArtifactInfo",
    }


@pytest.mark.parametrize(
    ("scope", "valid"),
    [
        ("queue:create-task:*", True),
        ("", True),
        ("a b~", True),
        ("a\n", False),
        ("\n", False),
        ("é", False),
        ("a\tb", False),
        (3, False),
    ],
)
def test_a_scope_is_printable_ascii_to_its_last_character(scope: object, valid: bool) -> None:
    assert valid_scope(scope) is valid
