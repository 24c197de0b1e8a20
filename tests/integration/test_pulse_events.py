"""Taskcluster's Pulse messages, received from the test broker as a Taskcluster user receives
them: bound with the official client's ``QueueEvents`` bindings, bodies checked against
Taskcluster's own message schemas (docs/events.md)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest
import slugid

from coordinator.api.endpoints import AUTH_PREFIX, HOOKS_PREFIX
from coordinator.domain.events import EXCHANGE_PREFIX, REFUSALS_BEFORE_PARKING, QueueEvent
from coordinator.pulse.publisher import PulsePublisher
from coordinator.service import tasks as tasks_module
from coordinator.service.event_outbox import EventOutbox
from coordinator.service.metrics import ServiceMetrics
from coordinator.store.base import Store
from devharness.ports import free_port
from devharness.waiting import wait_until
from tests.fixtures.coordinator import RunningCoordinator, StartCoordinator
from tests.fixtures.pulse import (
    AMQP_URL,
    Listener,
    Received,
    auth_bindings,
    bindings,
    check_body,
    hook_bindings,
)


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    listening = Listener()
    yield listening
    await listening.close()


@pytest.fixture(params=[False, True], ids=["publisher-process", "in-process"])
async def coordinator(
    start_coordinator: StartCoordinator, request: pytest.FixtureRequest
) -> RunningCoordinator:
    """A coordinator publishing from its child process, and one publishing on its own loop
    (``COORDINATOR_PULSE_IN_PROCESS``)."""
    return await start_coordinator(pulse_url=AMQP_URL, pulse_in_process=request.param)


def of_task(messages: list[Received], task_id: str) -> list[tuple[str, int | None]]:
    return [
        (m.name, m.body.get("runId"))
        for m in messages
        if m.body.get("status", {}).get("taskId") == task_id
    ]


async def test_a_task_life_is_published_with_its_keys_cc_and_valid_bodies(
    coordinator: RunningCoordinator, listener: Listener
) -> None:
    group = slugid.nice()
    route = f"tests.{slugid.nice()}"
    await listener.start(bindings(taskGroupId=group))
    task_id = await coordinator.create(taskGroupId=group, routes=[route], tags={"kind": "x"})
    await coordinator.claim(task_id, 0)
    await coordinator.report(task_id, 0, "completed")
    await listener.wait_for(lambda ms: len(of_task(ms, task_id)) >= 4)
    assert of_task(listener.messages, task_id) == [
        ("task-defined", None),
        ("task-pending", 0),
        ("task-running", 0),
        ("task-completed", 0),
    ]
    status = await coordinator.status(task_id)
    tail = f"test-prov.test-wt.test-scheduler.{group}._"
    of_it = [m for m in listener.messages if not m.name.startswith("task-group")]
    keys = [m.routing_key for m in of_it]
    assert keys == [
        f"primary.{task_id}._._._.{tail}".replace("test-scheduler", status["schedulerId"]),
        f"primary.{task_id}.0._._.{tail}".replace("test-scheduler", status["schedulerId"]),
        f"primary.{task_id}.0.wg.w1.{tail}".replace("test-scheduler", status["schedulerId"]),
        f"primary.{task_id}.0.wg.w1.{tail}".replace("test-scheduler", status["schedulerId"]),
    ]
    for message in of_it:
        check_body(message.name, message.body)
        assert message.cc == [f"route.{route}"]
        assert message.content_type == "application/json"
        assert message.persistent
        assert message.body["task"] == {"tags": {"kind": "x"}}
    assert of_it[-1].body["status"] == status
    # its group has no unresolved task left
    await listener.wait_for(lambda ms: ms[-1].name == "task-group-resolved")
    assert listener.messages[-1].routing_key == f"primary.{group}.{status['schedulerId']}._"
    assert listener.messages[-1].cc == []


async def test_routes_reach_who_binds_to_them(
    coordinator: RunningCoordinator, listener: Listener
) -> None:
    route = f"tests.{slugid.nice()}"
    exchange = "exchange/taskcluster-queue/v1/task-defined"
    await listener.start([(exchange, f"route.{route}")])
    task_id = await coordinator.create(routes=[route])
    await listener.wait_for(lambda ms: len(ms) >= 1)
    assert listener.messages[0].body["status"]["taskId"] == task_id


async def test_failed_exception_and_priority_messages(
    coordinator: RunningCoordinator, listener: Listener
) -> None:
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    failing = await coordinator.create(taskGroupId=group)
    await coordinator.claim(failing, 0)
    await coordinator.report(failing, 0, "failed")
    crashing = await coordinator.create(taskGroupId=group, retries=1)
    await coordinator.claim(crashing, 0)
    await coordinator.report(crashing, 0, "exception", "worker-shutdown")
    waiting = await coordinator.create(taskGroupId=group, priority="low")
    await coordinator.ok("POST", f"/task/{waiting}/priority", {"newPriority": "high"})
    await coordinator.ok("POST", f"/task/{waiting}/cancel")
    # 13 task messages, and task-group-resolved when the failing task, alone then, resolved
    await listener.wait_for(lambda ms: len(ms) >= 14)
    assert [m.name for m in listener.messages].count("task-group-resolved") == 1
    assert of_task(listener.messages, failing) == [
        ("task-defined", None),
        ("task-pending", 0),
        ("task-running", 0),
        ("task-failed", 0),
    ]
    assert of_task(listener.messages, crashing) == [
        ("task-defined", None),
        ("task-pending", 0),
        ("task-running", 0),
        ("task-exception", 0),
        ("task-pending", 1),
    ]
    assert of_task(listener.messages, waiting) == [
        ("task-defined", None),
        ("task-pending", 0),
        ("task-priority-changed", None),
        ("task-exception", 0),
    ]
    for message in listener.messages:
        check_body(message.name, message.body)
    changed = next(m for m in listener.messages if m.name == "task-priority-changed")
    assert (changed.body["oldPriority"], changed.body["newPriority"]) == ("low", "high")


async def test_a_repeated_claim_publishes_task_running_again(
    coordinator: RunningCoordinator, listener: Listener
) -> None:
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    task_id = await coordinator.create(taskGroupId=group)
    first = await coordinator.claim(task_id, 0)
    again = await coordinator.claim(task_id, 0)
    assert again["takenUntil"] == first["takenUntil"]
    await listener.wait_for(lambda ms: len(of_task(ms, task_id)) >= 4)
    assert of_task(listener.messages, task_id) == [
        ("task-defined", None),
        ("task-pending", 0),
        ("task-running", 0),
        ("task-running", 0),
    ]
    running = [m for m in listener.messages if m.name == "task-running"]
    assert running[0].body == running[1].body and running[0].routing_key == running[1].routing_key
    check_body("task-running", running[1].body)


async def test_a_group_priority_change_over_pages_closes_with_its_summary(
    coordinator: RunningCoordinator, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """changeTaskGroupPriority a page at a time: task-group-priority-changed counts every
    page's tasks and comes after the last task-priority-changed (written with that page)."""
    monkeypatch.setattr(tasks_module, "GROUP_PAGE", 2)
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    task_ids = [await coordinator.create(taskGroupId=group, priority="low") for _ in range(5)]
    await coordinator.ok("POST", f"/task-group/{group}/priority", {"newPriority": "high"})
    await listener.wait_for(lambda ms: any(m.name == "task-group-priority-changed" for m in ms))
    changed = [m for m in listener.messages if "priority-changed" in m.name]
    assert [m.name for m in changed] == ["task-priority-changed"] * 5 + [
        "task-group-priority-changed"
    ]
    assert {m.body["status"]["taskId"] for m in changed[:5]} == set(task_ids)
    assert changed[-1].body["tasksAffected"] == 5


