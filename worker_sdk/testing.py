"""Testing code that dispatches an app's functions, with no coordinator: :func:`inline`, the
:class:`Recorder` it returns, and the pytest fixture ``inline_app`` (``pytest -p
worker_sdk.testing``, or ``pytest_plugins = ["worker_sdk.testing"]`` in a ``conftest.py``).

Under ``with inline(app) as recorder:`` the app's :class:`~worker_sdk.connection.Connection`
answers the coordinator's calls in the process (:class:`InlineCoordinator`), so everything
above it is production's own code: ``dispatch`` and ``dispatch_many`` (and their ``_sync``
forms) bind and check the arguments and write the task definition; createTask then runs the
task to its end before it answers, each run served by the worker's
:func:`~worker_sdk.serving.serve` (payload, binding, ``max_run_time``, ``result.json``,
``retry_on`` and ``retry_with``) and reported as the worker's
:func:`~worker_sdk.worker.resolution_for` says, with a retry run after each
``intermittent-task`` report while the task has retries left, as the coordinator adds them.
The handles' ``result()`` reads that status and ``result.json`` as it reads the coordinator's:
the return value, ``None``, or :class:`~worker_sdk.results.TaskFailed`.

Time is not simulated: ``wait``, ``at``, ``retryAfter`` and ``retryDelay`` are not waited
for (a run's ``retry_after`` is recorded), and ``dependencies`` are not checked (every task
is resolved before ``dispatch`` returns). A function that dispatches another of the app's
runs it inline too. Only tests import this module: it imports pytest, and nothing in
``worker_sdk`` imports it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from worker_sdk.app import App, TaskFunction
from worker_sdk.calls import decode_call
from worker_sdk.client import Resolution
from worker_sdk.connection import Connection, Coordinator
from worker_sdk.errors import RequestFailed, RetryTask
from worker_sdk.progress import RunProgress
from worker_sdk.results import RESULT_ARTIFACT, outcome
from worker_sdk.serving import serve
from worker_sdk.worker import resolution_for

DEFAULT_RETRIES = 5
"""The coordinator's ``retries`` of a task whose definition names none (worker_sdk may not
import the coordinator's definitions)."""

CallArguments = tuple[tuple[Any, ...], dict[str, Any]]
"""A dispatched call's positional and keyword arguments, as the worker got them."""


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """How one run of a dispatched call ended: the report the worker would have sent
    (``resolution``), and what its ``result.json`` held: the return value, or the error's
    ``type`` (``module.QualifiedName``) and ``message``."""

    task_id: str
    run_id: int
    resolution: Resolution
    value: Any = None
    type: str | None = None
    message: str = ""


class Recorder:
    """What was dispatched under :func:`inline`, by function."""

    def __init__(self) -> None:
        self._calls: defaultdict[str, list[CallArguments]] = defaultdict(list)
        self._results: defaultdict[str, list[RunOutcome]] = defaultdict(list)

    def calls(self, function: TaskFunction[..., Any]) -> list[CallArguments]:
        """Each dispatched call of ``function``, in order: ``(args, kwargs)``."""
        return list(self._calls[function.name])

    def results(self, function: TaskFunction[..., Any]) -> list[RunOutcome]:
        """Each run of ``function``'s tasks, in order, retries included."""
        return list(self._results[function.name])

    def record_call(self, function: str, call: CallArguments) -> None:
        """A call of the function named ``function`` was dispatched."""
        self._calls[function].append(call)

    def record_run(self, function: str, run: RunOutcome) -> None:
        """A run of the function named ``function`` ended."""
        self._results[function].append(run)


@dataclass(frozen=True, kw_only=True)
class InlineRun:
    """One run served in the process (a :class:`~worker_sdk.serving.ServedRun`); its
    artifacts are kept in memory."""

    task_id: str
    run_id: int
    task: Mapping[str, Any]
    retries_left: int
    artifacts: dict[str, bytes] = field(default_factory=dict)

    @property
    def payload(self) -> Any:
        return self.task.get("payload")

    async def upload_artifact(
        self, name: str, data: bytes, *, content_type: str | None = None
    ) -> None:
        self.artifacts[name] = data


