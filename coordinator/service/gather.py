"""Awaiting many awaitables at once, but never more than a bound of them in flight (a batch's
hint puts, a pass's blob deletions)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any


async def bounded(work: Iterable[Awaitable[Any]], *, at_once: int) -> None:
    """Await every item of ``work``, at most ``at_once`` at a time; the first failure is raised
    once all have finished (so none is left running unawaited).

    :param work: the awaitables; a generator is consumed as slots free up.
    :param at_once: how many may be in flight together.
    """
    gate = asyncio.Semaphore(at_once)

    async def one(item: Awaitable[Any]) -> None:
        async with gate:
            await item

    results = await asyncio.gather(*(one(item) for item in work), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
