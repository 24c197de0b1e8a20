"""Hint publishing: put a pending run's hint into its Azure queue, then confirm it in the store.

A transition that makes a run pending stores the record with ``hint_needed`` first; the hint
is put afterwards and the store told. If the process dies in between, or Azure is down, the
hint keeper (:mod:`coordinator.resolvers.hint_keeper`) puts it again, so no pending run is
stranded and a healthy queue gets no duplicates. Confirmations are group-committed: those that
arrive while one store write is in flight share the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from coordinator.domain.lifecycle import Hint
from coordinator.service.background import Background
from coordinator.service.clock import Clock
from coordinator.service.metrics import ServiceMetrics
from coordinator.store.base import Store

log = logging.getLogger(__name__)


class HintSink(Protocol):
    """Where hints go: :class:`coordinator.azure.queues.QueueService` in production."""

    async def put_hint(self, hint: Hint, *, now: int) -> bool: ...


class HintPublisher:
    """Puts hints and confirms them in the store.

    :param sink: where hints are put; ``None`` when the coordinator runs without Azure (the
        hints then stay unconfirmed until one is configured).
    :param metrics: counts puts and failed puts.
    """

    def __init__(
        self,
        *,
        store: Store,
        sink: HintSink | None,
        clock: Clock,
        background: Background,
        metrics: ServiceMetrics,
    ) -> None:
        self._metrics = metrics
        self._store = store
        self.sink = sink
        self._clock = clock
        self._background = background
        self._confirmations: list[tuple[tuple[str, int], asyncio.Future[None]]] = []
        self._confirming = False
        self.listeners: list[Callable[[Hint], None]] = []
        """Called after each hint put succeeds (claimWork's wake-up)."""

    @property
    def enabled(self) -> bool:
        return self.sink is not None

    async def publish(self, hint: Hint) -> bool:
        """Put a hint and confirm it in the store; on failure leave it to the hint keeper.

        :returns: whether a message was put (not when past the deadline or without Azure).
        """
        if self.sink is None:
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
        await self._confirm(hint.task_id, hint.run_id)
        if put:
            self._metrics.hint_put()
            for listener in self.listeners:
                listener(hint)
        return put

    async def _confirm(self, task_id: str, run_id: int) -> None:
        done = asyncio.get_running_loop().create_future()
        self._confirmations.append(((task_id, run_id), done))
        if not self._confirming:
            self._confirming = True
            self._background.spawn(self._write_confirmations())
        await done

    async def _write_confirmations(self) -> None:
        try:
            while self._confirmations:
                batch, self._confirmations = self._confirmations, []
                try:
                    await self._store.confirm_hints([hint for hint, _ in batch])
                except Exception as error:
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(error)
                else:
                    for _, done in batch:
                        if not done.done():
                            done.set_result(None)
        finally:
            self._confirming = False
