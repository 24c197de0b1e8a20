"""Taskcluster's Pulse messages of each change (coordinator.domain.events): exchanges, routing
keys as ``taskcluster.QueueEvents`` binds them, CCs, and bodies valid against Taskcluster's
message schemas."""

from __future__ import annotations

import re

import pytest

from coordinator.domain import lifecycle
from coordinator.domain.artifacts import Artifact, StorageType
from coordinator.domain.events import (
    HOOK_EXCHANGES,
    QueueEvent,
    artifact_event,
    group_event,
    hook_event,
    task_events,
    task_routing_key,
)
from coordinator.domain.lifecycle import Timing
from coordinator.domain.records import TaskRecord, record_from_definition, to_iso
from coordinator.domain.task_groups import TaskGroup
from tests.fixtures.pulse import bindings, check_body, hook_bindings
from tests.fixtures.records import NOW, definition

TIMING = Timing(claim_timeout_ms=20 * 60_000)


def new(task_id: str = "NbjMAHgAQTqW_7p84Qpqag", **fields: object) -> TaskRecord:
    body = {**definition(group="VukouGHASlCK6peuaz5LeA"), "routes": ["index.a", "b.c"], **fields}
    return record_from_definition(task_id, body)


def matches(pattern: str, key: str) -> bool:
    """AMQP topic matching: ``*`` one word, ``#`` zero or more."""
    words = []
    for word in pattern.split("."):
        words.append(r"[^.]*" if word == "*" else r".*" if word == "#" else re.escape(word))
    return re.fullmatch(r"\.".join(words).replace(r"\..*", r"(\..*)?"), key) is not None


def life() -> list[tuple[TaskRecord | None, TaskRecord]]:
    created = lifecycle.create(new(), now=NOW).record
    claimed = lifecycle.claim(
        created, run_id=0, worker_group="wg", worker_id="w1", now=NOW, timing=TIMING
    ).record
    done = lifecycle.report(
        claimed, run_id=0, state="completed", reason="completed", now=NOW, timing=TIMING
    ).record
    return [(None, created), (created, claimed), (claimed, done)]


def test_a_task_life_in_messages() -> None:
    events = [e for before, after in life() for e in task_events(before, after)]
    assert [e.exchange for e in events] == [
        "task-defined",
        "task-pending",
        "task-running",
        "task-completed",
    ]
    assert [e.routing_key for e in events] == [
        "primary.NbjMAHgAQTqW_7p84Qpqag._._._.prov.wt.tests.VukouGHASlCK6peuaz5LeA._",
        "primary.NbjMAHgAQTqW_7p84Qpqag.0._._.prov.wt.tests.VukouGHASlCK6peuaz5LeA._",
        "primary.NbjMAHgAQTqW_7p84Qpqag.0.wg.w1.prov.wt.tests.VukouGHASlCK6peuaz5LeA._",
        "primary.NbjMAHgAQTqW_7p84Qpqag.0.wg.w1.prov.wt.tests.VukouGHASlCK6peuaz5LeA._",
    ]
    for event in events:
        assert event.cc == ("route.index.a", "route.b.c")
        assert event.key == "NbjMAHgAQTqW_7p84Qpqag"
        check_body(event.exchange, event.body)
    defined, _, running, completed = events
    assert defined.body["status"]["state"] == "unscheduled"
    assert defined.body["status"]["runs"] == []
    assert "runId" not in defined.body
    assert running.body["takenUntil"] == to_iso(NOW + TIMING.claim_timeout_ms)
    assert completed.body["status"]["state"] == "completed"


def test_each_routing_key_matches_the_official_clients_bindings() -> None:
    events = [e for before, after in life() for e in task_events(before, after)]
    patterns = dict(bindings(taskGroupId="VukouGHASlCK6peuaz5LeA", workerId="w1"))
    for event in events:
        pattern = patterns[event.exchange_name]
        if event.exchange in ("task-defined", "task-pending"):
            # bound by workerId: only the messages that have one
            assert not matches(pattern, event.routing_key)
        else:
            assert matches(pattern, event.routing_key), (pattern, event.routing_key)
    group_patterns = dict(bindings(taskGroupId="VukouGHASlCK6peuaz5LeA"))
    for event in events:
        assert matches(group_patterns[event.exchange_name], event.routing_key)


