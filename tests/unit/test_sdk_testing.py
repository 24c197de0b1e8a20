"""worker_sdk.testing: an app's functions dispatched under ``inline(app)`` run in the process
with production's semantics (binding and JSON checks, retries, max_run_time, results and
TaskFailed), and the recorder says what was called and how each run ended."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta

import pytest

from worker_sdk import App, MalformedPayload, RequestFailed, TaskFailed
from worker_sdk.client import Resolution
from worker_sdk.testing import Recorder, inline

RETRY = Resolution(kind="exception", reason="intermittent-task")


def new_app() -> App:
    # an address nothing answers at: inline mode must never reach it
    return App(root_url="http://coordinator.invalid", credentials=None, task_queue="p/w")


async def test_a_call_runs_here_and_its_value_and_arguments_are_recorded() -> None:
    app = new_app()

    @app.task
    async def pair(first: list[int], *, second: str = "b") -> list[object]:
        return [first, second]

    @app.task
    def nothing() -> None:
        pass

    production = app.connection
    with inline(app) as recorder:
        handle = await pair.dispatch((1, 2), second="x")
        assert await handle.result() == [[1, 2], "x"]
        assert await handle.status() == "completed"
        assert await (await nothing.dispatch()).result() is None
    # the tuple crossed JSON, as it does to a worker
    assert recorder.calls(pair) == [(([1, 2],), {"second": "x"})]
    [run] = recorder.results(pair)
    assert (run.run_id, run.resolution, run.value) == (
        0,
        Resolution(kind="completed"),
        [[1, 2], "x"],
    )
    assert recorder.results(nothing)[0].value is None
    assert app.connection is production


async def test_bad_calls_are_refused_as_production_refuses_them() -> None:
    app = new_app()

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    with inline(app) as recorder:
        with pytest.raises(TypeError, match=r"argument y is a set, not JSON"):
            await add.dispatch(1, {2})
        with pytest.raises(TypeError, match=r"missing a required argument: 'y'"):
            await add.dispatch(1)
        with pytest.raises(ValueError, match="priority 'urgent' is not one of"):
            await add.dispatch(1, 2, priority="urgent")
        with pytest.raises(RequestFailed) as unknown:
            await app.handle("no-such-task").result()
    assert unknown.value.status == 404
    assert recorder.calls(add) == []


async def test_an_exception_fails_the_run_without_retries_or_retry_on() -> None:
    app = new_app()

    @app.task
    def divide(x: int) -> float:
        return 1 / x

    with inline(app) as recorder:
        handle = await divide.dispatch(0)
        with pytest.raises(TaskFailed) as failed:
            await handle.result()
    assert (failed.value.state, failed.value.reason) == ("failed", "failed")
    assert (failed.value.type, failed.value.message) == (
        "builtins.ZeroDivisionError",
        "division by zero",
    )
    assert "ZeroDivisionError" in (failed.value.traceback or "")
    assert [r.resolution for r in recorder.results(divide)] == [Resolution(kind="failed")]


async def test_retries_alone_retry_any_exception_and_the_last_run_fails() -> None:
    app = new_app()

    @app.task(retries=2)
    def divide(x: int) -> float:
        return 1 / x

    with inline(app) as recorder, pytest.raises(TaskFailed) as failed:
        await (await divide.dispatch(0)).result()
    assert (failed.value.state, failed.value.type) == ("failed", "builtins.ZeroDivisionError")
    assert [r.resolution for r in recorder.results(divide)] == [
        RETRY,
        RETRY,
        Resolution(kind="failed"),
    ]


async def test_retry_on_narrows_the_exceptions_retries_retry() -> None:
    app = new_app()

    @app.task(retries=2, retry_on=(ConnectionError,))
    def divide(x: int) -> float:
        return 1 / x

    with inline(app) as recorder, pytest.raises(TaskFailed):
        await (await divide.dispatch(0)).result()
    assert [r.resolution for r in recorder.results(divide)] == [Resolution(kind="failed")]


async def test_retry_on_runs_again_until_the_retries_run_out() -> None:
    app = new_app()
    attempts: list[int] = []

    @app.task(retries=2, retry_on=(ConnectionError,))
    async def flaky(succeed_at: int) -> str:
        attempts.append(len(attempts))
        if len(attempts) <= succeed_at:
            raise ConnectionError(f"attempt {len(attempts)}")
        return "ok"

    with inline(app) as recorder:
        assert await (await flaky.dispatch(2)).result() == "ok"
        attempts.clear()
        with pytest.raises(TaskFailed) as failed:
            await (await flaky.dispatch(5)).result()
    assert [r.resolution for r in recorder.results(flaky)] == [
        RETRY,
        RETRY,
        Resolution(kind="completed"),
        RETRY,
        RETRY,
        Resolution(kind="failed"),
    ]
    assert (failed.value.type, failed.value.message) == ("builtins.ConnectionError", "attempt 3")
    assert [r.run_id for r in recorder.results(flaky)[3:]] == [0, 1, 2]


async def test_retry_with_delays_are_recorded_not_waited_and_false_gives_up() -> None:
    app = new_app()

    def backoff(error: BaseException, retry_count: int) -> float | bool:
        return False if retry_count >= 2 else 3600.0 * (retry_count + 1)

    @app.task(retries=5, retry_with=backoff)
    async def always_fails() -> None:
        raise RuntimeError("no")

    with inline(app) as recorder, pytest.raises(TaskFailed):
        await asyncio.wait_for((await always_fails.dispatch()).result(), timeout=5)
    assert [r.resolution for r in recorder.results(always_fails)] == [
        Resolution(kind="exception", reason="intermittent-task", retry_after=3600.0),
        Resolution(kind="exception", reason="intermittent-task", retry_after=7200.0),
        Resolution(kind="failed"),
    ]


async def test_max_run_time_stops_the_run_and_is_never_retried() -> None:
    app = new_app()

    @app.task(max_run_time=0.05, retry_on=(Exception,))
    async def hangs() -> None:
        await asyncio.Event().wait()

    with inline(app) as recorder, pytest.raises(TaskFailed) as failed:
        await (await hangs.dispatch()).result()
    assert failed.value.type == "worker_sdk.serving.RunTimeExceeded"
    assert "max_run_time of 0.05 s exceeded" in failed.value.message
    assert [r.resolution for r in recorder.results(hangs)] == [Resolution(kind="failed")]


def test_max_run_time_abandons_a_plain_function_in_its_thread() -> None:
    app = new_app()
    release = threading.Event()

    @app.task(max_run_time=0.05)
    def blocks() -> None:
        release.wait()

    try:
        with inline(app), pytest.raises(TaskFailed) as failed:
            blocks.dispatch_sync().result_sync()
    finally:
        release.set()
    assert "blocks was abandoned in its thread" in failed.value.message


async def test_a_task_exception_resolves_the_task_as_exception() -> None:
    app = new_app()

    @app.task
    def refuses() -> None:
        raise MalformedPayload("bad input")

    with inline(app), pytest.raises(TaskFailed) as failed:
        await (await refuses.dispatch()).result()
    assert (failed.value.state, failed.value.reason) == ("exception", "malformed-payload")


async def test_dispatch_many_answers_handles_in_order_and_nested_dispatch_runs_inline() -> None:
    app = new_app()

    @app.task
    def square(x: int) -> int:
        return x * x

    @app.task
    async def sum_of_squares(n: int) -> int:
        handles = await square.dispatch_many([(i,) for i in range(n)], wait=timedelta(days=1))
        return sum([await h.result() for h in handles])

    with inline(app) as recorder:
        handle = await sum_of_squares.dispatch(4)
        assert await handle.result() == 14
    assert recorder.calls(square) == [((i,), {}) for i in range(4)]
    assert [r.value for r in recorder.results(square)] == [0, 1, 4, 9]


def test_the_sync_forms_run_inline_and_so_does_a_plain_function_dispatching() -> None:
    app = new_app()
    threads: list[str] = []

    @app.task
    def shout(word: str) -> str:
        threads.append(threading.current_thread().name)
        return word.upper()

    @app.task
    def shout_twice(word: str) -> list[str]:
        return [shout.dispatch_sync(word).result_sync() for _ in range(2)]

    with inline(app) as recorder:
        assert shout_twice.dispatch_sync("hi").result_sync(timeout=5) == ["HI", "HI"]
        handles = shout.dispatch_many_sync([("a",), {"word": "b"}])
        assert [h.result_sync() for h in handles] == ["A", "B"]
    assert recorder.calls(shout) == [
        (("hi",), {}),
        (("hi",), {}),
        (("a",), {}),
        ((), {"word": "b"}),
    ]
    assert all(name.startswith("function ") for name in threads)  # run as the worker runs it


def test_the_fixture_runs_the_app_inline_for_the_test(
    inline_app: Callable[[App], Recorder],
) -> None:
    app = new_app()

    @app.task
    def echo(value: str) -> str:
        return value

    recorder = inline_app(app)
    assert echo.dispatch_sync("x").result_sync() == "x"
    assert recorder.calls(echo) == [(("x",), {})]
