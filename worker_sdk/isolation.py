"""Process isolation: each run's handler in a child process of its own.

With ``isolation="process"`` a worker runs every handler in a child started by
multiprocessing's ``forkserver`` context (``spawn`` where there is none), never by a plain
``fork`` of the worker with its event loop, threads and sockets. The fork server imports
``worker_sdk`` and the handler's module once; each run's child forks from it, so a run costs
a fork, not an interpreter start, and the handler's module should leave connections and
threads to the handler rather than open them at import. A handler that takes its process
down (``os._exit``, a segfault in an extension, the kernel's OOM killer) takes only its own
run: the worker reports it ``exception/internal-error`` and goes on.

The run goes to the child and the outcome comes back as JSON text, so nothing but plain data
crosses: the child gets a snapshot :class:`~worker_sdk.runs.TaskRun`, whose ``taken_until``
and credentials the worker updates as it reclaims the run (so the child's artifact uploads
are signed with the current ones), and an exception the handler raised comes back as its
reason (a :class:`~worker_sdk.errors.TaskException` arrives as the same class) or as
:class:`HandlerError` with the child's traceback. Cancelling the run (claim lost, shutdown
after the grace period) terminates the child. The child's log records go through a queue to
the worker's own logging handlers and, when the worker keeps a run log, as lines on the pipe
that then carries the outcome (so every line sent before the outcome, or before the child
died, is in the run log); a child whose worker died (SIGKILL) exits instead of running on
unsupervised.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import logging.handlers
import math
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import multiprocessing.queues
import os
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from hawk_signing import Credentials
from worker_sdk.client import Reclaim
from worker_sdk.errors import (
    InternalError,
    MalformedPayload,
    ResourceUnavailable,
    RetryTask,
    TaskException,
)
from worker_sdk.run_log import RunLogFormatter
from worker_sdk.runs import Handler, Lease, TaskRun, run_from_json

log = logging.getLogger(__name__)

TERMINATE_GRACE = 5.0
"""How long a cancelled run's child has after SIGTERM before it is killed."""

PARENT_CHECK_INTERVAL = 1.0
"""How often a child looks whether its parent is still there."""

_TASK_EXCEPTIONS: dict[str, type[TaskException]] = {
    error.reason: error
    for error in (MalformedPayload, ResourceUnavailable, InternalError, RetryTask)
}


class HandlerError(Exception):
    """An exception that is no :class:`~worker_sdk.errors.TaskException`, raised by a handler
    in its child process: its type's name, message and the child's traceback, as text."""


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


class ProcessIsolation:
    """Runs one handler's runs each in a child process; see the module docs.

    ``ValueError`` at once for a handler that cannot reach a child: it must be picklable,
    that is importable by name (a module-level function, or an instance of a module-level
    class), not a lambda or a closure.
    """

    def __init__(self, handler: Handler) -> None:
        try:
            pickle.dumps(handler)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            raise ValueError(
                f"isolation='process' needs a handler importable by name, not {handler!r}: {error}"
            ) from error
        self._handler = handler
        if "forkserver" in multiprocessing.get_all_start_methods():
            self._context: (
                multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext
            ) = multiprocessing.get_context("forkserver")
            module = getattr(handler, "__module__", None) or type(handler).__module__
            preload = [__name__] + ([module] if module != "__main__" else [])
            self._context.set_forkserver_preload(preload)
        else:
            self._context = multiprocessing.get_context("spawn")
        self._log_queue: multiprocessing.queues.Queue[logging.LogRecord] | None = None

    @contextlib.contextmanager
    def logging_to_parent(self) -> Iterator[None]:
        """While inside, the children's log records go to this process's root handlers."""
        queue: multiprocessing.queues.Queue[logging.LogRecord] = self._context.Queue()
        listener = logging.handlers.QueueListener(
            queue, *logging.getLogger().handlers, respect_handler_level=True
        )
        listener.start()
        self._log_queue = queue
        try:
            yield
        finally:
            self._log_queue = None
            listener.stop()
            queue.close()

    async def run(
        self, run: TaskRun, lease: Lease, *, log_line: Callable[[str], None] | None = None
    ) -> None:
        """Run the handler on ``run`` in a child; return as the handler did, or raise what it
        raised (see the module docs), or :class:`~worker_sdk.errors.InternalError` for a
        child that died without an outcome.

        :param lease: ``run``'s; each renewal reaches the child's snapshot.
        :param log_line: given the line of each record the child logs, formatted for the run
            log; ``None``: the child sends none.
        """
        results, child_end = self._context.Pipe(duplex=False)
        child_renewals, renewals = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_child,
            args=(
                self._handler,
                run.to_json(),
                child_end,
                child_renewals,
                self._log_queue,
                logging.getLogger().getEffectiveLevel(),
                log_line is not None,
            ),
            name=f"handler taskId={run.task_id} runId={run.run_id}",
        )
        unwatch = lease.watch(lambda renewed: _send_renewal(renewals, renewed))
        # Starting talks to the fork server (which the first start launches): not on the
        # event loop. Shielded, so that a cancellation meanwhile finds a child to end.
        starting = asyncio.ensure_future(asyncio.to_thread(process.start))
        try:
            try:
                await asyncio.shield(starting)
                # The child holds its own copies now; with ours closed, its death reads as EOF.
                child_end.close()
                child_renewals.close()
                log.info(
                    "handler process started taskId=%s runId=%s pid=%s",
                    run.task_id,
                    run.run_id,
                    process.pid,
                )
                outcome = await _outcome(results, process, log_line)
            except asyncio.CancelledError:
                await starting
                await _end(process, run)
                process.close()
                raise
        finally:
            unwatch()
            for connection in (results, child_end, renewals, child_renewals):
                connection.close()
        # A handler that left a non-daemon thread behind would keep its child from exiting.
        if not await _exited(process, within=TERMINATE_GRACE):
            await _end(process, run)
        exitcode = process.exitcode
        process.close()
        if outcome is None:
            log.error(
                "handler process died taskId=%s runId=%s exitCode=%s",
                run.task_id,
                run.run_id,
                exitcode,
            )
            raise InternalError(f"the handler's process died with exit code {exitcode}")
        error = outcome["error"]
        if error is not None:
            raise _rebuilt(error)


