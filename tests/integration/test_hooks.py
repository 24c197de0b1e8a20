"""The hooks service (docs/hooks.md) through the official ``taskcluster.Hooks`` client, against an
in-process coordinator with authentication on: every method, the scopes it checks, the 400s of
bad input, ``hooks_fires_total``, and the scheduler's pass on an injected clock (each due time
once, a missed one once). Replicas and a SIGKILL are tests/e2e/test_hooks.py's."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import slugid
from prometheus_client.parser import text_string_to_metric_families

from coordinator.domain.hooks import fire_task_id
from coordinator.domain.records import to_iso
from coordinator.resolvers import hook_scheduler
from coordinator.service.clock import wall_clock
from tests.fixtures.clients import Hooks, Queue, missing_scopes, rejected, start_secured
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator

PROV, WT = "hooks-prov", "wt"
POOL = f"{PROV}/{WT}"
TASK_SCOPES = [f"queue:create-task:lowest:{POOL}", "queue:scheduler-id:-"]
"""What a hook's tasks need (projectId none: queue:create-task:project:none too)."""
METADATA = {"name": "nightly", "description": "a test hook", "owner": "me@example.com"}


def template(**payload: Any) -> dict[str, Any]:
    """A task template whose payload holds the fire's context."""
    return {
        "provisionerId": PROV,
        "workerType": WT,
        "payload": {"firedBy": "${firedBy}", "taskId": "${taskId}", **payload},
        "metadata": {
            "name": "hook task",
            "description": "made by a hook",
            "owner": "me@example.com",
            "source": "https://example.com/hooks",
        },
    }


def hook_body(**fields: Any) -> dict[str, Any]:
    return {"metadata": METADATA, "task": template(), **fields}


async def secured(
    start_coordinator: StartCoordinator, tmp_path: Path, **overrides: Any
) -> tuple[RunningCoordinator, dict[str, dict[str, str]]]:
    return await start_secured(
        start_coordinator,
        tmp_path / "clients.json",
        {
            "admin": ["hooks:*", "assume:hook-id:*", *TASK_SCOPES, "queue:create-task:project:*"],
            # may manage hooks but not create their tasks
            "weak": ["hooks:*", "assume:hook-id:*"],
            "reader": ["hooks:get:*", "hooks:list-hooks:*"],
        },
        **overrides,
    )


