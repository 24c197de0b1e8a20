"""A running run's progress (reportProgress): how far along its worker says it is, as a
fraction from 0 to 1, with an optional short message, and when it said so.

The store keeps the last report of each run; the task's runs' reports are read together
(``GET /task/<taskId>/progress``). Times are epoch milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import run_progress
from coordinator.domain.errors import InputError


@dataclass(frozen=True, kw_only=True, slots=True)
class RunProgress:
    """Run ``run_id`` of ``task_id`` was ``fraction`` done at ``updated``."""

    task_id: str
    run_id: int
    fraction: float
    message: str | None
    updated: int


def checked_progress(fraction: object, message: object) -> tuple[float, str | None]:
    """``fraction`` and ``message`` as a report takes them (:func:`run_progress.checked`).

    :raises InputError: ``fraction`` is not a number from 0 to 1 (NaN included), or
        ``message`` is not a string of at most ``run_progress.MAX_MESSAGE_LENGTH`` characters.
    """
    try:
        return run_progress.checked(fraction, message)
    except ValueError as error:
        raise InputError(str(error)) from None
