"""Runs the background actors on an interval until stopped.

A pass that did a full batch of work runs again at once; an idle one waits for the interval.
A failing pass is logged and retried on the next tick: one bad row must not stop the
resolvers. A pass that fails for want of the store is retried without a line of its own: the
store logs each outage once, when it begins and when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from coordinator.store.errors import StoreUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class Actor:
    """One background actor.

    :param name: for logs.
    :param run_once: one pass; returns how many tasks it acted on.
    :param interval: seconds between idle passes.
    :param busy_at: a pass acting on at least this many runs again at once.
    :param log_passes: an INFO line for each pass that acted (off for the event publisher,
        whose passes act every 100 ms under load; its counter says what they did).
    """

    name: str
    run_once: Callable[[], Awaitable[int]]
    interval: float
    busy_at: int = 100
    log_passes: bool = True


PassObserver = Callable[[str, int], None]
"""Told ``(actor name, count)`` after every pass (the resolver-actions counter)."""


async def run_forever(actor: Actor, stop: asyncio.Event, on_pass: PassObserver) -> None:
    while not stop.is_set():
        try:
            count = await actor.run_once()
        except StoreUnavailable:
            count = 0
        except Exception:
            log.exception("background pass failed actor=%s", actor.name)
            count = 0
        on_pass(actor.name, count)
        if count and actor.log_passes:
            log.info("background pass actor=%s acted=%d", actor.name, count)
        if count >= actor.busy_at:
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), actor.interval)


class Runner:
    """Starts actors as tasks and stops them together."""

    def __init__(self, actors: list[Actor], *, on_pass: PassObserver) -> None:
        self._actors = actors
        self._on_pass = on_pass
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.get_running_loop().create_task(run_forever(actor, self._stop, self._on_pass))
            for actor in self._actors
        ]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