async def test_hook_changes_are_published_as_the_hooks_service_publishes_them(
    coordinator: RunningCoordinator, listener: Listener
) -> None:
    group = f"g-{slugid.nice()}"
    await listener.start(hook_bindings())
    hook = f"/hooks/{group}/nightly%2Fbuild"
    body = {
        "metadata": {"name": "nightly", "description": "a hook", "owner": "me@example.com"},
        "task": {"taskQueueId": "test-prov/test-wt", "payload": {}},
    }
    for method, path, sent in [
        ("PUT", hook, body),
        ("PUT", hook, body),  # the same definition again: announced again, as Taskcluster
        ("POST", f"{hook}/token", None),  # a new trigger token is no change announced
        ("POST", hook, {**body, "schedule": ["0 0 * * *"]}),
        ("DELETE", hook, None),
        ("DELETE", hook, None),  # no such hook any more: announced again, as Taskcluster
    ]:
        await coordinator.ok(method, path, sent, prefix=HOOKS_PREFIX)

    def of_hook(ms: list[Received]) -> list[Received]:
        return [m for m in ms if m.body.get("hookGroupId") == group]

    await listener.wait_for(lambda ms: len(of_hook(ms)) >= 5)
    messages = of_hook(listener.messages)
    names = ["hook-created", "hook-created", "hook-updated", "hook-deleted", "hook-deleted"]
    assert [(m.exchange, m.routing_key, m.body) for m in messages] == [
        (
            f"exchange/taskcluster-hooks/v1/{name}",
            "_",
            {"hookGroupId": group, "hookId": "nightly/build"},
        )
        for name in names
    ]
    for message in messages:
        check_body(message.name, message.body)
        assert (message.cc, message.content_type, message.persistent) == (
            [],
            "application/json",
            True,
        )


