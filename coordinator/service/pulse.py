"""Publishing the outbox to Taskcluster's Pulse exchanges over AMQP (aio-pika).

:class:`PulsePublisher` holds one connection and one confirm channel to the broker, opened when
needed. :meth:`PulsePublisher.publish` sends a batch of outbox entries in order, as persistent
JSON messages to ``exchange/taskcluster-queue/v1/<name>`` (topic exchanges, declared durable),
with the task's routes in the ``CC`` header, and returns how many of them (a prefix) the broker
confirmed; the store deletes those. A broker that goes away is one warning (and one line when
it is back), however many passes fail in between: the entries stay in the outbox and are
published again, so a message may arrive twice, never not at all (docs/events.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange
from aio_pika.exceptions import ProbableAuthenticationError

from coordinator.domain.events import EXCHANGE_PREFIX, OutboxEntry
from coordinator.domain.urls import without_credentials
from coordinator.service.clock import Clock
from coordinator.service.metrics import ServiceMetrics
from coordinator.store.base import Store

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
"""Seconds a connection attempt may take."""

PUBLISH_TIMEOUT = 30.0
"""Seconds a batch may wait for the broker's confirms before it counts as an outage."""

RETRY_EVERY = 1.0
"""Seconds between connection attempts during an outage."""


class BrokerRefused(Exception):
    """The broker's address or credentials are wrong: a configuration error, not an outage."""


def message_of(entry: OutboxEntry) -> aio_pika.Message:
    """The AMQP message of ``entry``: persistent JSON, its routes in the ``CC`` header."""
    headers: dict[str, object] = {"CC": list(entry.cc)} if entry.cc else {}
    return aio_pika.Message(
        entry.body_json.encode(),
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        headers=headers,  # type: ignore[arg-type]
    )


class PulsePublisher:
    """Publishes outbox entries to the broker at ``url``.

    :param metrics: counts ``queue_events_published_total{exchange}``.
    """

    def __init__(self, url: str, *, metrics: ServiceMetrics) -> None:
        self._url = url
        self.name = without_credentials(url)
        self._metrics = metrics
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._exchanges: dict[str, AbstractExchange] = {}
        self._down = False
        self._tried_at = float("-inf")

    async def ready(self) -> bool:
        """Whether a channel is open, opening one if there is none (during an outage at most
        every :data:`RETRY_EVERY` seconds): the publisher reads no outbox rows while the
        broker is away."""
        if self._channel is not None and not self._channel.is_closed:
            return True
        loop = asyncio.get_running_loop()
        if self._down and loop.time() - self._tried_at < RETRY_EVERY:
            return False
        self._tried_at = loop.time()
        try:
            await self._channel_open()
        except Exception as error:
            self._outage(error)
            await self._drop()
            return False
        return True

    async def check(self) -> None:
        """Connect once at start-up.

        :raises BrokerRefused: the host is unknown or the broker refused the credentials.
            A broker that cannot be reached otherwise (down, refusing connections) is an
            outage: logged, and the outbox keeps the messages until it is back.
        """
        host = urlsplit(self._url).hostname or ""
        try:
            await asyncio.get_running_loop().getaddrinfo(host, None)
        except socket.gaierror as error:
            raise BrokerRefused(f"unknown host {host!r} ({error.strerror or error})") from None
        try:
            await self._channel_open()
        except BrokerRefused:
            raise
        except Exception as error:
            self._outage(error)
            await self._drop()

    async def _channel_open(self) -> AbstractChannel:
        if self._channel is not None and not self._channel.is_closed:
            return self._channel
        await self._drop()
        try:
            self._connection = await aio_pika.connect(self._url, timeout=CONNECT_TIMEOUT)
        except ProbableAuthenticationError as error:
            reason = str(error).split(" For details")[0]
            raise BrokerRefused(f"the broker refused the credentials ({reason})") from None
        self._channel = await self._connection.channel(publisher_confirms=True)
        return self._channel

    async def _exchange(self, channel: AbstractChannel, name: str) -> AbstractExchange:
        exchange = self._exchanges.get(name)
        if exchange is None:
            exchange = await channel.declare_exchange(
                name, aio_pika.ExchangeType.TOPIC, durable=True
            )
            self._exchanges[name] = exchange
        return exchange

    async def publish(self, entries: Sequence[OutboxEntry]) -> int:
        """Publish ``entries`` in order; how many (a prefix) the broker confirmed. Never
        raises for a broker outage: the rest stay in the outbox for the next pass."""
        confirmed = 0
        try:
            channel = await self._channel_open()
            exchanges = [
                await self._exchange(channel, EXCHANGE_PREFIX + e.exchange) for e in entries
            ]
            # One channel keeps the order in which the messages are sent, and aiormq sends
            # them in the order of these calls (its channel lock is first come, first served);
            # the confirms are awaited together.
            sends = [
                asyncio.ensure_future(
                    exchange.publish(
                        message_of(entry),
                        routing_key=entry.routing_key,
                        timeout=PUBLISH_TIMEOUT,
                    )
                )
                for exchange, entry in zip(exchanges, entries, strict=True)
            ]
            results = await asyncio.gather(*sends, return_exceptions=True)
            for entry, result in zip(entries, results, strict=True):
                if isinstance(result, BaseException):
                    raise result
                confirmed += 1
                self._metrics.event_published(entry.exchange)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # AMQPError, OSError, TimeoutError, a nack...
            # whatever failed, the unconfirmed rest stays in the outbox for the next pass
            self._outage(error)
            await self._drop()
        else:
            if self._down:
                self._down = False
                log.warning("pulse broker reachable again broker=%s", self.name)
        return confirmed

    def _outage(self, error: BaseException) -> None:
        """Log the first failure of an outage only (the caller drops the connection, and the
        next pass opens another)."""
        if not self._down:
            self._down = True
            log.warning(
                "pulse broker unreachable broker=%s error=%r: events wait in the outbox",
                self.name,
                error,
            )

    async def _drop(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        self._exchanges.clear()
        if connection is not None:
            with contextlib.suppress(Exception):  # gone either way
                await connection.close()

    async def close(self) -> None:
        await self._drop()


class EventOutbox:
    """The outbox as the event publisher sees it: batches from the store to the broker.

    :param depth_every_ms: how often :meth:`publish_batch` also refreshes
        ``queue_event_outbox_depth`` (a count of the table).
    """

    def __init__(
        self,
        *,
        store: Store,
        publisher: PulsePublisher,
        metrics: ServiceMetrics,
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
        """Publish up to ``limit`` of the oldest events; how many were confirmed (and deleted)."""
        done = 0
        if await self.publisher.ready():
            done = await self._store.publish_outbox(limit, self.publisher.publish)
        now = self._clock()
        if self._depth_at is None or now - self._depth_at >= self._depth_every_ms:
            self._depth_at = now
            self._metrics.set_outbox_depth(await self._store.outbox_depth())
        return done