@pytest.mark.parametrize("kind", ["sync", "aio"])
async def test_every_hooks_method_through_the_official_client(
    kind: str, start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    hooks = Hooks(kind, coordinator.url, creds["admin"])
    queue = Queue(kind, coordinator.url)
    group = f"g-{kind}"

    assert (await Hooks(kind, coordinator.url).ping())["alive"] is True
    schema = {"type": "object", "properties": {"colour": {"type": "string"}}}
    body = hook_body(
        schedule=["0 0 0 * * *"],
        task=template(colour="${payload.colour}"),
        triggerSchema=schema,
    )
    created = await hooks.createHook(group, "nightly/build", body)
    assert created["hookId"] == "nightly/build" and created["schedule"] == ["0 0 0 * * *"]
    assert created["metadata"]["emailOnError"] is True and created["bindings"] == []
    assert await hooks.createHook(group, "nightly/build", body) == created  # idempotent
    status, error = await rejected(
        hooks.createHook(group, "nightly/build", hook_body(schedule=["0 0 1 * * *"]))
    )
    assert (status, error["code"]) == (409, "RequestConflict")

    assert await hooks.hook(group, "nightly/build") == created
    assert (await hooks.listHooks(group))["hooks"] == [created]
    assert group in (await hooks.listHookGroups())["groups"]
    hook_status = await hooks.getHookStatus(group, "nightly/build")
    assert hook_status["lastFire"] == {"result": "no-fire"}
    assert hook_status["nextScheduledDate"].endswith("T00:00:00.000Z")

    # triggerHook: the payload is rendered into the task
    fired = await hooks.triggerHook(group, "nightly/build", {"colour": "red"})
    task = await queue.task(fired["taskId"])
    assert fired["status"] == {"taskId": fired["taskId"]}
    assert task["payload"] == {"firedBy": "triggerHook", "taskId": fired["taskId"], "colour": "red"}
    assert task["taskGroupId"] == fired["taskId"]  # Taskcluster's default for hook tasks
    chosen = slugid.nice()
    assert (await hooks.triggerHook(group, "nightly/build", {"taskId": chosen, "colour": "blue"}))[
        "taskId"
    ] == (chosen)

    # trigger tokens
    token = (await hooks.getTriggerToken(group, "nightly/build"))["token"]
    anonymous = Hooks(kind, coordinator.url)
    by_token = await anonymous.triggerHookWithToken(
        group, "nightly/build", token, {"colour": "green"}
    )
    assert (await queue.task(by_token["taskId"]))["payload"]["firedBy"] == "triggerHookWithToken"
    new_token = (await hooks.resetTriggerToken(group, "nightly/build"))["token"]
    assert new_token != token
    for wrong in (token, "jeton-é"):  # the old one, and one no token could be
        status, error = await rejected(
            anonymous.triggerHookWithToken(group, "nightly/build", wrong, {})
        )
        assert (status, error["code"]) == (401, "AuthenticationFailed")

    fires = (await hooks.listLastFires(group, "nightly/build"))["lastFires"]
    assert {f["taskId"] for f in fires} == {fired["taskId"], chosen, by_token["taskId"]}
    assert {f["result"] for f in fires} == {"success"} and {f["taskState"] for f in fires} == {
        "pending"
    }
    first_page = await hooks.listLastFires(group, "nightly/build", query={"limit": 2})
    assert len(first_page["lastFires"]) == 2
    rest = await hooks.listLastFires(
        group,
        "nightly/build",
        query={"limit": 2, "continuationToken": first_page["continuationToken"]},
    )
    assert [f["taskId"] for f in first_page["lastFires"] + rest["lastFires"]] == [
        f["taskId"] for f in fires
    ]
    assert (await hooks.getHookStatus(group, "nightly/build"))["lastFire"]["result"] == "success"

    # updateHook keeps the token and schedules afresh; removeHook deletes it and its fires
    updated = await hooks.updateHook(group, "nightly/build", hook_body(schedule=[]))
    assert updated["schedule"] == [] and updated["triggerSchema"] == {
        "type": "object",
        "additionalProperties": False,
    }
    assert "nextScheduledDate" not in await hooks.getHookStatus(group, "nightly/build")
    assert (await hooks.getTriggerToken(group, "nightly/build"))["token"] == new_token
    assert await hooks.removeHook(group, "nightly/build") is not None
    status, error = await rejected(hooks.hook(group, "nightly/build"))
    assert (status, error["code"]) == (404, "ResourceNotFound")
    status, _ = await rejected(hooks.listLastFires(group, "nightly/build"))
    assert status == 404


async def test_scopes_are_checked_as_taskcluster_checks_them(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    admin = Hooks("aio", coordinator.url, creds["admin"])
    reader = Hooks("aio", coordinator.url, creds["reader"])
    weak = Hooks("aio", coordinator.url, creds["weak"])
    await admin.createHook("g", "h", hook_body())

    status, error = await rejected(reader.createHook("g", "other", hook_body()))
    assert status == 403 and missing_scopes(error).count("hooks:modify-hook:g/other")
    status, error = await rejected(reader.triggerHook("g", "h", {}))
    assert (status, missing_scopes(error)) == (403, "hooks:trigger-hook:g/h")
    status, error = await rejected(reader.getTriggerToken("g", "h"))
    assert (status, missing_scopes(error)) == (403, "hooks:get-trigger-token:g/h")
    assert (await reader.hook("g", "h"))["hookId"] == "h"
    status, _ = await rejected(Hooks("aio", coordinator.url).hook("g", "h"))
    assert status == 401  # no credentials for a method that needs scopes

    # The hook's tasks get the scopes of the client that last created or updated it.
    await weak.updateHook("g", "h", hook_body())
    status, error = await rejected(admin.triggerHook("g", "h", {}))
    assert (status, error["code"]) == (403, "InsufficientScopes")
    assert (
        "hook-id:g/h" in error["message"]
        and f"queue:create-task:lowest:{POOL}" in (error["message"])
    )
    [fire] = (await admin.listLastFires("g", "h"))["lastFires"]
    assert fire["result"] == "error" and f"queue:create-task:lowest:{POOL}" in fire["error"]
    assert fire["taskState"] == "unknown"
    assert (await admin.getHookStatus("g", "h"))["lastFire"]["result"] == "error"
    assert await fires_counted(coordinator) == {("g", "error"): 1.0}


async def fires_counted(coordinator: RunningCoordinator) -> dict[tuple[str, str], float]:
    """``hooks_fires_total`` by (hookGroupId, result), from ``/metrics``."""
    async with coordinator.session.get(coordinator.url + "/metrics") as response:
        text = await response.text()
    return {
        (sample.labels["hookGroupId"], sample.labels["result"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "hooks_fires"
        for sample in family.samples
        if sample.name == "hooks_fires_total"
    }


@pytest.mark.parametrize(
    ("body", "payload", "named"),
    [
        (hook_body(schedule=["*/2 * * * * *", "61 * * * *"]), None, "schedule[1]"),
        (hook_body(schedule=["not cron"]), None, "schedule[0]"),
        (hook_body(task={"$let": 1}), None, "task"),
        (hook_body(task={"a": {"$unknown": 1}}), None, "task"),
        (hook_body(triggerSchema={"type": "nothing"}), None, "triggerSchema"),
        (hook_body(metadata={"name": "x"}), None, "metadata"),
        (hook_body(hookId="other"), None, "hookId"),
        (hook_body(), {"unexpected": 1}, "payload"),
        (hook_body(triggerSchema={"type": "object"}), {"taskId": "x"}, "payload.taskId"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    body: dict[str, Any],
    payload: dict[str, Any] | None,
    named: str,
    start_coordinator: StartCoordinator,
    tmp_path: Path,
) -> None:
    coordinator, creds = await secured(start_coordinator, tmp_path)
    hooks = Hooks("aio", coordinator.url, creds["admin"])
    if payload is None:
        status, error = await rejected(hooks.createHook("g", "h", body))
    else:
        await hooks.createHook("g", "h", body)
        status, error = await rejected(hooks.triggerHook("g", "h", payload))
    assert status == 400, error
    assert named in error["message"], error["message"]


async def test_each_due_time_fires_once_and_a_missed_one_once(
    start_coordinator: StartCoordinator, tmp_path: Path
) -> None:
    # On a whole minute, due times fall on :00; near the wall clock, or Hawk refuses the
    # requests' timestamps.
    minute = 60_000
    clock = FakeClock(start=wall_clock() // minute * minute)
    start = clock.now
    coordinator, creds = await secured(
        start_coordinator, tmp_path, clock=clock, run_resolvers=False
    )
    hooks = Hooks("aio", coordinator.url, creds["admin"])
    queue = Queue("aio", coordinator.url)
    await hooks.createHook("g", "minutely", hook_body(schedule=["0 * * * * *"]))
    service = coordinator.parts.hooks

    assert await hook_scheduler.run_once(service) == 0  # not due yet
    clock.advance(60)
    assert await hook_scheduler.run_once(service) == 1
    first = fire_task_id("g", "minutely", start + minute)
    task = await queue.task(first)
    assert task["created"] == to_iso(start + minute)
    assert task["payload"]["firedBy"] == "schedule"
    assert await hook_scheduler.run_once(service) == 0  # advanced: that minute is done

    clock.advance(3 * 60 + 30)  # down for three periods, back mid-minute
    assert await hook_scheduler.run_once(service) == 1
    assert await hook_scheduler.run_once(service) == 0
    missed = fire_task_id("g", "minutely", start + 2 * minute)
    fires = (await hooks.listLastFires("g", "minutely"))["lastFires"]
    assert [f["taskId"] for f in fires] == [missed, first]
    status = await hooks.getHookStatus("g", "minutely")
    assert status["nextScheduledDate"] == to_iso(start + 5 * minute)

    # A fire repeated after a crash (its due time not advanced) creates nothing new.
    hook = await service.get("g", "minutely")
    await service.store.compare_and_set_hook(dataclasses.replace(hook, next_due=start + 2 * minute))
    assert await hook_scheduler.run_once(service) == 1
    assert [f["taskId"] for f in (await hooks.listLastFires("g", "minutely"))["lastFires"]] == [
        missed,
        first,
    ]
    assert await fires_counted(coordinator) == {("g", "success"): 2.0}  # the repeat uncounted
