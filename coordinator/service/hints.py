"""Hint publishing: put a pending run's hint into its Azure queue, then confirm it in the store.

A transition that makes a run pending stores the record with ``hint_needed`` first; the hint
is put afterwards and the store told. If the process dies in between, or Azure is down, the
hint keeper (:mod:`coordinator.resolvers.hint_keeper`) puts it again, so no pending run is
stranded and a healthy queue gets no duplicates.

Confirmations are written at most :data:`CONFIRM_DELAY` seconds after the put, all of that
while's in one store call, and nobody waits for them: a busy worker claims most runs before
then, and the claim's write already cleared the hint's mark, so most confirmations then write
nothing (they were an eighth of the coordinator's CPU per task end to end on SQLite). The hint
keeper writes the waiting ones before each pass (:meth:`HintPublisher.flush`; every resolver
interval, 1 s), so it never takes a hint whose confirmation is on its way for an overdue one,
and its own at once.
A crash inside the delay only costs a duplicate hint, which workers fail to claim and delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from coordinator.domain.lifecycle import Hint
from coordinator.service.background import Background
from coordinator.service.clock import Clock
from coordinator.service.metrics import ServiceMetrics
from coordinator.store.base import Store
from coordinator.store.errors import StoreUnavailable

log = logging.getLogger(__name__)


class HintSink(Protocol):
    """Where hints go: :class:`coordinator.azure.queues.QueueService` in production."""

    async def put_hint(self, hint: Hint, *, now: int) -> bool: ...


CONFIRM_DELAY = 1.0
"""Seconds at most between a hint's put and the store write that confirms it (see the
module)."""


class HintPublisher:
    """Puts hints and confirms them in the store.

    :param sink: where hints are put; ``None`` when the coordinator runs without Azure (the
        hints then stay unconfirmed until one is configured).
    :param metrics: counts puts and failed puts.
    :param confirm_delay: seconds a confirmation waits before it is written.
    """

    def __init__(
        self,
        *,
        store: Store,
        sink: HintSink | None,
        clock: Clock,
        background: Background,
        metrics: ServiceMetrics,
        confirm_delay: float = CONFIRM_DELAY,
    ) -> None:
        self._metrics = metrics
        self._store = store
        self.sink = sink
        self._clock = clock
        self._background = background
        self._confirm_delay = confirm_delay
        self._confirmations: list[tuple[str, int]] = []
        self._confirming = False
        self._flushed = asyncio.Event()
        """Set by :meth:`flush`: a waiting writer need not wait out its delay."""
        self.listeners: list[Callable[[Hint], None]] = []
        """Called for each run made pending: after its hint put succeeds, or at once where
        no hints are put (store dispatch); claimWork's wake-up."""

    @property
    def enabled(self) -> bool:
        """Hints are put (Azure dispatch)."""
        return self.sink is not None

    @property
    def active(self) -> bool:
        """A run made pending has something to do here: a hint to put or listeners to tell."""
        return self.sink is not None or bool(self.listeners)

    async def publish(self, hint: Hint) -> bool:
        """Put a hint and have it confirmed in the store a moment later; on failure leave it
        to the hint keeper. Without Azure (store dispatch) only tell the listeners.

        :returns: whether a message was put (not when past the deadline or without Azure).
        """
        if self.sink is None:
            for listener in self.listeners:
                listener(hint)
            return False
        try:
            put = await self.sink.put_hint(hint, now=self._clock())
        except Exception as error:
            self._metrics.hint_put_failed()
            log.warning(
                "hint not put, hint keeper will retry taskId=%s runId=%s error=%r",
                hint.task_id,
                hint.run_id,
                error,
            )
            return False
        # Not put means past the deadline: no hint will ever be needed, so settle it too.
        self._confirmations.append((hint.task_id, hint.run_id))
        if not self._confirming:
            self._confirming = True
            self._background.spawn(self._write_confirmations())
        if put:
            self._metrics.hint_put()
            for listener in self.listeners:
                listener(hint)
        return put

    async def flush(self) -> None:
        """Write the confirmations waiting for their delay now (the hint keeper before a pass,
        and shutdown)."""
        batch, self._confirmations = self._confirmations, []
        if self._confirming:  # an event nobody waits on would cut the next writer's delay
            self._flushed.set()
        await self._write(batch)

    async def _write_confirmations(self) -> None:
        try:
            while self._confirmations:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._confirm_delay):
                        await self._flushed.wait()
                self._flushed.clear()
                batch, self._confirmations = self._confirmations, []
                await self._write(batch)
        finally:
            self._confirming = False

    async def _write(self, batch: list[tuple[str, int]]) -> None:
        if not batch:
            return
        try:
            await self._store.confirm_hints(batch)
        except StoreUnavailable:
            pass  # the store logs its outage once; the hint keeper puts these again
        except Exception as error:
            log.warning(
                "hints not confirmed, the hint keeper will put them again hints=%d error=%r",
                len(batch),
                error,
            )
