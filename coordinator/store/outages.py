"""A store's outages: which of a driver's errors mean the store is not there, and one log line
when an outage begins and one when it ends, however many calls fail in between.

Each driver runs the calls of a running coordinator through :meth:`OutageWatch.watch`, so one
watch per store sees every call, from requests and background actors alike: the API and the
runner then answer or skip without logging.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from coordinator.store.errors import StoreUnavailable

T = TypeVar("T")

log = logging.getLogger(__name__)


class OutageWatch:
    """Turns a driver's outage errors into :class:`StoreUnavailable` and logs each outage once.

    An outage begins with the first call that fails for want of the store and ends with the
    first success of a call started after it began: a call that was already under way when
    the store went (or came back) says nothing about the store's state since, so stragglers
    neither end an outage early nor begin a new one.

    :param store: the store's name in the log and the errors: driver and host or path, never
        a password.
    :param is_outage: whether an error the driver raised means the store is not there (not a
        bug, nor a refusal of the statement).
    """

    def __init__(self, *, store: str, is_outage: Callable[[BaseException], bool]) -> None:
        self.store = store
        self._is_outage = is_outage
        self._started = 0
        """Calls started so far; each call's ticket is the count when it started."""
        self._down_after: int | None = None
        """While down: the calls started when the outage was seen; those after it can end it."""
        self._up_after = 0
        """The calls started when the store was last seen back; those after it can fail anew."""
        self._down_since = 0.0
        self._failures = 0

    async def watch(self, call: Awaitable[T]) -> T:
        """``call``'s result.

        :raises StoreUnavailable: ``call`` failed for want of the store (its error chained).
        """
        self._started += 1
        ticket = self._started
        try:
            result = await call
        except Exception as error:
            if not self._is_outage(error):
                raise
            raise self._failed(error, ticket) from error
        if self._down_after is not None and ticket > self._down_after:
            self._back()
        return result

    def _failed(self, error: BaseException, ticket: int) -> StoreUnavailable:
        lines = str(error).splitlines()
        reason = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
        self._failures += 1
        if self._down_after is None and ticket > self._up_after:
            self._down_after, self._down_since, self._failures = self._started, time.monotonic(), 1
            log.warning(
                "store unavailable, calls answered 503 until it is back store=%s error=%r",
                self.store,
                reason,
            )
        return StoreUnavailable(store=self.store, reason=reason)

    def _back(self) -> None:
        log.warning(
            "store available again store=%s down_for=%.1fs calls_failed=%d",
            self.store,
            time.monotonic() - self._down_since,
            self._failures,
        )
        self._down_after, self._up_after = None, self._started
