"""A running run's progress (reportProgress): how far along its worker says it is, as a
fraction from 0 to 1, with an optional short message, and when it said so.

The store keeps the last report of each run; the task's runs' reports are read together
(``GET /task/<taskId>/progress``). Times are epoch milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coordinator.domain.errors import InputError

MAX_MESSAGE_LENGTH = 1000
"""The longest progress message, in characters: a line for a dashboard, not a log."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunProgress:
    """Run ``run_id`` of ``task_id`` was ``fraction`` done at ``updated``."""

    task_id: str
    run_id: int
    fraction: float
    message: str | None
    updated: int


def checked_progress(fraction: object, message: object) -> tuple[float, str | None]:
    """``fraction`` and ``message`` as a report takes them.

    :raises InputError: ``fraction`` is not a number from 0 to 1 (NaN included), or
        ``message`` is not a string of at most :data:`MAX_MESSAGE_LENGTH` characters.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise InputError(f"fraction must be a number from 0 to 1, not {fraction!r}")
    if math.isnan(fraction) or not 0 <= fraction <= 1:
        raise InputError(f"fraction must be from 0 to 1, not {fraction!r}")
    if message is not None and not isinstance(message, str):
        raise InputError(f"message must be a string, not {message!r}")
    if message is not None and len(message) > MAX_MESSAGE_LENGTH:
        raise InputError(
            f"message has {len(message)} characters; at most {MAX_MESSAGE_LENGTH} are kept"
        )
    return float(fraction), message
