"""Handlers that ``queue-worker`` processes run in tests/e2e/test_workers_e2e.py.

Every handler appends what it did to a journal, one JSON object a line, so the test can see
what ran where and when even after a worker process was killed::

    {"event": "start" | "end" | "cancelled", "taskId": ..., "runId": ..., "outcome": ...,
     "worker": $E2E_WORKER, "pid": ..., "t": <wall-clock seconds>}

The journal file is named by ``$E2E_JOURNAL`` (all worker processes of a test share it; each
line is one ``O_APPEND`` write, which Linux keeps whole).

The payload says what to do; each value is either one value for every run or a list indexed
by ``runId`` (the last element for later runs), so a retry can behave differently::

    {"sleep": seconds, "outcome": "complete" | "fail" | "malformed-payload"
                                  | "resource-unavailable" | "internal-error" | "retry"
                                  | "exit"}

``retry`` raises :class:`~worker_sdk.RetryTask`; ``exit`` ends the handler's process at once
with ``os._exit(1)`` (for ``--isolation process``: it would end a worker without it).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from worker_sdk import InternalError, MalformedPayload, ResourceUnavailable, RetryTask, TaskRun

JOURNAL_ENV = "E2E_JOURNAL"
WORKER_ENV = "E2E_WORKER"

_EXCEPTIONS = {
    "malformed-payload": MalformedPayload,
    "resource-unavailable": ResourceUnavailable,
    "internal-error": InternalError,
    "retry": RetryTask,
}


def record(event: str, run: TaskRun, **fields: Any) -> None:
    """Append one journal line for ``run``."""
    line = {
        "event": event,
        "taskId": run.task_id,
        "runId": run.run_id,
        "worker": os.environ.get(WORKER_ENV, ""),
        "pid": os.getpid(),
        "t": time.time(),
        **fields,
    }
    fd = os.open(os.environ[JOURNAL_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def for_run(value: Any, run_id: int) -> Any:
    """``value`` itself, or its element for ``run_id`` when it is a list."""
    if isinstance(value, list):
        return value[min(run_id, len(value) - 1)]
    return value


async def handle(run: TaskRun) -> None:
    payload = run.payload if isinstance(run.payload, dict) else {}
    seconds = float(for_run(payload.get("sleep", 0), run.run_id))
    outcome = str(for_run(payload.get("outcome", "complete"), run.run_id))
    record("start", run)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        record("cancelled", run)
        raise
    record("end", run, outcome=outcome)
    if outcome == "exit":
        os._exit(1)
    if outcome == "fail":
        raise RuntimeError("the payload asked this run to fail")
    if outcome in _EXCEPTIONS:
        raise _EXCEPTIONS[outcome](f"the payload asked for {outcome}")