class InlineCoordinator:
    """The coordinator's calls a producer makes (a
    :class:`~worker_sdk.connection.Coordinator`), answered in the process: createTask runs
    the task's runs before it answers."""

    def __init__(self, app: App, recorder: Recorder) -> None:
        self._app = app
        self._recorder = recorder
        self._statuses: dict[str, dict[str, Any]] = {}
        self._result_json: dict[tuple[str, int], bytes] = {}

    async def server_time(self) -> datetime:
        return datetime.now(UTC)  # the process is the coordinator here

    async def create_task(
        self, task_id: str, task: Mapping[str, Any], *, traceparent: str | None = None
    ) -> dict[str, Any]:
        # traceparent: no coordinator in between to continue the trace
        definition = json.loads(json.dumps(task))  # as the worker gets it: tuples are lists
        call = decode_call(definition["payload"])
        self._recorder.record_call(call.function, (call.args, dict(call.kwargs)))
        status: dict[str, Any] = {"taskId": task_id, "state": "running", "runs": []}
        self._statuses[task_id] = status
        retries = int(definition.get("retries", DEFAULT_RETRIES))
        for run_id in range(retries + 1):
            run = InlineRun(
                task_id=task_id, run_id=run_id, task=definition, retries_left=retries - run_id
            )
            resolution = await self._serve(run)
            self._record(call.function, run, resolution)
            status["runs"].append(
                {
                    "runId": run_id,
                    "state": resolution.kind,
                    "reasonResolved": resolution.reason or resolution.kind,
                }
            )
            status["state"] = resolution.kind
            if resolution.reason != RetryTask.reason:
                break
        return dict(status)

    async def create_tasks(
        self, tasks: Mapping[str, Mapping[str, Any]], *, traceparent: str | None = None
    ) -> list[dict[str, Any]]:
        return [
            {"taskId": task_id, "status": await self.create_task(task_id, task)}
            for task_id, task in tasks.items()
        ]

    async def task_status(self, task_id: str) -> dict[str, Any]:
        if task_id not in self._statuses:
            raise _not_found("GET", f"task {task_id}")
        return dict(self._statuses[task_id])

    async def task_progress(self, task_id: str) -> list[RunProgress]:
        # a function is not handed its run, so no run of one reports progress
        await self.task_status(task_id)
        return []

    async def cancel_task(self, task_id: str) -> dict[str, Any]:
        # every task is resolved by the time its dispatch returns: cancelling changes nothing
        return await self.task_status(task_id)

    async def artifact_content(self, task_id: str, run_id: int, name: str) -> bytes:
        content = self._result_json.get((task_id, run_id)) if name == RESULT_ARTIFACT else None
        if content is None:
            raise _not_found("GET", f"artifact {name} of task {task_id} run {run_id}")
        return content

    async def _serve(self, run: InlineRun) -> Resolution:
        """What the worker reports for the run."""
        try:
            await serve(run, self._app.functions)
        except Exception as error:
            return resolution_for(error, retries_left=run.retries_left)
        return resolution_for(None)

    def _record(self, function: str, run: InlineRun, resolution: Resolution) -> None:
        content = run.artifacts.get(RESULT_ARTIFACT)
        body = {} if content is None else outcome(content)
        if content is not None:
            self._result_json[run.task_id, run.run_id] = content
        error = body.get("error") or {}
        self._recorder.record_run(
            function,
            RunOutcome(
                task_id=run.task_id,
                run_id=run.run_id,
                resolution=resolution,
                value=body.get("value"),
                type=error.get("type"),
                message=error.get("message", ""),
            ),
        )


class InlineConnection(Connection):
    """A connection whose coordinator is an :class:`InlineCoordinator`; the ``_sync`` forms
    run on its own loop, as on any connection."""

    def __init__(self, coordinator: InlineCoordinator, *, replacing: Connection) -> None:
        super().__init__(root_urls=replacing.root_urls, credentials=None)
        self._coordinator = coordinator

    def client(self) -> Coordinator:
        return self._coordinator


@contextmanager
def inline(app: App) -> Iterator[Recorder]:
    """Run the tasks ``app``'s functions dispatch in this process until the block ends; the
    :class:`Recorder` of their calls and runs."""
    recorder = Recorder()
    production = app.connection
    connection = InlineConnection(InlineCoordinator(app, recorder), replacing=production)
    app.connection = connection
    try:
        yield recorder
    finally:
        app.connection = production
        connection.close()


@pytest.fixture
def inline_app() -> Iterator[Callable[[App], Recorder]]:
    """``inline_app(app)``: :func:`inline` for the rest of the test; its :class:`Recorder`."""
    with ExitStack() as stack:
        yield lambda app: stack.enter_context(inline(app))


def _not_found(method: str, what: str) -> RequestFailed:
    """What the coordinator answers for something it does not have."""
    return RequestFailed(
        method=method,
        url=f"inline:{what}",
        status=404,
        code="ResourceNotFound",
        message=f"{what} was not dispatched under inline mode",
    )
