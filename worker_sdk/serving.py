"""Running an app's functions on a worker: :func:`serve` is the handler ``queue-worker --app``
(and ``App.worker()``) gives the :class:`~worker_sdk.worker.Worker`.

For each run it reads the payload's call (:mod:`worker_sdk.calls`), finds the function it
names and binds the arguments (either failing is ``exception/malformed-payload``), calls
the function (an ``async def`` on the worker's loop, a plain one in a thread of its own)
within its ``max_run_time``, and uploads the run's ``result.json`` (:mod:`worker_sdk.results`)
before returning, so the worker reports the run completed; a function that returned ``None``
has none, which spares most background jobs two requests a run. When the function raises, the
error goes into ``result.json`` too, and its :class:`~worker_sdk.task_options.TaskOptions`
decide the report: a retry (``exception/intermittent-task``, with ``retryAfter`` when
``retry_with`` named the delay) or ``failed``. What this logs, it logs in the run's context,
so it is in the run's log (``public/logs/live_backing.log``) as well as the worker's.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from worker_sdk.calls import FunctionCall, bind, decode_call
from worker_sdk.daemon_threads import in_daemon_thread
from worker_sdk.errors import MalformedPayload, RequestFailed, TaskException
from worker_sdk.results import RESULT_ARTIFACT, RESULT_CONTENT_TYPE, error_body, value_body
from worker_sdk.task_options import TaskOptions

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class RunTimeExceeded(Exception):
    """The function ran longer than its ``max_run_time``: it was cancelled (an ``async def``)
    or abandoned in its thread (a plain function, whose thread cannot be stopped), and the
    run is reported ``failed``, never retried. A worker's ``max_run_time`` stops a plain
    handler so too (:func:`within_max_run_time`)."""


async def within_max_run_time(
    limit: float | None, call: Callable[[], Awaitable[_T]], *, what: str, task_id: str, run_id: int
) -> _T:
    """What ``call()`` returns, unless it runs longer than ``limit`` seconds (``None``: no
    limit): then it is cancelled and :class:`RunTimeExceeded` raised, saying (and logging, in
    the run's log) that ``what`` was stopped so."""
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            return await call()
    except TimeoutError:
        if not deadline.expired():
            raise  # the call's own TimeoutError
        message = f"max_run_time of {limit:g} s exceeded: {what}"
        log.error("%s taskId=%s runId=%d", message, task_id, run_id)
        raise RunTimeExceeded(message) from None


class ServedRun(Protocol):
    """What :func:`serve` reads of a run: a worker's :class:`~worker_sdk.runs.TaskRun`, or a
    run made in the process (``worker_sdk.testing``)."""

    @property
    def task_id(self) -> str: ...

    @property
    def run_id(self) -> int: ...

    @property
    def task(self) -> Mapping[str, Any]: ...

    @property
    def payload(self) -> Any: ...

    @property
    def retries_left(self) -> int: ...

    async def upload_artifact(
        self, name: str, data: bytes, *, content_type: str | None = None
    ) -> None: ...


class Served(Protocol):
    """A registered function, as the worker needs it."""

    @property
    def function(self) -> Callable[..., Any]: ...

    @property
    def options(self) -> TaskOptions: ...


async def serve(run: ServedRun, functions: Mapping[str, Served]) -> None:
    """Run the function the run's payload calls; raises what the worker is to report."""
    try:
        call = decode_call(run.payload)
        served = functions.get(call.function)
        if served is None:
            raise MalformedPayload(
                f"unknown function {call.function!r}: this worker serves "
                + ", ".join(sorted(functions))
            )
        arguments = bind(call, served.function)
    except MalformedPayload as error:
        log.error("malformed payload taskId=%s runId=%d: %s", run.task_id, run.run_id, error)
        await _upload(run, error_body(error))
        raise
    try:
        value = await _call(run, call, served, arguments)
        body = None if value is None else value_body(value)
    except asyncio.CancelledError:
        raise  # the worker gave up on the run: nobody wants its result
    except Exception as error:
        await _upload(run, error_body(error))
        raise _report_for(run, call, served.options, error) from error
    if body is not None:  # None is what result() answers for a completed run without one
        await _upload(run, body, required=True)


async def _call(
    run: ServedRun, call: FunctionCall, served: Served, arguments: inspect.BoundArguments
) -> Any:
    """The function's return value, within its ``max_run_time``."""
    function = served.function
    invoke = functools.partial(function, *arguments.args, **arguments.kwargs)
    log.info("calling function=%s taskId=%s runId=%d", call.function, run.task_id, run.run_id)

    async def called() -> Any:
        if inspect.iscoroutinefunction(function):
            return await invoke()
        result = await in_daemon_thread(
            invoke, name=f"function {call.function} taskId={run.task_id} runId={run.run_id}"
        )
        # a plain function that returned an awaitable (a decorated coroutine function)
        return await result if inspect.isawaitable(result) else result

    stopped = "cancelled" if inspect.iscoroutinefunction(function) else "abandoned in its thread"
    return await within_max_run_time(
        served.options.max_run_time,
        called,
        what=f"{call.function} was {stopped}",
        task_id=run.task_id,
        run_id=run.run_id,
    )


def _report_for(
    run: ServedRun, call: FunctionCall, options: TaskOptions, error: Exception
) -> BaseException:
    """What to raise to the worker for a function that raised ``error``: the retry its
    options ask for, or ``error`` itself (``failed``, or its own exception reason)."""
    if isinstance(error, TaskException | RunTimeExceeded):
        return error  # the function chose its report, or ran out of time: no policy applies
    retry_count = int(run.task.get("retries", 0)) - run.retries_left
    try:
        retry = options.retry_for(error, retry_count=retry_count)
    except Exception as broken:  # retry_with itself failed: the run fails with its error
        log.error(
            "retry_with failed function=%s taskId=%s runId=%d: %s",
            call.function,
            run.task_id,
            run.run_id,
            broken,
        )
        return error
    if retry is None:
        return error
    if retry.retry_after is not None and retry.retry_after >= _seconds_left(run):
        # the coordinator would refuse it (400): a retry past the deadline never runs anyway
        log.warning(
            "retry_after past the deadline, the run fails function=%s taskId=%s runId=%d "
            "retryAfter=%g",
            call.function,
            run.task_id,
            run.run_id,
            retry.retry_after,
        )
        return error
    if run.retries_left == 0:
        log.warning(
            "no retries left, the run fails function=%s taskId=%s runId=%d",
            call.function,
            run.task_id,
            run.run_id,
        )
    else:
        log.warning(
            "retry asked for function=%s taskId=%s runId=%d retryCount=%d retryAfter=%s",
            call.function,
            run.task_id,
            run.run_id,
            retry_count,
            "-" if retry.retry_after is None else f"{retry.retry_after:g}",
        )
    return retry


def _seconds_left(run: ServedRun) -> float:
    """Seconds until the run's task passes its deadline, by this machine's clock."""
    deadline = datetime.fromisoformat(str(run.task["deadline"]))
    return (deadline - datetime.now(UTC)).total_seconds()


async def _upload(run: ServedRun, body: bytes, *, required: bool = False) -> None:
    """Upload the run's ``result.json``. A failure is raised when ``required`` (a return
    value nobody can read: the run fails) and logged otherwise (an error's report still goes
    out, and ``result()`` says the run recorded no error)."""
    try:
        await run.upload_artifact(RESULT_ARTIFACT, body, content_type=RESULT_CONTENT_TYPE)
    except RequestFailed as error:
        log.error("result not uploaded taskId=%s runId=%d error=%s", run.task_id, run.run_id, error)
        if required:
            raise
