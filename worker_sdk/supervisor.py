"""``queue-worker --processes N``: a supervisor that keeps N worker processes running.

Each child is ``queue-worker`` itself, run again with the same arguments plus
``--processes 1 --worker-id <workerId>-<slot>`` (slots 0..N-1, so every child claims under a
workerId of its own, the same across restarts of a slot) and :data:`SUPERVISOR_ENV` naming
the supervisor. The supervisor

- restarts a child that exits on its own (a crash, a signal, any status but those below)
  after a jittered back-off that grows with each quick failure of that slot;
- forwards SIGTERM and SIGINT to every child, each of which then drains as a single worker
  does (grace period, ``worker-shutdown`` reports), and exits 0 once they all have;
- stops the others and exits with the status of a child that exits 1 (the coordinator
  refuses the worker) or 2 (bad arguments, a handler that does not load): every restart
  would fail the same way.

A child whose supervisor is gone (SIGKILL) notices within a second and stops gracefully.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Sequence

from worker_sdk.timing import Backoff

log = logging.getLogger(__name__)

SUPERVISOR_ENV = "QUEUE_WORKER_SUPERVISOR_PID"
"""Set in a child's environment to the supervisor's process id."""

FATAL_STATUSES = frozenset({1, 2})
"""Child exit statuses that a restart cannot fix."""

STABLE_AFTER = 60.0
"""A child that ran at least this long before it exited restarts without back-off."""


def slot_worker_id(worker_id: str, slot: int) -> str:
    """The workerId of a slot's child: ``worker_id-slot``, within the 38 characters allowed."""
    suffix = f"-{slot}"
    return worker_id[: 38 - len(suffix)] + suffix


class Supervisor:
    """Runs ``processes`` children of ``queue-worker argv``; see the module docs."""

    def __init__(
        self,
        *,
        argv: Sequence[str],
        processes: int,
        worker_id: str,
        metrics_port: int | None = None,
        backoff: Backoff = Backoff(),  # noqa: B008 (frozen, so sharing the default is safe)
    ) -> None:
        self._argv = list(argv)
        self._metrics_port = metrics_port
        self._processes = processes
        self._worker_id = worker_id
        self._backoff = backoff
        self._rng = random.Random()
        self._stopping = asyncio.Event()
        self._children: dict[int, asyncio.subprocess.Process] = {}

    async def run(self) -> int:
        """Supervise until a signal (then 0, once every child has exited) or a fatal child
        exit (then its status)."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        log.info("supervisor started processes=%d pid=%d", self._processes, os.getpid())
        try:
            statuses = await asyncio.gather(*(self._keep(slot) for slot in range(self._processes)))
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
        fatal = [status for status in statuses if status is not None]
        log.info("supervisor stopped status=%d", fatal[0] if fatal else 0)
        return fatal[0] if fatal else 0

    def _on_signal(self, signum: int) -> None:
        log.info(
            "signal received signal=%s children=%d",
            signal.Signals(signum).name,
            len(self._children),
        )
        self._stop(signum)

    def _stop(self, signum: int) -> None:
        self._stopping.set()
        for process in self._children.values():
            if process.returncode is None:
                process.send_signal(signum)

    async def _keep(self, slot: int) -> int | None:
        """Keep the slot's child running until the supervisor stops; the status of a fatal
        exit, ``None`` otherwise."""
        quick_failures = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            worker_id = slot_worker_id(self._worker_id, slot)
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "worker_sdk.cli",
                *self._argv,
                "--processes",
                "1",
                "--worker-id",
                worker_id,
                # children cannot share one port: slot i serves on port + i
                *(
                    ("--metrics-port", str(self._metrics_port + slot))
                    if self._metrics_port is not None
                    else ()
                ),
                env={**os.environ, SUPERVISOR_ENV: str(os.getpid())},
            )
            self._children[slot] = process
            if self._stopping.is_set():  # the signal came while the child was starting
                process.send_signal(signal.SIGTERM)
            log.info(
                "worker process started slot=%d pid=%d workerId=%s", slot, process.pid, worker_id
            )
            status = await process.wait()
            del self._children[slot]
            if self._stopping.is_set():
                log.info(
                    "worker process exited slot=%d pid=%d status=%d", slot, process.pid, status
                )
                return None
            if status in FATAL_STATUSES:
                log.error(
                    "worker process cannot work, stopping all slot=%d pid=%d status=%d",
                    slot,
                    process.pid,
                    status,
                )
                self._stop(signal.SIGTERM)
                return status
            ran = time.monotonic() - started
            quick_failures = 0 if ran >= STABLE_AFTER else quick_failures + 1
            delay = self._backoff.delay(quick_failures - 1, self._rng) if quick_failures else 0.0
            log.warning(
                "worker process exited unexpectedly slot=%d pid=%d status=%d restartIn=%.2f",
                slot,
                process.pid,
                status,
                delay,
            )
            try:
                async with asyncio.timeout(delay):
                    await self._stopping.wait()
            except TimeoutError:
                pass
        return None
