"""The one rule for a run's progress value, shared by the coordinator (reportProgress checks
what it stores) and the worker SDK (``run.progress`` refuses a bad value at the call, before
anything is sent): a fraction from 0 to 1 and an optional message of at most
:data:`MAX_MESSAGE_LENGTH` characters. Imports neither ``coordinator`` nor ``worker_sdk``.
"""

from __future__ import annotations

import math

MAX_MESSAGE_LENGTH = 1000
"""The longest progress message, in characters: a line for a dashboard, not a log."""


def checked(fraction: object, message: object) -> tuple[float, str | None]:
    """``fraction`` (as a float) and ``message`` as a report takes them.

    :raises ValueError: ``fraction`` is not a number from 0 to 1 (NaN included), or
        ``message`` is not a string of at most :data:`MAX_MESSAGE_LENGTH` characters.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise ValueError(f"fraction must be a number from 0 to 1, not {fraction!r}")
    if math.isnan(fraction) or not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be from 0 to 1, not {fraction!r}")
    if message is not None and not isinstance(message, str):
        raise ValueError(f"message must be a string, not {message!r}")
    if message is not None and len(message) > MAX_MESSAGE_LENGTH:
        raise ValueError(
            f"message has {len(message)} characters; at most {MAX_MESSAGE_LENGTH} are kept"
        )
    return float(fraction), message
