"""The event publisher's pass over the outbox (:class:`EventOutbox`): a batch from the store to
the broker through :class:`~coordinator.pulse.publisher.PulsePublisher`, the confirmed deleted
and counted, the refused retried or parked (logged once each with the message's key: a taskId,
taskGroupId or ``hookGroupId/hookId``), and the depth gauge. No pass reads the outbox while the
broker is away (docs/events.md)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from coordinator.domain.events import BrokerReply, OutboxEntry, OutboxPass
from coordinator.pulse.publisher import PulsePublisher
from coordinator.service.clock import Clock
from coordinator.store.base import Store

log = logging.getLogger(__name__)


class EventCounts(Protocol):
    """Where the publisher counts what it did: the process's
    :class:`~coordinator.service.metrics.ServiceMetrics`, or, in the publisher's own process,
    what relays them to the API process's (``coordinator/cli/publish_events.py``)."""

    def event_published(self, exchange: str, count: int = 1) -> None: ...

    def event_parked(self, exchange: str, count: int = 1) -> None: ...

    def set_outbox_depth(self, depth: int) -> None: ...


class EventOutbox:
    """The outbox as the event publisher sees it: batches from the store to the broker.

    :param metrics: counts ``queue_events_published_total{exchange}`` and
        ``queue_events_parked_total{exchange}``, and holds ``queue_event_outbox_depth``.
    :param depth_every_ms: how often :meth:`publish_batch` also refreshes
        ``queue_event_outbox_depth`` (a count of the table).
    """

    def __init__(
        self,
        *,
        store: Store,
        publisher: PulsePublisher,
        metrics: EventCounts,
        clock: Clock,
        depth_every_ms: int = 1000,
    ) -> None:
        self._store = store
        self.publisher = publisher
        self._metrics = metrics
        self._clock = clock
        self._depth_every_ms = depth_every_ms
        self._depth_at: int | None = None

    async def publish_batch(self, limit: int) -> int:
        """Publish up to ``limit`` of the oldest events; how many the broker confirmed (and
        the outbox deleted)."""
        done = OutboxPass()
        if await self.publisher.ready():
            done = await self._store.publish_outbox(limit, self._publish, now=self._clock())
        for entry, reason in done.parked:
            self._metrics.event_parked(entry.exchange)
            log.error(
                "pulse message parked key=%s exchange=%s attempts=%d reason=%s: the broker "
                "refused it every time; it is kept in queue_event_outbox_parked",
                entry.key,
                entry.exchange,
                entry.attempts + 1,
                reason,
            )
        now = self._clock()
        if self._depth_at is None or now - self._depth_at >= self._depth_every_ms:
            self._depth_at = now
            self._metrics.set_outbox_depth(await self._store.outbox_depth())
        return done.published

    async def _publish(self, entries: Sequence[OutboxEntry]) -> BrokerReply:
        reply = await self.publisher.publish(entries)
        for entry in entries:
            if entry.id in reply.confirmed:
                self._metrics.event_published(entry.exchange)
        return reply
