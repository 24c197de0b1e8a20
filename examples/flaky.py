"""An example worker whose tasks fail on purpose: retries, and a crash process isolation contains.

Payload ``{"fail_runs": int, "how": "retry" | "raise" | "crash"}``, both optional. Runs
numbered below ``fail_runs`` fail, the others complete. How they fail:

- ``"retry"`` (the default) raises :class:`~worker_sdk.RetryTask`: reported
  ``exception/intermittent-task``, so the coordinator adds a ``task-retry`` run while the
  task has retries left; on its last run the worker reports ``failed``;
- ``"raise"`` raises ``RuntimeError``: ``failed`` at once, or retried like ``"retry"`` when
  the worker runs with ``--retry-failures``;
- ``"crash"`` ends the handler's process with ``os._exit(1)``: run it with ``--isolation
  process``, which reports the run ``exception/internal-error`` and keeps the worker going
  (without isolation it would end the worker itself).

Run it (see examples/README.md)::

    queue-worker --provisioner-id examples --worker-type flaky --isolation process \\
        --retry-failures examples.flaky:handle
"""

from __future__ import annotations

import logging
import os

from worker_sdk import MalformedPayload, RetryTask, TaskRun

log = logging.getLogger(__name__)


def handle(run: TaskRun) -> None:
    payload = run.payload if isinstance(run.payload, dict) else {}
    fail_runs, how = payload.get("fail_runs", 0), payload.get("how", "retry")
    if not isinstance(fail_runs, int) or how not in ("retry", "raise", "crash"):
        raise MalformedPayload(
            f"fail_runs must be an integer and how retry, raise or crash: {payload}"
        )
    log.info(
        "flaky taskId=%s runId=%s retriesLeft=%d failing=%s",
        run.task_id,
        run.run_id,
        run.retries_left,
        run.run_id < fail_runs,
    )
    if run.run_id >= fail_runs:
        return
    if how == "crash":
        os._exit(1)
    if how == "raise":
        raise RuntimeError(f"run {run.run_id} failed on purpose")
    raise RetryTask(f"run {run.run_id} asks for another")