async def test_client_and_role_changes_are_published_as_the_auth_service_publishes_them(
    coordinator: RunningCoordinator, listener: Listener
) -> None:
    client_id, role_id = f"c-{slugid.nice()}", f"r-{slugid.nice()}"
    await listener.start(auth_bindings())
    client = {"description": "d", "expires": "2999-01-01T00:00:00.000Z", "scopes": []}
    role = {"description": "d", "scopes": ["a"]}
    for method, path, sent in [
        ("PUT", f"/clients/{client_id}", client),
        ("POST", f"/clients/{client_id}", {**client, "description": "e"}),
        ("POST", f"/clients/{client_id}/disable", None),
        ("POST", f"/clients/{client_id}/reset", None),
        ("DELETE", f"/clients/{client_id}", None),
        ("PUT", f"/roles/{role_id}", role),
        ("POST", f"/roles/{role_id}", {**role, "scopes": ["b"]}),
        ("DELETE", f"/roles/{role_id}", None),
    ]:
        await coordinator.ok(method, path, sent, prefix=AUTH_PREFIX)

    def ours(ms: list[Received]) -> list[Received]:
        return [m for m in ms if client_id in m.body.values() or role_id in m.body.values()]

    await listener.wait_for(lambda ms: len(ours(ms)) >= 8)
    prefix = "exchange/taskcluster-auth/v1/"
    assert [(m.exchange, m.routing_key, m.body) for m in ours(listener.messages)] == [
        *(
            (prefix + name, "_", {"clientId": client_id, "version": 1})
            for name in ["client-created", *["client-updated"] * 3, "client-deleted"]
        ),
        *(
            (prefix + name, "_", {"roleId": role_id, "version": 1})
            for name in ["role-created", "role-updated", "role-deleted"]
        ),
    ]


async def test_publishing_off_writes_no_outbox(start_coordinator: StartCoordinator) -> None:
    coordinator = await start_coordinator()
    await coordinator.create()
    body = {"metadata": {"name": "h", "description": "d", "owner": "me@example.com"}, "task": {}}
    await coordinator.ok("PUT", "/hooks/g/h", body, prefix=HOOKS_PREFIX)
    await coordinator.ok("DELETE", "/hooks/g/h", prefix=HOOKS_PREFIX)
    assert coordinator.parts.events is None
    assert await coordinator.parts.store.outbox_depth() == 0


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:5672/", "is not an AMQP URL"),
        ("amqp://guest:guest@no-such-host.invalid:5672/", "unknown host 'no-such-host.invalid'"),
        ("amqp://guest:wrong@127.0.0.1:5672/", "refused the credentials"),
    ],
)
def test_a_bad_pulse_url_is_one_line_and_exit_status_2(tmp_path: Path, url: str, says: str) -> None:
    env = {
        **os.environ,
        "COORDINATOR_AUTH": "false",
        "COORDINATOR_DATA_DIR": str(tmp_path),
        "COORDINATOR_PORT": str(free_port()),
        "COORDINATOR_PULSE_URL": url,
    }
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "queue-coordinator:" in line]
    assert len(lines) == 1 and "COORDINATOR_PULSE_URL=" in lines[0] and says in lines[0]
    assert "wrong" not in done.stderr  # the password is never shown
    assert "Traceback" not in done.stderr


