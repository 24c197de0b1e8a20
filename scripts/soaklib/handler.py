"""The soak workers' handler: ``queue-worker ... soaklib.handler:handle``.

It sleeps for ``payload["sleep"]`` seconds (chosen by the task creator: mostly short, a few
longer than the claim timeout so the worker must reclaim), raises if ``payload["fail"]`` (the
run fails), and journals the call: a ``start``
record before anything else and an ``end`` record however the call ends (returned,
cancelled because the claim was lost or the worker is shutting down, or raised). The
journal file and the worker's id come from ``SOAK_JOURNAL`` and ``SOAK_WORKER_ID``.

Under ``scripts/soak --everything`` a run with ``payload["artifact"]`` logs a line (the run
log the worker uploads) and uploads :data:`ARTIFACT`, whose content :func:`artifact_text`
says, before it sleeps; a payload that calls a function (``payload["function"]``, see
:mod:`soaklib.functions`) is served by the soak's app instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

from soaklib import functions
from soaklib.journal import Journal
from worker_sdk import TaskRun

ARTIFACT = "public/soak.txt"
"""The artifact a run uploads under ``--everything``."""
LOG_LINE = "soak run log"
"""What the run log of such a run holds (followed by the taskId and runId)."""

log = logging.getLogger("soak.handler")
_journal: Journal | None = None


def _get_journal() -> Journal:
    global _journal
    if _journal is None:
        _journal = Journal(Path(os.environ["SOAK_JOURNAL"]), os.environ["SOAK_WORKER_ID"])
    return _journal


def artifact_text(task_id: str, run_id: int) -> str:
    """The content of run ``run_id``'s :data:`ARTIFACT`."""
    return f"{task_id} run {run_id}\n"


async def handle(run: TaskRun) -> None:
    journal = _get_journal()
    journal.write("start", run.task_id, run.run_id, time.time())
    how = "error"
    try:
        payload = run.payload if isinstance(run.payload, dict) else {}
        if payload.get("artifact"):
            log.warning("%s %s %s", LOG_LINE, run.task_id, run.run_id)
            await run.upload_artifact(ARTIFACT, artifact_text(run.task_id, run.run_id).encode())
        if "function" in payload:
            functions.attempt.set(run.run_id)
            await functions.app.serve(run)
        else:
            await asyncio.sleep(float(payload.get("sleep", 0.0)))
            if payload.get("fail"):
                raise RuntimeError("the soak task fails, as asked")
        how = "ok"
    except asyncio.CancelledError:
        how = "cancelled"
        raise
    finally:
        journal.write("end", run.task_id, run.run_id, time.time(), how)
