"""The coordinator's clock: epoch milliseconds, injectable so tests drive time themselves."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]
"""A clock: ``() -> now`` in epoch milliseconds."""


def wall_clock() -> int:
    """Now, in epoch milliseconds (freezegun-friendly: it reads ``time.time``)."""
    return int(time.time() * 1000)
