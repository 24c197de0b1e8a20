"""``serve`` with ``COORDINATOR_PROCESSES`` above 1: that many serve processes on one port,
each a replica of the one PostgreSQL store exactly as separate coordinators are
(docs/replicas.md), the kernel spreading connections among them (``SO_REUSEPORT``). One
Python process runs on one core at a time; this is how one host's cores serve one port.

The process that was started supervises them and serves nothing itself:

- a process that exits on its own is started again after a pause
  (:class:`~coordinator.cli.restarts.RestartDelays`: 1, 2, 5, 10, then 30 s while restarts
  keep failing within a minute); one WARNING line each time;
- a process that exits with status 2 (a configuration mistake, which it has printed as its one
  line, or a store it cannot reach at start-up) stops them all, and ``serve`` exits 2;
- SIGTERM or SIGINT is passed on to every process, which shuts down as a lone ``serve`` does;
  any still running after :data:`STOP_WAIT_S` is killed.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as EventType
from types import FrameType

from coordinator.cli.restarts import RestartDelays
from coordinator.config import Config, ConfigurationError
from coordinator.logs import configure_logging

log = logging.getLogger(__name__)

STOP_WAIT_S = 30.0
CONFIGURATION_ERROR = 2
"""The exit status of a configuration mistake (``queue-coordinator``'s)."""

_SPAWN = multiprocessing.get_context("spawn")


def _serve_one(config: Config, log_level: str, serving: EventType) -> None:
    """A serve process: what ``serve`` does alone, on a port it shares; ``serving`` is set
    once it listens."""
    from coordinator.cli.main import serve_process

    configure_logging(level=log_level, env=os.environ)
    try:
        serve_process(config, reuse_port=True, serving=serving.set)
    except ConfigurationError as error:
        print(f"queue-coordinator: {error}", file=sys.stderr)
        sys.exit(CONFIGURATION_ERROR)


@dataclasses.dataclass(kw_only=True)
class _Slot:
    """One of the serve processes, across its restarts."""

    number: int
    process: BaseProcess
    serving: EventType
    """Set once the process listens (kept here: the child unpickles it after it starts)."""
    started: float
    delays: RestartDelays = dataclasses.field(default_factory=RestartDelays)
    restart_at: float | None = None


def supervise(config: Config, *, log_level: str) -> int:
    """Run ``config.processes`` serve processes until SIGTERM or SIGINT; the exit status."""
    child_config = dataclasses.replace(config, processes=1)
    stopping: list[int] = []

    def start(number: int) -> tuple[BaseProcess, EventType]:
        serving = _SPAWN.Event()
        process = _SPAWN.Process(
            target=_serve_one,
            args=(child_config, log_level, serving),
            name=f"queue-coordinator serve {number}",
        )
        process.start()
        return process, serving

    def stop(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    # The first alone until it serves: it applies the migrations, and a configuration mistake
    # is then one line, not one per process.
    first, serving = start(0)
    while not serving.wait(0.2):
        if stopping:
            _stop_all([first])
            return 0
        if first.exitcode is not None:
            return CONFIGURATION_ERROR if first.exitcode == CONFIGURATION_ERROR else 1
    slots = [_Slot(number=0, process=first, serving=serving, started=time.monotonic())]
    for number in range(1, config.processes):
        process, serving = start(number)
        slots.append(
            _Slot(number=number, process=process, serving=serving, started=time.monotonic())
        )
    log.info(
        "serving with %d processes port=%d pids=%s",
        len(slots),
        config.port,
        ",".join(str(slot.process.pid) for slot in slots),
    )
    status = 0
    while not stopping:
        running = [slot.process.sentinel for slot in slots if slot.restart_at is None]
        multiprocessing.connection.wait(running, timeout=0.2)
        now = time.monotonic()
        for slot in slots:
            if slot.restart_at is None and slot.process.exitcode is not None:
                if slot.process.exitcode == CONFIGURATION_ERROR:
                    status = CONFIGURATION_ERROR
                    stopping.append(0)
                    break
                delay = slot.delays.after(now - slot.started)
                log.warning(
                    "serve process %d exited pid=%s exitCode=%s restartIn=%.0fs",
                    slot.number,
                    slot.process.pid,
                    slot.process.exitcode,
                    delay,
                )
                slot.restart_at = now + delay
            elif slot.restart_at is not None and now >= slot.restart_at:
                slot.process, slot.serving = start(slot.number)
                slot.started, slot.restart_at = now, None
                log.info("serve process %d started pid=%s", slot.number, slot.process.pid)
    _stop_all([slot.process for slot in slots])
    return status


def _stop_all(processes: list[BaseProcess]) -> None:
    """SIGTERM each process still running, then SIGKILL those left after the wait."""
    for process in processes:
        if process.exitcode is None and process.pid is not None:
            os.kill(process.pid, signal.SIGTERM)
    give_up = time.monotonic() + STOP_WAIT_S
    for process in processes:
        process.join(max(0.0, give_up - time.monotonic()))
        if process.exitcode is None:
            log.warning("serve process did not stop, killed pid=%s", process.pid)
            process.kill()
            process.join()
