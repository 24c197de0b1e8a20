"""The producer side of tasks as Python functions (worker_sdk.App) against a real in-process
coordinator: the definitions ``dispatch`` writes, ``wait``/``at``, ``dispatch_many`` in
requests of 1,000, bad arguments refused at dispatch, and a handle's status and cancel.
Running the functions (results, errors, retries) is tests/e2e/test_functions_e2e.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coordinator.domain.records import from_iso
from tests.fixtures.coordinator import FakeClock, RunningCoordinator, StartCoordinator
from worker_sdk import App, DispatchRefused, RequestFailed, TaskHandle

QUEUE = "fn-prov/fn-wt"


async def add(x: int, y: int = 0) -> int:
    return x + y


def take(value: Any, *rest: Any, **options: Any) -> None:
    """Takes anything: what is JSON is decided by the checks, not the signature."""


def backoff(error: BaseException, retry_count: int) -> float:
    return 2.0**retry_count


@pytest.fixture
async def coordinator(start_coordinator: StartCoordinator) -> RunningCoordinator:
    return await start_coordinator(run_resolvers=False)


@pytest.fixture
async def app(coordinator: RunningCoordinator) -> AsyncIterator[App]:
    async with App(root_url=coordinator.url, credentials=None, task_queue=QUEUE) as made:
        made.task(add)
        made.task(take)
        yield made
    made.close()


async def definition(c: RunningCoordinator, handle: TaskHandle) -> dict[str, Any]:
    task: dict[str, Any] = await c.ok("GET", f"/task/{handle.task_id}")
    return task


async def test_dispatch_writes_the_call_and_the_apps_defaults(
    app: App, coordinator: RunningCoordinator
) -> None:
    before = datetime.now(UTC)
    handle = await app.functions[f"{__name__}:add"].dispatch(2, y=3)
    task = await definition(coordinator, handle)
    assert task["payload"] == {"function": f"{__name__}:add", "args": [2], "kwargs": {"y": 3}}
    assert task["taskQueueId"] == QUEUE
    assert task["metadata"]["name"] == f"{__name__}:add"
    created, deadline = from_iso(task["created"]), from_iso(task["deadline"])
    assert created >= int(before.timestamp() * 1000) - 1
    assert deadline - created == 24 * 3600 * 1000
    assert "notBefore" not in task and "retryDelay" not in task
    assert await handle.status() == "pending"


async def test_task_queue_overrides_the_functions_for_one_call(
    app: App, coordinator: RunningCoordinator
) -> None:
    add_fn = app.functions[f"{__name__}:add"]
    moved = await add_fn.dispatch(1, task_queue="prov/wt")
    assert (await definition(coordinator, moved))["taskQueueId"] == "prov/wt"
    assert (await definition(coordinator, await add_fn.dispatch(1)))["taskQueueId"] == QUEUE
    with pytest.raises(ValueError, match="no-slash"):
        await add_fn.dispatch(1, task_queue="no-slash")


async def test_per_function_defaults_reach_the_definition(
    app: App, coordinator: RunningCoordinator
) -> None:
    @app.task(
        task_queue="fn-prov/fn-other",
        priority="high",
        retries=7,
        retry_delay={"base": 2, "factor": 3, "max": 60},
        retry_priority="very-low",
        claim_timeout=45,
        retry_on=(ConnectionError,),
        retry_with=backoff,
        max_run_time=30,
        name="custom-name",
    )
    def fetch(url: str) -> str:
        return url

    @app.task(retry_delay=5)
    def constant(n: int) -> int:
        return n

    task = await definition(coordinator, await fetch.dispatch("https://example.com"))
    assert {k: task[k] for k in ("taskQueueId", "priority", "retries", "claimTimeout")} == {
        "taskQueueId": "fn-prov/fn-other",
        "priority": "high",
        "retries": 7,
        "claimTimeout": 45,
    }
    assert task["retryDelay"] == {"base": 2, "factor": 3, "max": 60}
    assert task["retryPriority"] == "very-low"
    assert task["payload"]["function"] == "custom-name"
    # a dispatch's own priority wins over the function's
    assert (await definition(coordinator, await fetch.dispatch("x", priority="low")))[
        "priority"
    ] == "low"
    assert (await definition(coordinator, await constant.dispatch(1)))["retryDelay"] == {
        "schedule": [5]
    }
    assert app.task_queues == (app.task_queue, fetch.options.task_queue)


async def test_wait_and_at_make_the_task_unclaimable_until_then(
    app: App, coordinator: RunningCoordinator
) -> None:
    later = datetime.now(UTC) + timedelta(minutes=10)
    waiting = await app.functions[f"{__name__}:add"].dispatch(1, wait=timedelta(minutes=5))
    timed = await app.functions[f"{__name__}:add"].dispatch(1, at=later)
    for handle, earliest in ((waiting, later - timedelta(minutes=5)), (timed, later)):
        task = await definition(coordinator, handle)
        not_before = from_iso(task["notBefore"])
        assert not_before >= int(earliest.timestamp() * 1000) - 1000
        # the deadline counts from when the task may first run
        assert from_iso(task["deadline"]) - not_before == 24 * 3600 * 1000
        refused = await coordinator.try_claim(handle.task_id, 0)
        assert refused.status == 409, refused.body
        assert "can't be claimed before" in refused.body["message"]
    now = await app.functions[f"{__name__}:add"].dispatch(1, wait=0)
    assert (await coordinator.try_claim(now.task_id, 0)).status == 200


async def test_wait_counts_on_the_coordinators_clock_not_the_producers(
    start_coordinator: StartCoordinator,
) -> None:
    clock = FakeClock()
    clock.advance(3 * 3600)  # the coordinator is three hours ahead of this producer
    c = await start_coordinator(clock=clock, run_resolvers=False)
    async with App(root_url=c.url, credentials=None, task_queue=QUEUE) as app:
        fn = app.task(add)
        waiting = await fn.dispatch(1, wait=60)
        with pytest.raises(ValueError, match="wait must be a time from now on"):
            await fn.dispatch(1, wait=-1)
    task = await definition(c, waiting)
    # the Date header has one-second resolution, and the calls take a moment
    assert clock.now + 58_000 <= from_iso(task["notBefore"]) <= clock.now + 61_000
    assert from_iso(task["deadline"]) - from_iso(task["notBefore"]) == 24 * 3600 * 1000
    assert (await c.ok("GET", f"/task/{waiting.task_id}/status"))["status"]["state"] == "pending"


async def test_dispatch_many_sends_2500_calls_in_three_requests(
    app: App, coordinator: RunningCoordinator
) -> None:
    async def create_tasks_requests() -> int:
        metrics = await coordinator.session.get(coordinator.url + "/metrics")
        text = await metrics.text()
        found = re.search(r'http_requests_total\{[^}]*name="createTasks"[^}]*\} (\S+)', text)
        return int(float(found.group(1))) if found else 0

    before = await create_tasks_requests()
    handles = await app.functions[f"{__name__}:add"].dispatch_many(
        [(n,) if n % 2 else {"x": n, "y": 1} for n in range(2500)], priority="low"
    )
    assert await create_tasks_requests() - before == 3
    assert len({h.task_id for h in handles}) == 2500
    for index in (0, 1, 999, 1000, 2499):
        task = await definition(coordinator, handles[index])
        assert task["priority"] == "low"
        expected = ([index], {}) if index % 2 else ([], {"x": index, "y": 1})
        assert (task["payload"]["args"], task["payload"]["kwargs"]) == expected
    counts = await coordinator.ok("GET", "/task-queues/fn-prov%2Ffn-wt/counts")
    assert counts["pending"] == 2500


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (({1, 2},), {}, "argument value is a set, not JSON"),
        ((datetime.now(UTC),), {}, "argument value is a datetime, not JSON"),
        ((1, object()), {}, r"argument rest\[0\] is a object, not JSON"),
        ((1,), {"when": {"nested": [1, {2}]}}, r"argument when\['nested'\]\[1\] is a set"),
        ((float("nan"),), {}, "argument value is nan, which JSON cannot hold"),
        (({1: "a"},), {}, "argument value has the key 1"),
    ],
)
async def test_arguments_that_are_not_json_are_a_type_error_at_dispatch(
    app: App, coordinator: RunningCoordinator, args: Any, kwargs: Any, message: str
) -> None:
    take = app.functions[f"{__name__}:take"]
    with pytest.raises(TypeError, match=message):
        await take.dispatch(*args, **kwargs)
    with pytest.raises(TypeError, match=message):
        await take.dispatch_many([args if not kwargs else {"value": 1, **kwargs}])
    counts = await coordinator.ok("GET", "/task-queues/fn-prov%2Ffn-wt/counts")
    assert counts["pending"] == 0


async def test_arguments_that_do_not_bind_are_a_type_error_at_dispatch(app: App) -> None:
    add = app.functions[f"{__name__}:add"]
    with pytest.raises(TypeError, match=f"{__name__}:add: missing a required argument: 'x'"):
        await add.dispatch(y=2)
    with pytest.raises(TypeError, match="call 1 of dispatch_many is a int"):
        await add.dispatch_many([(1,), 2])  # type: ignore[list-item]


async def test_cancel_and_status_through_the_handle(
    app: App, coordinator: RunningCoordinator
) -> None:
    handle = await app.functions[f"{__name__}:add"].dispatch(1)
    assert await handle.status() == "pending"
    await handle.cancel()
    assert await handle.status() == "exception"
    with pytest.raises(Exception, match="ended exception/canceled") as failed:
        await handle.result(timeout=5)
    assert type(failed.value).__name__ == "TaskFailed"
    assert failed.value.type is None  # type: ignore[attr-defined]


async def test_the_sync_forms_work_from_a_plain_thread(
    app: App, coordinator: RunningCoordinator
) -> None:
    add = app.functions[f"{__name__}:add"]
    seen: dict[str, Any] = {}

    def view() -> None:  # as a Flask view would: no event loop in this thread
        handle = add.dispatch_sync(4, y=5)
        seen["status"] = handle.status_sync()
        seen["many"] = add.dispatch_many_sync([(1,), (2,)])
        seen["task_id"] = handle.task_id

    # in a thread of its own, while this loop serves the in-process coordinator
    await asyncio.wait_for(asyncio.to_thread(view), timeout=30)
    assert seen["status"] == "pending" and len(seen["many"]) == 2
    task = await definition(coordinator, app.handle(seen["task_id"]))
    assert task["payload"]["kwargs"] == {"y": 5}
    with pytest.raises(RuntimeError, match="on a running event loop, await the async forms"):
        add.dispatch_sync(1)


async def test_tasks_the_coordinator_refuses_raise_request_failed_saying_why(app: App) -> None:
    add = app.functions[f"{__name__}:add"]
    missing = "AAAAAAAAQAeAAAAAAAAAAA"  # a taskId nobody created
    with pytest.raises(RequestFailed) as single:
        await add.dispatch(1, dependencies=[missing])
    assert single.value.status == 400 and missing in single.value.message
    with pytest.raises(DispatchRefused) as many:
        await add.dispatch_many([(1,), (2,)], dependencies=[missing])
    assert "2 of 2 tasks refused; call 0" in many.value.message and missing in many.value.message
    assert (sorted(many.value.refusals), many.value.created) == ([0, 1], [])
    assert missing in many.value.refusals[1]["message"]


async def test_dispatch_with_a_key_returns_the_handle_of_the_task_holding_it(
    app: App, coordinator: RunningCoordinator
) -> None:
    add = app.functions[f"{__name__}:add"]
    first = await add.dispatch(1, key="sum:1", deduplication_ttl=timedelta(seconds=90.5))
    task = await definition(coordinator, first)
    assert (task["deduplicationKey"], task["deduplicationTtl"]) == ("sum:1", 91)
    again = await add.dispatch(2, key="sum:1")
    assert again.task_id == first.task_id
    assert (await definition(coordinator, again))["payload"]["args"] == [1]
    other = await add.dispatch(1, key="sum:2")
    assert other.task_id != first.task_id
    seen: dict[str, str] = {}

    def view() -> None:  # the sync form, from a thread without an event loop
        seen["task_id"] = add.dispatch_sync(3, key="sum:1").task_id

    await asyncio.wait_for(asyncio.to_thread(view), timeout=30)
    assert seen["task_id"] == first.task_id


async def test_bad_keys_are_refused_before_or_by_the_coordinator(app: App) -> None:
    add = app.functions[f"{__name__}:add"]
    with pytest.raises(ValueError, match="deduplication_ttl needs a key"):
        await add.dispatch(1, deduplication_ttl=60)
    with pytest.raises(ValueError, match="deduplication_ttl must be a time from 0 on"):
        await add.dispatch(1, key="k", deduplication_ttl=-1)
    with pytest.raises(RequestFailed) as refused:
        await add.dispatch(1, key="k" * 256)
    assert refused.value.status == 400 and "deduplicationKey" in refused.value.message


async def test_dispatch_with_a_concurrency_key_writes_it_and_a_bad_one_is_refused(
    app: App, coordinator: RunningCoordinator
) -> None:
    add = app.functions[f"{__name__}:add"]
    keyed = await add.dispatch(1, concurrency_key="customer:42")
    assert (await definition(coordinator, keyed))["concurrencyKey"] == "customer:42"
    assert "concurrencyKey" not in await definition(coordinator, await add.dispatch(1))
    with pytest.raises(RequestFailed) as refused:
        await add.dispatch(1, concurrency_key="")
    assert refused.value.status == 400 and "concurrencyKey" in refused.value.message