@pytest.mark.parametrize("exchange", HOOK_EXCHANGES)
def test_hook_messages_are_the_hooks_services(exchange: str) -> None:
    event = hook_event(exchange, "ci", "nightly/build")
    assert event.exchange_name == f"exchange/taskcluster-hooks/v1/{exchange}"
    assert event.body == {"hookGroupId": "ci", "hookId": "nightly/build"}
    assert (event.routing_key, event.cc, event.key) == ("_", (), "ci/nightly/build")
    check_body(exchange, event.body)
    pattern = dict(hook_bindings())[event.exchange_name]
    assert matches(pattern, event.routing_key)


@pytest.mark.parametrize(
    ("state", "exchange"), [("failed", "task-failed"), ("exception", "task-exception")]
)
def test_failed_and_exception(state: str, exchange: str) -> None:
    _, claimed = life()[1]
    result = lifecycle.report(
        claimed, run_id=0, state=state, reason="worker-shutdown", now=NOW, timing=TIMING
    ).record
    events = task_events(claimed, result)
    # worker-shutdown retries: the exception, then the new pending run, in run order
    names = [(e.exchange, e.body.get("runId")) for e in events]
    expected = [(exchange, 0)] + ([("task-pending", 1)] if state == "exception" else [])
    assert names == expected
    for event in events:
        check_body(event.exchange, event.body)
    assert events[0].body["workerId"] == "w1"


def test_nothing_changes_nothing_is_published() -> None:
    _, claimed = life()[1]
    reclaimed = lifecycle.reclaim(claimed, run_id=0, now=NOW + 1000, timing=TIMING).record
    assert task_events(claimed, reclaimed) == []


def test_priority_changed() -> None:
    created = life()[0][1]
    changed = lifecycle.change_priority(created, priority="high", now=NOW).record
    (event,) = task_events(created, changed)
    assert event.exchange == "task-priority-changed"
    assert (event.body["oldPriority"], event.body["newPriority"]) == ("lowest", "high")
    assert event.routing_key == task_routing_key(changed)
    check_body(event.exchange, event.body)


def test_artifact_created_and_never_for_s3() -> None:
    claimed = life()[1][1]

    def artifact(
        name: str, storage_type: StorageType, content_type: str, **details: str
    ) -> Artifact:
        return Artifact(
            task_id=claimed.task_id,
            run_id=0,
            name=name,
            storage_type=storage_type,
            content_type=content_type,
            expires=NOW + 1000,
            details=details,
            created=NOW,
        )

    error = artifact(
        "public/x", "error", "application/json", reason="file-missing-on-worker", message="m"
    )
    event = artifact_event(claimed, error)
    assert isinstance(event, QueueEvent)
    assert event.routing_key.startswith(f"primary.{claimed.task_id}.0.wg.w1.")
    check_body("artifact-created", event.body)
    assert artifact_event(claimed, artifact("public/y", "s3", "text/plain")) is None


def test_group_messages() -> None:
    group = TaskGroup(task_group_id="VukouGHASlCK6peuaz5LeA", scheduler_id="tests", expires=NOW)
    sealed = TaskGroup(
        task_group_id="VukouGHASlCK6peuaz5LeA", scheduler_id="tests", expires=NOW, sealed=NOW
    )
    for event in (
        group_event("task-group-resolved", group),
        group_event("task-group-sealed", sealed),
        group_event("task-group-priority-changed", group, newPriority="high", tasksAffected=3),
    ):
        assert event.routing_key == "primary.VukouGHASlCK6peuaz5LeA.tests._"
        assert event.cc == ()
        check_body(event.exchange, event.body)
