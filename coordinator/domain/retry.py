"""Retry policies: how long an automatic retry waits before it can be claimed.

A task's ``retryDelay`` is either exponential (``{"base", "factor", "max"}``: retry ``n``
waits ``min(max, base·factor^(n-1))`` seconds) or an explicit schedule (``{"schedule": [s1,
s2, …]}``: retry ``n`` waits ``s_n``, the last value repeating). Without one, the coordinator's
``COORDINATOR_RETRY_DELAY_BASE`` ``c`` gives ``c·2^(n-1)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryDelay:
    """A retry policy, in milliseconds.

    :param schedule: explicit delays of retries 1, 2, …; when given, the other fields are
        unused.
    :param max: no delay exceeds it; ``None`` for no bound (the deadline is one anyway).
    """

    base: int = 0
    factor: float = 2.0
    max: int | None = None
    schedule: tuple[int, ...] = ()

    def before(self, retry: int) -> int:
        """How long retry number ``retry`` (1 for the first) waits, in ms."""
        if retry < 1:
            raise ValueError(f"retries are numbered from 1, not {retry}")
        if self.schedule:
            return self.schedule[min(retry, len(self.schedule)) - 1]
        if self.base == 0:
            return 0
        # factor^(n-1) overflows a float past ~1000 retries; 49 is the most a task has.
        delay = self.base * self.factor ** min(retry - 1, 64)
        return int(delay if self.max is None else min(self.max, delay))

    @classmethod
    def from_definition(cls, value: Mapping[str, Any]) -> RetryDelay:
        """The policy of a (schema-valid) ``retryDelay`` object, whose times are seconds."""
        if "schedule" in value:
            return cls(schedule=tuple(_ms(seconds) for seconds in value["schedule"]))
        maximum = value.get("max")
        return cls(
            base=_ms(value["base"]),
            factor=float(value.get("factor", 2)),
            max=None if maximum is None else _ms(maximum),
        )


def _ms(seconds: float) -> int:
    return round(seconds * 1000)
