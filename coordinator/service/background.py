"""Effects that run after a request has been answered (re-examining dependents, group-committed
hint confirmations), tracked so shutdown and tests can wait for them."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Background:
    """A set of fire-and-forget tasks that :meth:`drain` can wait for."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for every task started so far, and for those they start."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