async def test_artifact_and_task_group_messages(
    coordinator: RunningCoordinator, listener: Listener
) -> None:
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group) + bindings(taskGroupId="*"))
    first = await coordinator.create(taskGroupId=group)
    second = await coordinator.create(taskGroupId=group)
    claim = await coordinator.claim(first, 0)
    expires = claim["status"]["expires"]
    await coordinator.ok(
        "POST",
        f"/task/{first}/runs/0/artifacts/public%2Fmissing",
        {
            "storageType": "error",
            "expires": expires,
            "reason": "file-missing-on-worker",
            "message": "no file",
        },
    )
    await coordinator.ok("POST", f"/task-group/{group}/priority", {"newPriority": "high"})
    await coordinator.ok("POST", f"/task-group/{group}/seal")
    await coordinator.report(first, 0, "completed")
    await coordinator.ok("POST", f"/task/{second}/cancel")

    def of_group(ms: list[Received]) -> list[str]:
        return [
            m.name for m in ms if m.name.startswith("task-group") and m.body["taskGroupId"] == group
        ]

    await listener.wait_for(lambda ms: "task-group-resolved" in of_group(ms))
    assert of_group(listener.messages) == [
        "task-group-priority-changed",
        "task-group-sealed",
        "task-group-resolved",
    ]
    # The "*" binding also brings other tests' messages (the broker is shared, and xdist runs
    # them alongside): only this group's are checked.
    ours = [m for m in listener.messages if group_of(m) == group]
    by_name = {m.name: m for m in ours}
    created = by_name["artifact-created"]
    assert created.body["artifact"]["name"] == "public/missing"
    assert (created.body["workerGroup"], created.body["workerId"]) == ("wg", "w1")
    assert created.routing_key.startswith(f"primary.{first}.0.wg.w1.")
    changed = by_name["task-group-priority-changed"]
    assert (changed.body["newPriority"], changed.body["tasksAffected"]) == ("high", 2)
    scheduler = (await coordinator.status(first))["schedulerId"]
    assert by_name["task-group-sealed"].routing_key == f"primary.{group}.{scheduler}._"
    assert "sealed" in by_name["task-group-resolved"].body
    for message in ours:
        check_body(message.name, message.body)


def group_of(message: Received) -> str | None:
    """The task group a queue message is about: its own field, or its task's status's."""
    body = message.body
    group = body.get("taskGroupId", body.get("status", {}).get("taskGroupId"))
    return group if isinstance(group, str) else None


