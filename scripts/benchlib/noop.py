"""The no-op work of every row: an SDK handler (``queue-worker benchlib.noop:handle``, or
:func:`handle_logging`, which logs one line first) and the peers' job function (:func:`job`),
each noting when it started.

A job sent with its send time (the SDK task's ``payload.sentAt``, the peer job's ``sent_at``
argument) appends ``<sent at> <started at>`` (epoch seconds) to a file of its process in the
directory ``$BENCH_STARTS`` names: the rows count the starts inside their window for their
rate, and take pending time = started - sent (the producer's enqueue call -> the handler's
start) for their latency. One ``write`` per job; no import at run time: RQ's forking worker
imports the job's module in every work horse, and that must not be what the peer row measures.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker_sdk import TaskRun

log = logging.getLogger(__name__)

STARTS_ENV = "BENCH_STARTS"
"""The directory of the start files."""

_files: dict[int, int] = {}
"""This process's start file (by pid: a forked work horse opens its own)."""


def note_start(sent_at: float) -> None:
    """Append this job's send and start times to this process's start file."""
    started = time.time()
    directory = os.environ.get(STARTS_ENV)
    if directory is None:
        return
    pid = os.getpid()
    fd = _files.get(pid)
    if fd is None:
        fd = _files[pid] = os.open(
            f"{directory}/starts-{pid}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600
        )
    os.write(fd, f"{sent_at:.6f} {started:.6f}\n".encode())


async def handle(run: TaskRun) -> None:
    """Resolves the run ``completed`` at once, noting its start when it carries ``sentAt``."""
    payload = run.payload
    if isinstance(payload, dict) and "sentAt" in payload:
        note_start(payload["sentAt"])


async def handle_logging(run: TaskRun) -> None:
    """:func:`handle`, after logging one line at INFO (which the run log then holds): the
    handler of the rows that measure the defaults."""
    log.info("bench task handled taskId=%s runId=%d", run.task_id, run.run_id)
    await handle(run)


def job(sent_at: float | None = None) -> None:
    """A peer's job that does nothing but note its start."""
    if sent_at is not None:
        note_start(sent_at)
