"""Inside one child of the process pool (:mod:`worker_sdk.isolation`): the loop that runs the
handler on each run the worker sends, one at a time, and sends back its outcome.

Two pipes connect a child to its worker. The worker writes JSON messages on ``commands``:
``{"run": <TaskRun.to_json()>, "sendLog": bool}`` starts a run, ``{"renew": {...}}`` brings the
running run's new ``taken_until`` and credentials; the end of that pipe tells the child to
exit. The child writes on ``results``: while a run is on, ``{"log": line}`` for each record
logged (when the run asked for its log), then ``{"error": null | {...}}``, its outcome. A
reader thread takes the commands, so renewals arrive while the handler runs on the main
thread; records logged between two runs (a thread a handler left behind) go nowhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import logging.handlers
import math
import multiprocessing.queues
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from hawk_signing import Credentials
from worker_sdk.client import Reclaim
from worker_sdk.errors import RetryTask, TaskException
from worker_sdk.run_log import RunLogFormatter
from worker_sdk.runs import Handler, Lease, close_progress, run_from_json

PARENT_CHECK_INTERVAL = 1.0
"""How often a child looks whether its parent is still there."""


def watch_parent(on_orphaned: Callable[[], None], *, parent: int | None = None) -> None:
    """Call ``on_orphaned`` (once, from a daemon thread) when this process's parent, process
    ``parent`` (default: the current one), is gone: the process is then reparented, so its
    parent process id changes."""
    expected = os.getppid() if parent is None else parent

    def watch() -> None:
        while os.getppid() == expected:
            time.sleep(PARENT_CHECK_INTERVAL)
        on_orphaned()

    threading.Thread(target=watch, name="parent watch", daemon=True).start()


class _ToWorker(logging.Handler):
    """The ``results`` pipe: the run log's lines of the run that is on (when it asked for
    them), then its outcome; nothing between runs."""

    def __init__(self, results: Connection) -> None:
        super().__init__()
        self.setFormatter(RunLogFormatter())
        self._results = results
        self._on = False
        self._send_log = False

    def begin(self, *, send_log: bool) -> None:
        with self.lock or contextlib.nullcontext():
            self._on = True
            self._send_log = send_log

    def emit(self, record: logging.LogRecord) -> None:
        if self._send_log:
            self._send({"log": self.format(record)})

    def finish(self, outcome: dict[str, Any]) -> None:
        with self.lock or contextlib.nullcontext():
            self._send(outcome)
            self._on = False

    def _send(self, message: dict[str, Any]) -> None:
        # One message at a time, from whichever of the handler's threads logs.
        with self.lock or contextlib.nullcontext():
            if self._on:
                self._results.send_bytes(json.dumps(message).encode())


class _Current:
    """The run that is on: the reader thread renews its lease."""

    def __init__(self) -> None:
        self.key: tuple[str, int] | None = None
        self.lease: Lease | None = None


def _read_commands(commands: Connection, runs: queue.SimpleQueue[Any], current: _Current) -> None:
    """The reader thread: hand each run to the main thread (``None`` at the end of the pipe)
    and apply each renewal to the run it names, if that one is still on."""
    while True:
        try:
            message = json.loads(commands.recv_bytes())
        except (EOFError, OSError):
            runs.put(None)
            return
        if "run" in message:
            runs.put(message)
            continue
        update = message["renew"]
        lease = current.lease
        if lease is not None and current.key == (update["taskId"], update["runId"]):
            lease.renew(
                Reclaim(
                    taken_until=datetime.fromisoformat(update["takenUntil"]),
                    expires_at=math.inf,
                    credentials=Credentials.from_json(update["credentials"]),
                )
            )


def serve_runs(
    handler: Handler,
    commands: Connection,
    results: Connection,
    log_queue: multiprocessing.queues.Queue[logging.LogRecord] | None,
    log_level: int,
) -> None:
    """The child process: run the handler on each run sent, until the worker closes
    ``commands`` (or dies)."""
    # The worker decides when a run stops; a Ctrl-C reaches the whole process group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(lambda: os._exit(1))
    to_worker = _ToWorker(results)
    root = logging.getLogger()
    root.handlers[:] = [to_worker]
    if log_queue is not None:
        root.addHandler(logging.handlers.QueueHandler(log_queue))
    root.setLevel(log_level)
    runs: queue.SimpleQueue[Any] = queue.SimpleQueue()
    current = _Current()
    threading.Thread(
        target=_read_commands, args=(commands, runs, current), name="commands", daemon=True
    ).start()
    while (message := runs.get()) is not None:
        run, lease = run_from_json(message["run"])
        current.lease = lease
        current.key = (run.task_id, run.run_id)
        to_worker.begin(send_log=message["sendLog"])
        error: dict[str, Any] | None = None
        try:
            result = handler(run)
            if inspect.isawaitable(result):
                # A loop per run, as in a process per run: nothing a run left on it survives.
                asyncio.run(_awaited(result))
        except BaseException as raised:  # whatever it is, the worker decides
            error = {
                "type": type(raised).__qualname__,
                "message": str(raised),
                "reason": raised.reason if isinstance(raised, TaskException) else None,
                "retryAfter": raised.retry_after if isinstance(raised, RetryTask) else None,
                "traceback": traceback.format_exc(),
            }
        close_progress(run)
        current.key = current.lease = None
        to_worker.finish({"error": error})


async def _awaited(result: Awaitable[None]) -> None:
    await result
