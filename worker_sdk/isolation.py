"""Process isolation: runs' handlers in a pool of long-lived child processes.

With ``isolation="process"`` a worker keeps as many children as its capacity, pre-forked when
it starts, each running one run's handler at a time (:mod:`worker_sdk.handler_process`), like
Celery's prefork pool. The children are started by multiprocessing's ``forkserver`` context
(``spawn`` where there is none), never by a plain ``fork`` of the worker with its event loop,
threads and sockets; the fork server imports ``worker_sdk`` and the handler's module once. A
child is replaced when it dies, when it is ended (a lost claim, a shutdown past the grace
period: SIGTERM, then SIGKILL), and after ``max_runs_per_child`` runs when that is set (what
a handler leaks stays bounded). A handler that takes its process down (``os._exit``, a
segfault in an extension, the kernel's OOM killer) takes only its own run: the worker reports
it ``exception/internal-error`` and goes on with a fresh child.

The run goes to the child and the outcome comes back as JSON text, so nothing but plain data
crosses: the child gets a snapshot :class:`~worker_sdk.runs.TaskRun`, whose ``taken_until``
and credentials the worker updates as it reclaims the run (so the child's artifact uploads
are signed with the current ones), and an exception the handler raised comes back as its
reason (a :class:`~worker_sdk.errors.TaskException` arrives as the same class) or as
:class:`HandlerError` with the child's traceback. The child's log records go through a queue
to the worker's own logging handlers and, when the worker keeps a run log, as lines on the
pipe that then carries the outcome (so every line sent before the outcome, or before the
child died, is in the run log); a child whose worker died (SIGKILL) exits instead of running
on unsupervised.

The pool is this module's own rather than ``multiprocessing.Pool`` or
``concurrent.futures.ProcessPoolExecutor``: a lost claim must end the one child running that
run and have it replaced, while ProcessPoolExecutor marks itself broken for good when one of
its processes dies and Pool offers no way to end one task's process; and a running run needs
a channel of its own both ways (its renewals in, its log lines out), which neither gives.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import logging.handlers
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import multiprocessing.queues
import pickle
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from worker_sdk.errors import (
    InternalError,
    MalformedPayload,
    ResourceUnavailable,
    RetryTask,
    TaskException,
)
from worker_sdk.handler_process import serve_runs
from worker_sdk.runs import Handler, Lease, TaskRun

log = logging.getLogger(__name__)

TERMINATE_GRACE = 5.0
"""How long a child being ended has after SIGTERM (or a retired one after the end of its
commands) before it is killed."""

_TASK_EXCEPTIONS: dict[str, type[TaskException]] = {
    error.reason: error
    for error in (MalformedPayload, ResourceUnavailable, InternalError, RetryTask)
}


class HandlerError(Exception):
    """An exception that is no :class:`~worker_sdk.errors.TaskException`, raised by a handler
    in its child process: its type's name, message and the child's traceback, as text."""


@dataclass(eq=False)
class _Child:
    """One child of the pool and the worker's ends of its pipes."""

    process: multiprocessing.process.BaseProcess
    commands: Connection
    """To the child: runs and renewals; closing it tells the child to exit."""
    results: Connection
    """From the child: log lines and outcomes; its end of file says the child died."""
    runs: int = 0


