"""The no-op work of every row: an SDK handler (``queue-worker benchlib.noop:handle``) and an
RQ job function (``benchlib.noop.job``).

Nothing is imported at run time: RQ's default worker imports the job's module in every
forked work horse, and that import must not be what the peer row measures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker_sdk import TaskRun


async def handle(run: TaskRun) -> None:
    """Resolves the run ``completed`` at once."""


def job() -> None:
    """An RQ job that does nothing."""
