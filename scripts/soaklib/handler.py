"""The soak workers' handler: ``queue-worker ... soaklib.handler:handle``.

It sleeps for ``payload["sleep"]`` seconds (chosen by the task creator: mostly short, a few
longer than the claim timeout so the worker must reclaim), raises if ``payload["fail"]`` (the
run fails), and journals the call: a ``start``
record before anything else and an ``end`` record however the call ends (returned,
cancelled because the claim was lost or the worker is shutting down, or raised). The
journal file and the worker's id come from ``SOAK_JOURNAL`` and ``SOAK_WORKER_ID``.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from soaklib.journal import Journal
from worker_sdk import TaskRun

_journal: Journal | None = None


def _get_journal() -> Journal:
    global _journal
    if _journal is None:
        _journal = Journal(Path(os.environ["SOAK_JOURNAL"]), os.environ["SOAK_WORKER_ID"])
    return _journal


async def handle(run: TaskRun) -> None:
    journal = _get_journal()
    journal.write("start", run.task_id, run.run_id, time.time())
    how = "error"
    try:
        payload = run.payload if isinstance(run.payload, dict) else {}
        await asyncio.sleep(float(payload.get("sleep", 0.0)))
        if payload.get("fail"):
            raise RuntimeError("the soak task fails, as asked")
        how = "ok"
    except asyncio.CancelledError:
        how = "cancelled"
        raise
    finally:
        journal.write("end", run.task_id, run.run_id, time.time(), how)