async def test_metrics_and_per_task_order_of_a_batch(
    coordinator: RunningCoordinator, listener: Listener
) -> None:
    """createTasks and claims of many tasks at once: each task's messages in its order, and
    the counters and the outbox gauge on /metrics."""
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    task_ids = await coordinator.create_many(100, taskGroupId=group)
    await asyncio.gather(*(coordinator.claim(t, 0) for t in task_ids))
    await asyncio.gather(*(coordinator.report(t, 0, "completed") for t in task_ids))
    await listener.wait_for(lambda ms: sum(m.name == "task-completed" for m in ms) == 100)
    for task_id in task_ids:
        assert [name for name, _ in of_task(listener.messages, task_id)] == [
            "task-defined",
            "task-pending",
            "task-running",
            "task-completed",
        ]
    expected = [
        f'queue_events_published_total{{exchange="{exchange}"}} 100.0'
        for exchange in ("task-defined", "task-pending", "task-running", "task-completed")
    ] + ["queue_event_outbox_depth 0.0"]

    async def counted() -> bool:
        # the broker confirms to the publisher after it delivers to the listener
        async with coordinator.session.get(coordinator.url + "/metrics") as response:
            metrics = await response.text()
        return all(line in metrics for line in expected)

    await wait_until(counted, within=10, what="the counters and the gauge")


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
async def test_publishing_from_a_postgresql_store(
    start_coordinator: StartCoordinator, store_url: str, listener: Listener
) -> None:
    coordinator = await start_coordinator(pulse_url=AMQP_URL, store_url=store_url)
    group = slugid.nice()
    await listener.start(bindings(taskGroupId=group))
    task_id = await coordinator.create(taskGroupId=group)
    await coordinator.claim(task_id, 0)
    await coordinator.report(task_id, 0, "completed")
    await listener.wait_for(lambda ms: len(of_task(ms, task_id)) >= 4)
    assert [name for name, _ in of_task(listener.messages, task_id)] == [
        "task-defined",
        "task-pending",
        "task-running",
        "task-completed",
    ]
    # deleted once confirmed (the listener may hear of it first), task-group-resolved too
    store = coordinator.parts.store
    await wait_until(lambda: _empty(store), within=10, what="an empty outbox")


async def _empty(store: Store) -> bool:
    return await store.outbox_depth() == 0


async def test_a_message_the_broker_always_refuses_is_parked_and_the_rest_goes_on(
    store: Store, listener: Listener, caplog: pytest.LogCaptureFixture
) -> None:
    """A queue that refuses every message (full, ``reject-publish``) is bound to one task's
    route: the broker nacks that task's message each time. It is retried with backoff (its
    task's later message waiting behind it), parked after the last refusal (one log line
    with its taskId, a counter), and the outbox goes on."""
    poison, route = slugid.nice(), f"poison-{slugid.nice()}"
    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel()
    full = await channel.declare_queue(
        exclusive=True, arguments={"x-max-length": 0, "x-overflow": "reject-publish"}
    )
    pending = await channel.declare_exchange(
        EXCHANGE_PREFIX + "task-pending", aio_pika.ExchangeType.TOPIC, durable=True
    )
    await full.bind(pending, routing_key=f"route.{route}")
    await listener.start([(EXCHANGE_PREFIX + "task-pending", f"primary.{poison}.#")])

    def message(n: int, cc: tuple[str, ...] = ()) -> QueueEvent:
        return QueueEvent(
            exchange="task-pending",
            key=poison,
            routing_key=f"primary.{poison}.{n}._._.p.w.s.g._",
            cc=cc,
            body={"n": n},
        )

    await store.append_events([message(0, (f"route.{route}",)), message(1)])
    now = [1_700_000_000_000]
    metrics = ServiceMetrics()
    publisher = PulsePublisher(AMQP_URL)
    outbox = EventOutbox(store=store, publisher=publisher, metrics=metrics, clock=lambda: now[0])
    try:
        for _ in range(REFUSALS_BEFORE_PARKING):
            assert await outbox.publish_batch(10) == 0
            now[0] += 3_600_000  # past the backoff
        assert await outbox.publish_batch(10) == 1
        await listener.wait_for(lambda ms: len(ms) == 2 * REFUSALS_BEFORE_PARKING + 1)
    finally:
        await publisher.close()
        await connection.close()
    # message 1 went out with each try of message 0 (the listener is not behind the full
    # queue), and once more after it was parked
    assert [m.body["n"] for m in listener.messages] == [0, 1] * REFUSALS_BEFORE_PARKING + [1]
    assert await store.outbox_depth() == 0
    parked = [r for r in caplog.records if "pulse message parked" in r.getMessage()]
    assert len(parked) == 1 and f"key={poison} " in parked[0].getMessage()
    assert (
        metrics.registry.get_sample_value("queue_events_parked_total", {"exchange": "task-pending"})
        == 1
    )
