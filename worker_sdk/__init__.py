"""worker_sdk: the library workers embed to take tasks from a queue coordinator (docs/protocol.md).

It speaks only HTTP: to the coordinator's Taskcluster-queue-v1 routes and to Azure Storage
Queues through the signed URLs the coordinator hands out. Usage::

    import os

    from worker_sdk import MalformedPayload, TaskRun, Worker

    async def handle(run: TaskRun) -> None:  # or a plain def, which runs in a thread
        if "command" not in run.payload:
            raise MalformedPayload("payload needs a command")
        ...

    worker = Worker(
        root_url="http://127.0.0.1:8080",
        credentials={
            "clientId": os.environ["TASKCLUSTER_CLIENT_ID"],
            "accessToken": os.environ["TASKCLUSTER_ACCESS_TOKEN"],
        },
        provisioner_id="proj",
        worker_type="linux",
        handler=handle,
        capacity=4,
    )
    await worker.run()  # until worker.stop(), SIGTERM or SIGINT

The credentials sign polling and claiming (the dev coordinator runs with authentication on,
and ``./scripts/dev`` prints a client's), and the batches below; a run reclaimed or reported
on its own is signed with the temporary credentials its claim came with.

Requests are batched (``batching=True``, the default): the runs one Azure get hints at are
claimed in one ``claimRuns`` request, and reclaims and reports that come due within 5 ms of
each other go out as one ``reclaimRuns`` or ``resolveRuns`` (up to 32 runs each), with every
run's answer what its single call would have answered. A coordinator without these routes
answers 404, and the worker sends single calls from then on; ``batching=False`` always does.
An Azure queue that answered empty is left alone for between half and all of
``empty_queue_skip`` seconds (default 1, 0 never skips), so a worker whose work sits in a low
priority stops polling each empty higher one every pass; new work in a higher priority may
thus wait up to that long behind a lower one.

What the handler does decides the report; every exception named here is exported:

- it returns: ``completed``;
- it raises :class:`MalformedPayload`, :class:`ResourceUnavailable` or
  :class:`InternalError`: ``exception`` with that reason, which the coordinator never retries
  (any other :class:`TaskException` subclass: ``exception`` with its ``reason``);
- it raises :class:`RetryTask`: ``exception/intermittent-task`` while the task has retries
  left (the coordinator then adds a ``task-retry`` run), ``failed`` on its last run;
- it raises anything else: ``failed``, traceback logged; with ``retry_failures=True``, as
  :class:`RetryTask` does;
- it ends its process, under ``isolation="process"`` (:mod:`worker_sdk.isolation`):
  ``exception/internal-error``.

A worker may take work from several task queues (:class:`TaskQueue`), in strict priority
order or weighted (:mod:`worker_sdk.priorities`). The ``queue-worker`` command
(:mod:`worker_sdk.cli`) runs a handler from the shell, and ``--processes N`` several workers
under a supervisor (:mod:`worker_sdk.supervisor`).

Logs are one line per event with ``key=value`` fields (``taskId=... runId=...``) under the
``worker_sdk`` loggers. One line is a stable interface, for alerting; it is logged at
WARNING by ``worker_sdk.poller`` when a hint's Azure ``DequeueCount`` exceeds the threshold
(``dequeue_warning``, default 10), which means a run keeps being hinted but never claimed::

    hint dequeued too often taskId=<taskId> runId=<runId> queue=<queue name> dequeueCount=<n>

Its text, field names and field order do not change; new fields would only be appended.

Tasks as Python functions (:mod:`worker_sdk.app`): an :class:`App` registers functions with
``@app.task``, dispatches calls of them as tasks (``fn.dispatch(...)``, returning a
:class:`TaskHandle` whose ``result()`` is the function's return value or raises
:class:`TaskFailed`), and ``queue-worker --app module:app`` serves them.
"""

from hawk_signing import Credentials
from worker_sdk.app import App, DispatchRefused, TaskFunction
from worker_sdk.errors import (
    InternalError,
    MalformedPayload,
    RequestFailed,
    ResourceUnavailable,
    RetryTask,
    TaskException,
)
from worker_sdk.handles import TaskHandle
from worker_sdk.inbox import InboxUnavailable, enqueue_in, enqueue_in_sync
from worker_sdk.options import WorkerOptions
from worker_sdk.priorities import TaskQueue
from worker_sdk.results import TaskFailed
from worker_sdk.runs import Handler, TaskRun
from worker_sdk.timing import Backoff
from worker_sdk.worker import Worker

__all__ = [
    "App",
    "Backoff",
    "Credentials",
    "DispatchRefused",
    "Handler",
    "InboxUnavailable",
    "InternalError",
    "MalformedPayload",
    "RequestFailed",
    "ResourceUnavailable",
    "RetryTask",
    "TaskException",
    "TaskFailed",
    "TaskFunction",
    "TaskHandle",
    "TaskQueue",
    "TaskRun",
    "Worker",
    "WorkerOptions",
    "enqueue_in",
    "enqueue_in_sync",
]
