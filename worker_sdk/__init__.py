"""worker_sdk: the library workers embed to take tasks from a queue coordinator (SPEC §8).

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
and ``./scripts/dev`` prints a client's); each run is then reclaimed and reported with the
temporary credentials its claim came with.

A handler that returns resolves its run ``completed``; one that raises
:class:`MalformedPayload`, :class:`ResourceUnavailable` or :class:`InternalError` resolves
it ``exception`` with that reason; any other exception resolves it ``failed`` (traceback
logged). The ``queue-worker`` command (:mod:`worker_sdk.cli`) runs a handler from the shell.

Logs are one line per event with ``key=value`` fields (``taskId=... runId=...``) under the
``worker_sdk`` loggers. One line is a stable interface, for alerting; it is logged at
WARNING by ``worker_sdk.poller`` when a hint's Azure ``DequeueCount`` exceeds the threshold
(``dequeue_warning``, default 10), which means a run keeps being hinted but never claimed::

    hint dequeued too often taskId=<taskId> runId=<runId> queue=<queue name> dequeueCount=<n>

Its text, field names and field order do not change; new fields would only be appended.
"""

from worker_sdk.client import Credentials
from worker_sdk.errors import (
    InternalError,
    MalformedPayload,
    RequestFailed,
    ResourceUnavailable,
    TaskException,
)
from worker_sdk.timing import Backoff
from worker_sdk.worker import Handler, TaskRun, Worker

__all__ = [
    "Backoff",
    "Credentials",
    "Handler",
    "InternalError",
    "MalformedPayload",
    "RequestFailed",
    "ResourceUnavailable",
    "TaskException",
    "TaskRun",
    "Worker",
]