class ProcessIsolation:
    """Runs one handler's runs in a pool of ``size`` child processes; see the module docs.

    Use it inside :meth:`running`. ``ValueError`` at once for a handler that cannot reach a
    child: it must be picklable, that is importable by name (a module-level function, or an
    instance of a module-level class), not a lambda or a closure.

    :param max_runs_per_child: replace a child after this many runs (``None``: never).
    """

    def __init__(
        self, handler: Handler, *, size: int, max_runs_per_child: int | None = None
    ) -> None:
        try:
            pickle.dumps(handler)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            raise ValueError(
                f"isolation='process' needs a handler importable by name, not {handler!r}: {error}"
            ) from error
        if size < 1:
            raise ValueError(f"the pool needs at least one process, not {size}")
        if max_runs_per_child is not None and max_runs_per_child < 1:
            raise ValueError(f"max_runs_per_child must be at least 1, not {max_runs_per_child}")
        self._handler = handler
        self._size = size
        self._max_runs = max_runs_per_child
        if "forkserver" in multiprocessing.get_all_start_methods():
            self._context: (
                multiprocessing.context.ForkServerContext | multiprocessing.context.SpawnContext
            ) = multiprocessing.get_context("forkserver")
            module = getattr(handler, "__module__", None) or type(handler).__module__
            preload = ["worker_sdk.handler_process"] + ([module] if module != "__main__" else [])
            self._context.set_forkserver_preload(preload)
        else:
            self._context = multiprocessing.get_context("spawn")
        self._log_queue: multiprocessing.queues.Queue[logging.LogRecord] | None = None
        self._idle: collections.deque[_Child] = collections.deque()
        self._live = 0
        """Children started or being started, and not yet ended."""
        self._changed = asyncio.Event()
        """Set when a child becomes idle or one ends: a reason to look at the pool again."""
        self._chores: set[asyncio.Task[None]] = set()
        """Children being started or reaped in the background."""
        self._closing = False

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Start the pool's children and wait for them; while inside, the pool is kept full
        and the children's log records go to this process's root handlers; at the end every
        child is ended."""
        queue: multiprocessing.queues.Queue[logging.LogRecord] = self._context.Queue()
        listener = logging.handlers.QueueListener(
            queue, *logging.getLogger().handlers, respect_handler_level=True
        )
        listener.start()
        self._log_queue = queue
        self._closing = False
        log.info(
            "process pool starting size=%d maxRunsPerChild=%s", self._size, self._max_runs or "-"
        )
        self._refill()
        try:
            # As Celery's prefork pool, the children are up before the worker takes work: a
            # run claimed meanwhile would wait for one, and a worker polling an empty queue
            # through a slow start would be deep in its idle backoff when the work came.
            await asyncio.gather(*self._chores)
            yield
        finally:
            self._closing = True
            while self._chores:
                await asyncio.wait(set(self._chores))
            await asyncio.gather(*(self._retire(child) for child in self._idle))
            self._idle.clear()
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
        child = await self._acquire()
        key = {"taskId": run.task_id, "runId": run.run_id}
        unwatch = lease.watch(lambda renewed: _send(child, {"renew": {**key, **_lease(renewed)}}))
        try:
            _send(child, {"run": run.to_json(), "sendLog": log_line is not None})
            outcome = await _outcome(child, log_line)
        except asyncio.CancelledError:
            await self._end(child, run)
            raise
        finally:
            unwatch()
        if outcome is None:
            if not await _exited(child.process, within=TERMINATE_GRACE):
                await _terminate(child.process)  # it closed its results, yet lives on
            exitcode = child.process.exitcode
            self._gone(child)
            log.error(
                "handler process died taskId=%s runId=%s exitCode=%s",
                run.task_id,
                run.run_id,
                exitcode,
            )
            raise InternalError(f"the handler's process died with exit code {exitcode}")
        child.runs += 1
        self._release(child)
        error = outcome["error"]
        if error is not None:
            raise _rebuilt(error)

    async def _acquire(self) -> _Child:
        """An idle child; one started now while the pool is short of ``size``, or the next
        to come free."""
        while True:
            while self._idle:
                child = self._idle.popleft()
                if child.process.exitcode is None:
                    return child
                # Died while idle (the OOM killer, say): nothing of a run is lost.
                log.warning(
                    "idle handler process died pid=%s exitCode=%s",
                    child.process.pid,
                    child.process.exitcode,
                )
                self._gone(child)
            if self._live < self._size:
                self._live += 1
                return await self._start()
            self._changed.clear()
            await self._changed.wait()

    def _release(self, child: _Child) -> None:
        """A child whose run is over: back to the idle ones, or retired after its last run."""
        if self._max_runs is not None and child.runs >= self._max_runs:
            self._chore(self._retire(child))
            return
        self._idle.append(child)
        self._changed.set()

    def _refill(self) -> None:
        """Start children in the background until the pool has ``size`` again."""
        while not self._closing and self._live < self._size:
            self._live += 1
            self._chore(self._start_idle())

    def _chore(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _start_idle(self) -> None:
        try:
            child = await self._start()
        except Exception as error:  # a run that needs a child starts one, or says why
            log.error("handler process not started error=%s", error)
            return
        self._idle.append(child)
        self._changed.set()

    async def _start(self) -> _Child:
        """Start a child (counted in ``_live`` by the caller)."""
        commands_in, commands = self._context.Pipe(duplex=False)
        results, results_out = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=serve_runs,
            args=(
                self._handler,
                commands_in,
                results_out,
                self._log_queue,
                logging.getLogger().getEffectiveLevel(),
            ),
            name="handler pool process",
        )
        # Starting talks to the fork server (which the first start launches): not on the
        # event loop. Shielded, so that a cancellation meanwhile finds a child to end.
        starting = asyncio.ensure_future(asyncio.to_thread(process.start))
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:
            await starting
            self._chore(self._retire(_Child(process, commands, results)))
            raise
        except BaseException:
            self._live -= 1
            self._changed.set()
            raise
        finally:
            # The child holds its own copies now; with ours closed, its death reads as EOF.
            commands_in.close()
            results_out.close()
        log.info("handler process started pid=%s", process.pid)
        return _Child(process, commands, results)

    async def _retire(self, child: _Child) -> None:
        """Let a child exit (the end of its commands), killing it if it does not."""
        child.commands.close()
        if not await _exited(child.process, within=TERMINATE_GRACE):
            log.warning("handler process did not exit, ending it pid=%s", child.process.pid)
            await _terminate(child.process)
        log.info("handler process retired pid=%s runs=%d", child.process.pid, child.runs)
        self._gone(child)

    async def _end(self, child: _Child, run: TaskRun) -> None:
        """End the child of a run that was cancelled."""
        log.info(
            "handler process terminated taskId=%s runId=%s pid=%s",
            run.task_id,
            run.run_id,
            child.process.pid,
        )
        await _terminate(child.process)
        self._gone(child)

    def _gone(self, child: _Child) -> None:
        """Forget an ended child and start its replacement."""
        for connection in (child.commands, child.results):
            connection.close()
        child.process.close()
        self._live -= 1
        self._changed.set()
        self._refill()


def _lease(lease: Lease) -> dict[str, Any]:
    """A run's new ``taken_until`` and credentials, as the child's renewal message has them."""
    return {"takenUntil": lease.taken_until.isoformat(), "credentials": lease.credentials.to_json()}


def _send(child: _Child, message: dict[str, Any]) -> None:
    # OSError: the child has ended; its run's outcome (the end of its results) says so.
    with contextlib.suppress(OSError):
        child.commands.send_bytes(json.dumps(message).encode())


async def _outcome(child: _Child, log_line: Callable[[str], None] | None) -> dict[str, Any] | None:
    """The run's outcome, handing the log lines sent before it to ``log_line``; ``None``
    when the child closed the pipe (died) without one."""
    results = child.results
    while True:
        await _readable(results.fileno(), child.process.sentinel)
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


def _rebuilt(error: dict[str, Any]) -> BaseException:
    """The exception to stand for one the handler raised in the child."""
    reason = error["reason"]
    if reason is None:
        return HandlerError(
            f"{error['type']}: {error['message']}\nIn the handler's process:\n{error['traceback']}"
        )
    if reason == RetryTask.reason:
        return RetryTask(error["message"], retry_after=error.get("retryAfter"))
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


async def _terminate(process: multiprocessing.process.BaseProcess) -> None:
    """SIGTERM, then SIGKILL after :data:`TERMINATE_GRACE`; returns once it is reaped."""
    process.terminate()
    if not await _exited(process, within=TERMINATE_GRACE):
        process.kill()
        await _readable(process.sentinel)
        process.join()
