"""Tasks as Python functions end to end: a real coordinator process, a real ``queue-worker
--app tests.e2e.function_app:app`` process, and this test dispatching through a
:class:`worker_sdk.App` signed as root. Results and remote errors through ``result()``,
routing among several functions in one worker, malformed payloads, the sync forms from a
plain thread, a custom ``retry_with`` spacing the retries, and ``max_run_time``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import slugid

from coordinator.domain.records import from_iso
from coordinator.service.clients_file import ensure_root_client
from devharness.tasks import task_definition
from tests.e2e import function_app
from tests.fixtures.workers import E2E, MakeE2E
from worker_sdk import App, TaskFailed, TaskHandle
from worker_sdk.results import RESULT_ARTIFACT
from worker_sdk.run_log import RUN_LOG_NAME

APP = "tests.e2e.function_app:app"


@pytest.fixture
async def served(e2e: MakeE2E, request: pytest.FixtureRequest) -> AsyncIterator[tuple[E2E, App]]:
    """A coordinator with a worker process serving :data:`APP` with capacity 4 (and, through
    indirect parametrization, further command-line flags), and the test's own app of the
    same functions, signed as root."""
    s = await e2e(claim_work=False)
    task_queue = f"{s.provisioner_id}/{s.worker_type}"
    await s.start_worker(
        "fn",
        capacity=4,
        app=APP,
        env={function_app.TASK_QUEUE_ENV: task_queue},
        flags=getattr(request, "param", ()),
    )
    root = ensure_root_client(s.directory / "clients.json")
    app = App(
        root_url=s.root_url,
        credentials={"clientId": root.client_id, "accessToken": root.access_token},
        task_queue=task_queue,
    )
    function_app.register(app)
    async with app:
        yield s, app
    app.close()


def fn(app: App, function: Any) -> Any:
    """The app's registration of one of function_app's functions."""
    return app.functions[f"{function_app.__name__}:{function.__name__}"]


async def run_log(handle: TaskHandle, run_id: int = 0) -> str:
    content = await handle.connection.client().artifact_content(
        handle.task_id, run_id, RUN_LOG_NAME
    )
    return content.decode()


async def artifact_names(s: E2E, handle: TaskHandle, run_id: int = 0) -> set[str]:
    listed = await s.queue.listArtifacts(handle.task_id, run_id)
    return {artifact["name"] for artifact in listed["artifacts"]}


async def test_one_worker_routes_functions_and_returns_results_and_remote_errors(
    served: tuple[E2E, App],
) -> None:
    s, app = served
    sums = await fn(app, function_app.add).dispatch_many([(n, n) for n in range(5)])
    shouted = await fn(app, function_app.shout).dispatch("hey", times=2)
    quarter = await fn(app, function_app.divide).dispatch(1, 4)
    by_zero = await fn(app, function_app.divide).dispatch(1, 0)
    unreturnable = await fn(app, function_app.unreturnable).dispatch()
    nothing = await fn(app, function_app.nothing).dispatch()
    at = datetime.now(UTC) + timedelta(seconds=2)
    later = await fn(app, function_app.add).dispatch(1, 1, at=at)
    assert [await h.result(timeout=30) for h in sums] == [0, 2, 4, 6, 8]
    assert await later.result(timeout=30) == 2
    started = (await s.status(later.task_id))["runs"][0]["started"]
    assert from_iso(started) >= int(at.timestamp() * 1000), (started, at)  # not before then
    assert await shouted.result(timeout=30) == "HEY HEY"
    assert await quarter.result(timeout=30) == 0.25
    assert await nothing.result(timeout=30) is None
    assert RESULT_ARTIFACT not in await artifact_names(s, nothing), "None uploads nothing"
    assert RESULT_ARTIFACT in await artifact_names(s, quarter)
    # a plain function's logging is in its run's log, beside the worker's own lines
    assert "dividing 1 by 4" in await run_log(quarter)

    with pytest.raises(TaskFailed) as failed:
        await by_zero.result(timeout=30)
    assert (failed.value.state, failed.value.reason) == ("failed", "failed")
    assert failed.value.type == "builtins.ZeroDivisionError"
    assert failed.value.message == "division by zero"
    assert failed.value.traceback is not None and "return x / y" in failed.value.traceback
    assert "ZeroDivisionError: division by zero" in await run_log(by_zero)

    with pytest.raises(TaskFailed) as not_json:
        await unreturnable.result(timeout=30)
    assert not_json.value.type == "builtins.TypeError"
    assert "the return value is not JSON" in not_json.value.message
    # every function ran in the one worker process
    assert {(await s.runs(h.task_id))[-1][3] for h in [*sums, shouted, by_zero]} == {"fn"}


MALFORMED = [
    ({"function": "tests.e2e.function_app:nowhere", "args": []}, "unknown function"),
    (
        {"function": "tests.e2e.function_app:add", "args": [1, 2, 3]},
        "the arguments do not bind to tests.e2e.function_app:add(x: 'int', y: 'int')",
    ),
    ({"function": "tests.e2e.function_app:add", "args": {"x": 1}}, '"args" is not a list'),
    ({"command": "ls"}, "the payload is not a function call"),
]
"""Payloads the worker cannot call anything with, and what it says about each."""


async def test_a_payload_that_calls_nothing_served_is_malformed(
    served: tuple[E2E, App],
) -> None:
    s, app = served
    handles = []
    for payload, _ in MALFORMED:
        task_id = slugid.nice()
        definition = task_definition(
            provisionerId=s.provisioner_id, workerType=s.worker_type, payload=payload
        )
        await s.queue.createTask(task_id, definition)
        handles.append(app.handle(task_id))
    for handle, (_, why) in zip(handles, MALFORMED, strict=True):
        with pytest.raises(TaskFailed) as failed:
            await handle.result(timeout=30)
        assert (failed.value.state, failed.value.reason) == ("exception", "malformed-payload")
        assert failed.value.type == "worker_sdk.errors.MalformedPayload"
        assert why in failed.value.message
        assert why in await run_log(handle)
        assert len(await s.runs(handle.task_id)) == 1  # never retried


async def test_the_sync_forms_dispatch_and_wait_from_a_plain_thread(
    served: tuple[E2E, App],
) -> None:
    _, app = served
    shout = fn(app, function_app.shout)

    def script() -> tuple[str, str]:  # no event loop in this thread
        handle = shout.dispatch_sync("from a thread")
        return handle.result_sync(timeout=30), handle.status_sync()

    assert await asyncio.to_thread(script) == ("FROM A THREAD", "completed")


async def test_a_custom_retry_block_spaces_the_retries_then_gives_up(
    served: tuple[E2E, App],
) -> None:
    s, app = served
    handle = await fn(app, function_app.always_failing).dispatch()
    with pytest.raises(TaskFailed) as failed:
        await handle.result(timeout=60)
    assert (failed.value.state, failed.value.type) == ("failed", "builtins.ValueError")
    runs = (await s.status(handle.task_id))["runs"]
    assert [(r["state"], r.get("reasonResolved")) for r in runs] == [
        *[("exception", "intermittent-task")] * 3,
        ("failed", "failed"),  # retry_with answered False: retries were left, none taken
    ]
    for before, after, delay in zip(runs[:-1], runs[1:], function_app.RETRY_DELAYS, strict=True):
        waited = (from_iso(after["started"]) - from_iso(before["resolved"])) / 1000
        assert waited >= delay, (waited, delay)
    assert "retryAfter=0.5" in await run_log(handle, 0)


async def test_max_run_time_cancels_the_function_and_fails_the_run(
    served: tuple[E2E, App],
) -> None:
    s, app = served
    handle = await fn(app, function_app.sleepy).dispatch(60)
    with pytest.raises(TaskFailed) as failed:
        await handle.result(timeout=30)
    assert failed.value.type == "worker_sdk.serving.RunTimeExceeded"
    assert (failed.value.state, failed.value.reason) == ("failed", "failed")
    log = await run_log(handle)
    assert "max_run_time of 1 s exceeded: tests.e2e.function_app:sleepy was cancelled" in log
    run = (await s.status(handle.task_id))["runs"][0]
    assert (from_iso(run["resolved"]) - from_iso(run["started"])) / 1000 < 20


@pytest.mark.parametrize("served", [("--isolation", "process")], indirect=True)
async def test_functions_run_alike_in_handler_processes(served: tuple[E2E, App]) -> None:
    """The pool's children import the app by its name; results, remote errors and a retry
    block's retryAfter cross back from them."""
    s, app = served
    total = await fn(app, function_app.add).dispatch(20, 22)
    by_zero = await fn(app, function_app.divide).dispatch(1, 0)
    failing = await fn(app, function_app.always_failing).dispatch()
    assert await total.result(timeout=30) == 42
    with pytest.raises(TaskFailed) as failed:
        await by_zero.result(timeout=30)
    assert failed.value.type == "builtins.ZeroDivisionError"
    with pytest.raises(TaskFailed):
        await failing.result(timeout=60)
    runs = (await s.status(failing.task_id))["runs"]
    assert len(runs) == len(function_app.RETRY_DELAYS) + 1
    for before, after, delay in zip(runs[:-1], runs[1:], function_app.RETRY_DELAYS, strict=True):
        assert (from_iso(after["started"]) - from_iso(before["resolved"])) / 1000 >= delay
