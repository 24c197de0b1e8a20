"""When to act: backoff and jitter, and monotonic deadlines derived from the server's times.

Everything here is pure (times and random sources are passed in) so it is tested with plain
values. Deadlines the coordinator states as wall-clock times (``takenUntil``, ``expires``) are
turned into :func:`time.monotonic` deadlines once, when the answer arrives, measured against
the server's own ``Date`` header: a worker whose wall clock is wrong, or jumps, still
reclaims and refreshes in time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

DATE_RESOLUTION = 1.0
"""The HTTP ``Date`` header has one-second resolution, so a deadline computed from it may be
up to this late; it is subtracted to stay on the safe side."""

RECLAIM_FRACTION = 2 / 3
"""Reclaim after this share of the remaining claim time, leaving a third for retries."""

REFRESH_MARGIN = 300.0
"""Refresh signed URLs with at least this many seconds left (docs/protocol.md: five minutes)."""


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Exponential backoff with jitter for retrying transient failures.

    Retry ``n`` (0-based) waits a uniformly random time in ``[c/2, c]`` with
    ``c = min(cap, base * 2**n)``: the floor keeps a fleet of workers from retrying in
    lockstep yet guarantees some rest, the cap bounds the wait during a long outage.
    """

    base: float = 1.0
    cap: float = 60.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        # The exponent is clamped because 2**n overflows a float long before anyone retries
        # that often; by then the cap applies anyway.
        ceiling = min(self.cap, self.base * 2 ** min(attempt, 32))
        return rng.uniform(ceiling / 2, ceiling)


def jittered(seconds: float, rng: random.Random) -> float:
    """``seconds`` give or take half, so idle workers spread their polls over time."""
    return rng.uniform(seconds / 2, seconds * 1.5)


def idle_pause(
    empty_passes: int, gets: int, *, idle_delay: float, idle_rate: float, rng: random.Random
) -> float:
    """The pause after the ``empty_passes``-th pass in a row that found no work, a pass that
    sent ``gets`` Azure requests.

    The first pause is ``idle_delay``; each further one doubles it, up to the pause that brings
    the worker down to ``idle_rate`` Azure requests a second on average (``gets / idle_rate``,
    or ``idle_delay`` if that is longer), all :func:`jittered`. Growing only while nothing is
    found keeps a worker between bursts of work as quick to look as a busy one.
    """
    grown = idle_delay * 2 ** min(max(0, empty_passes - 1), 32)
    return jittered(min(grown, max(idle_delay, gets / idle_rate)), rng)


LONG_POLL_TRANSIT = 1.0
"""How long a long poll's answer may take to arrive after the server stamped it: a long poll
(claimWork) is answered once the server has something, so its ``Date`` is measured from the
answer's arrival less this, not from the request, which may have waited twenty seconds."""


def deadline(*, stamped_after: float, until: datetime, server_time: datetime) -> float:
    """The monotonic time at which the server's wall-clock time ``until`` arrives.

    ``stamped_after`` is a monotonic time no later than the server's stamping of its answer
    (the request's sending, or for a long poll the answer's arrival less
    :data:`LONG_POLL_TRANSIT`), so the result errs early; ``server_time`` is the answer's
    ``Date``.
    """
    return stamped_after + (until - server_time).total_seconds() - DATE_RESOLUTION


def reclaim_at(*, now: float, expires_at: float) -> float:
    """When to reclaim a claim that expires at monotonic ``expires_at``."""
    return now + max(0.0, expires_at - now) * RECLAIM_FRACTION


def refresh_at(*, sent_at: float, expires_at: float) -> float:
    """When to fetch new signed URLs that stop working at monotonic ``expires_at``.

    Five minutes early, or halfway through their life when that is shorter than ten minutes.
    """
    life = expires_at - sent_at
    return expires_at - min(REFRESH_MARGIN, max(0.0, life) / 2)
