"""How the Azure layer fails: one error for "Azure did not do it", one for a missing queue.

The store stays the truth whatever Azure does: a caller that gets :class:`QueueUnavailable`
keeps the run's hint unconfirmed and the hint keeper puts it again later.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


class QueueUnavailable(Exception):
    """Azure failed, refused or did not answer within the request timeout."""


class QueueMissing(QueueUnavailable):
    """The queue does not exist (never created, swept, or the emulator lost it)."""


def unavailable(
    action: str,
    queue: str,
    error: BaseException | str,
    *,
    task_id: str | None = None,
    run_id: int | None = None,
) -> QueueUnavailable:
    """Log a failed Azure request (one WARNING line) and return the error to raise."""
    reason = error if isinstance(error, str) else _error_text(error)
    task = "" if task_id is None else f" taskId={task_id} runId={run_id}"
    logger.warning(
        "azure request failed action=%s queue=%s%s error=%s", action, queue, task, reason
    )
    return QueueUnavailable(f"Azure queue {queue}: {action} failed: {reason}")


def _error_text(error: BaseException) -> str:
    # Azure errors carry the whole XML body over several lines; the first says what happened.
    lines = str(error).splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"