async def _outcome(
    results: Connection,
    process: multiprocessing.process.BaseProcess,
    log_line: Callable[[str], None] | None,
) -> dict[str, Any] | None:
    """The child's outcome, handing the log lines sent before it to ``log_line``; ``None``
    when the child closed the pipe (died) without one."""
    while True:
        await _readable(results.fileno(), process.sentinel)
        if not results.poll():
            return None  # ended, and nothing is left to read
        while results.poll():
            try:
                message: dict[str, Any] = json.loads(results.recv_bytes())
            except EOFError:
                return None
            if "log" not in message:
                return message
            if log_line is not None:
                log_line(message["log"])


def _send_renewal(renewals: Connection, lease: Lease) -> None:
    """Tell the child its run's new ``taken_until`` and credentials."""
    update = {
        "takenUntil": lease.taken_until.isoformat(),
        "credentials": lease.credentials.to_json(),
    }
    # OSError: the child has ended; nothing needs the renewal any more.
    with contextlib.suppress(OSError):
        renewals.send_bytes(json.dumps(update).encode())


def _rebuilt(error: dict[str, Any]) -> BaseException:
    """The exception to stand for one the handler raised in the child."""
    reason = error["reason"]
    if reason is None:
        return HandlerError(
            f"{error['type']}: {error['message']}\nIn the handler's process:\n{error['traceback']}"
        )
    rebuilt = _TASK_EXCEPTIONS.get(reason, TaskException)(error["message"])
    rebuilt.reason = reason
    return rebuilt


async def _readable(*fds: int) -> None:
    """Wait until one of ``fds`` is readable (data, end of file, or a process's end)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    for fd in fds:
        loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        for fd in fds:
            loop.remove_reader(fd)


async def _exited(process: multiprocessing.process.BaseProcess, *, within: float) -> bool:
    """Whether ``process`` exits (and is reaped) within ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            await _readable(process.sentinel)
    except TimeoutError:
        return False
    process.join()
    return True


async def _end(process: multiprocessing.process.BaseProcess, run: TaskRun) -> None:
    """End a run's child: SIGTERM, then SIGKILL after :data:`TERMINATE_GRACE`."""
    log.info(
        "handler process terminated taskId=%s runId=%s pid=%s", run.task_id, run.run_id, process.pid
    )
    process.terminate()
    if not await _exited(process, within=TERMINATE_GRACE):
        process.kill()
        await _readable(process.sentinel)
        process.join()


class _ToWorker(logging.Handler):
    """In the child: the pipe to the worker, which carries the run log's lines (when
    ``send_log``) and then the outcome; nothing after the outcome."""

    def __init__(self, results: Connection, *, send_log: bool) -> None:
        super().__init__()
        self.setFormatter(RunLogFormatter())
        self._results = results
        self._send_log = send_log
        self._done = False

    def emit(self, record: logging.LogRecord) -> None:
        if self._send_log:
            self._send({"log": self.format(record)})

    def finish(self, outcome: dict[str, Any]) -> None:
        with self.lock or contextlib.nullcontext():
            self._send(outcome)
            self._done = True
            self._results.close()

    def _send(self, message: dict[str, Any]) -> None:
        # One message at a time, from whichever of the handler's threads logs.
        with self.lock or contextlib.nullcontext():
            if not self._done:
                self._results.send_bytes(json.dumps(message).encode())


def _follow_renewals(renewals: Connection, lease: Lease) -> None:
    """In the child: apply the worker's renewals of the run to ``lease``, from a daemon
    thread, until the worker closes the pipe."""

    def follow() -> None:
        while True:
            try:
                update = json.loads(renewals.recv_bytes())
            except (EOFError, OSError):
                return
            lease.renew(
                Reclaim(
                    taken_until=datetime.fromisoformat(update["takenUntil"]),
                    expires_at=math.inf,
                    credentials=Credentials.from_json(update["credentials"]),
                )
            )

    threading.Thread(target=follow, name="renewals", daemon=True).start()


def _child(
    handler: Handler,
    run_json: str,
    results: Connection,
    renewals: Connection,
    log_queue: multiprocessing.queues.Queue[logging.LogRecord] | None,
    log_level: int,
    send_log: bool,
) -> None:
    """The child process: run the handler once, send its outcome as JSON, exit."""
    # The worker decides when a run stops; a Ctrl-C reaches the whole process group.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(lambda: os._exit(1))
    to_worker = _ToWorker(results, send_log=send_log)
    root = logging.getLogger()
    root.handlers[:] = [to_worker]
    if log_queue is not None:
        root.addHandler(logging.handlers.QueueHandler(log_queue))
    root.setLevel(log_level)
    run, lease = run_from_json(run_json)
    _follow_renewals(renewals, lease)
    error: dict[str, Any] | None = None
    try:
        result = handler(run)
        if inspect.isawaitable(result):
            asyncio.run(_awaited(result))
    except BaseException as raised:  # whatever it is, the worker decides
        error = {
            "type": type(raised).__qualname__,
            "message": str(raised),
            "reason": raised.reason if isinstance(raised, TaskException) else None,
            "traceback": traceback.format_exc(),
        }
    to_worker.finish({"error": error})


async def _awaited(result: Awaitable[None]) -> None:
    await result
