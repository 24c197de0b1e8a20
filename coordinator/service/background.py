"""Effects that run after a request has been answered (re-examining dependents, group-committed
hint confirmations), tracked so shutdown and tests can wait for them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from coordinator.store.errors import StoreUnavailable

log = logging.getLogger(__name__)


class Background:
    """A set of fire-and-forget tasks that :meth:`drain` can wait for."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        """Retrieve each task's error, so none is reported as "never retrieved": an effect a
        store outage interrupted is finished by the resolvers (the outage is logged once by the
        store); anything else is a bug and logged with its traceback."""
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and not isinstance(error, StoreUnavailable):
            log.error("background effect failed", exc_info=error)

    async def drain(self) -> None:
        """Wait for every task started so far, and for those they start."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
