"""Publishing outbox entries to Taskcluster's Pulse exchanges over AMQP (pika).

:class:`PulsePublisher` holds one connection and one confirm channel to the broker, opened when
needed, through pika's asyncio adapter on the coordinator's event loop.
:meth:`PulsePublisher.publish` writes a batch of outbox entries in order, as persistent JSON
messages to ``exchange/taskcluster-queue/v1/<name>`` (``exchange/taskcluster-hooks/v1/<name>``
for a hook's; topic exchanges, declared durable), with the task's routes in the ``CC`` header,
and returns the broker's answer per entry: confirmed, refused (a nack, or the channel it closed
over an entry), or none (it went away). No message gets a future or a task of its own (pika's
callbacks cost about a tenth of aio-pika's path per message, docs/events.md), and
:class:`~coordinator.pulse.gathered_writes.GatheredWrites` writes each message as the frames
:mod:`coordinator.pulse.frames` packs, sends what a batch wrote in one system call rather than
one a frame, and hands each confirm to the batch without pika's callback dispatch.

A broker that goes away is one warning (and one line when it is back), however many passes
fail in between: the entries stay in the outbox and are published again, so a message may
arrive twice, never not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import pika
import pika.exceptions

from coordinator.domain.events import BrokerReply, OutboxEntry, exchange_name
from coordinator.domain.urls import without_credentials
from coordinator.pulse.confirms import ConfirmBatch
from coordinator.pulse.frames import properties
from coordinator.pulse.gathered_writes import GatheredWrites

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
"""Seconds a connection attempt may take."""

PUBLISH_TIMEOUT = 30.0
"""Seconds a batch may wait for the broker's confirms before it counts as an outage."""

RETRY_EVERY = 1.0
"""Seconds between connection attempts during an outage."""


class BrokerRefused(Exception):
    """The broker's address or credentials are wrong: a configuration error, not an outage."""


class PulsePublisher:
    """Publishes outbox entries to the broker at ``url``."""

    def __init__(self, url: str) -> None:
        self._url = url
        self.name = without_credentials(url)
        self._connection: GatheredWrites | None = None
        self._gone: asyncio.Future[None] | None = None  # the connection's end
        self._channel: Any = None  # pika.channel.Channel
        self._declared: set[str] = set()
        self._tag = 0  # the delivery tag of the last message published on the channel
        self._batch: ConfirmBatch | None = None
        self._waiting: set[asyncio.Future[Any]] = set()
        self._down = False
        self._tried_at = float("-inf")

    # --- the connection -----------------------------------------------------------------

    def _is_open(self) -> bool:
        return self._channel is not None and self._channel.is_open

    async def ready(self) -> bool:
        """Whether a channel is open, opening one if there is none (during an outage at most
        every :data:`RETRY_EVERY` seconds): the publisher reads no outbox rows while the
        broker is away."""
        if self._is_open():
            return True
        loop = asyncio.get_running_loop()
        if self._down and loop.time() - self._tried_at < RETRY_EVERY:
            return False
        self._tried_at = loop.time()
        try:
            await self._open()
        except Exception as error:
            self._outage(error)
            self._drop()
            return False
        return True

    async def check(self) -> None:
        """Connect once at start-up.

        :raises BrokerRefused: the host is unknown or the broker refused the credentials
            (or the virtual host). A broker that cannot be reached otherwise (down, refusing
            connections) is an outage: logged, and the outbox keeps the messages until it is
            back.
        """
        host = urlsplit(self._url).hostname or ""
        try:
            await asyncio.get_running_loop().getaddrinfo(host, None)
        except socket.gaierror as error:
            raise BrokerRefused(f"unknown host {host!r} ({error.strerror or error})") from None
        try:
            await self._open()
        except BrokerRefused:
            raise
        except Exception as error:
            self._outage(error)
            self._drop()

    async def _open(self) -> None:
        """A connection and a confirm channel."""
        if self._is_open():
            return
        self._drop()
        parameters = pika.URLParameters(self._url)
        parameters.connection_attempts = 1
        parameters.socket_timeout = CONNECT_TIMEOUT
        loop = asyncio.get_running_loop()
        opened: asyncio.Future[Any] = loop.create_future()
        gone = self._gone = loop.create_future()

        def closed(_: Any, error: BaseException) -> None:
            _resolve_future(gone, None)
            self._closed(error, blame_next=False)

        def failed(_: Any, error: BaseException) -> None:
            _resolve_future(gone, None)
            _fail(opened, error)

        self._connection = GatheredWrites(
            parameters,
            on_open_callback=lambda connection: _resolve_future(opened, connection),
            on_open_error_callback=failed,
            on_close_callback=closed,
            custom_ioloop=loop,
        )
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                await opened
        except (
            pika.exceptions.ProbableAuthenticationError,
            pika.exceptions.ProbableAccessDeniedError,
        ) as error:
            reason = str(error.args[0] if error.args else error).split(" For details")[0]
            raise BrokerRefused(
                f"the broker refused the credentials or the virtual host ({reason.strip()})"
            ) from None
        channel = await self._call(lambda done: self._connection_channel(done))
        channel.add_on_close_callback(self._channel_closed)
        self._channel = channel
        self._tag = 0
        await self._call(lambda done: channel.confirm_delivery(self._on_confirm, callback=done))
        self._connection.confirm(channel.channel_number, self._on_confirm)

    def _connection_channel(self, done: Callable[[Any], None]) -> None:
        assert self._connection is not None
        self._connection.channel(on_open_callback=done)

    async def _call(self, start: Callable[[Callable[[Any], None]], None]) -> Any:
        """Start a pika operation with a completion callback, and wait for it (failed if the
        connection or channel closes meanwhile)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.add(future)
        try:
            start(lambda result: _resolve_future(future, result))
            async with asyncio.timeout(PUBLISH_TIMEOUT):
                return await future
        finally:
            self._waiting.discard(future)

    async def _exchange(self, name: str) -> None:
        if name not in self._declared:
            channel = self._channel
            await self._call(
                lambda done: channel.exchange_declare(
                    name, exchange_type="topic", durable=True, callback=done
                )
            )
            self._declared.add(name)

    def _channel_closed(self, channel: Any, error: BaseException) -> None:
        if channel is self._channel:
            # closed by the broker over a message (an oversized one, say): that message is
            # refused; the connection is dropped and the next pass opens another
            by_broker = isinstance(error, pika.exceptions.ChannelClosedByBroker)
            self._closed(error, blame_next=by_broker)

    def _closed(self, error: BaseException, *, blame_next: bool) -> None:
        self._channel = None
        self._declared.clear()
        if self._batch is not None:
            self._batch.cut(error, blame_next=blame_next)
        for future in list(self._waiting):
            _fail(future, error)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        if self._batch is not None:
            self._batch.answer(
                method.delivery_tag,
                multiple=bool(method.multiple),
                acked=isinstance(method, pika.spec.Basic.Ack),
            )

    # --- publishing ---------------------------------------------------------------------

    async def publish(self, entries: Sequence[OutboxEntry]) -> BrokerReply:
        """Publish ``entries`` in order; what the broker answered. Never raises for a broker
        outage: the unanswered stay in the outbox for the next pass."""
        batch: ConfirmBatch | None = None
        try:
            await self._open()
            for name in {entry.exchange for entry in entries}:
                await self._exchange(exchange_name(name))
            # One channel keeps the order in which the messages are sent; the confirms are
            # awaited together.
            batch = self._batch = ConfirmBatch(entries, self._tag + 1)
            channel, connection = self._channel, self._connection
            if not self._is_open() or connection is None:  # closed while declaring
                raise pika.exceptions.ChannelWrongStateError("the channel closed")
            for entry in entries:
                self._tag += 1
                connection.publish(
                    channel.channel_number,
                    exchange_name(entry.exchange),
                    entry.routing_key,
                    entry.body_json.encode(),
                    properties(entry.cc),
                )
            async with asyncio.timeout(PUBLISH_TIMEOUT):
                await batch.done
        except asyncio.CancelledError:
            raise
        except Exception as error:  # AMQPError, OSError, TimeoutError, a closed channel...
            # whatever failed, the unanswered rest stays in the outbox for the next pass
            if batch is None or not batch.refused:
                self._outage(error)
            self._drop()
        else:
            if self._down:
                self._down = False
                log.warning("pulse broker reachable again broker=%s", self.name)
        finally:
            self._batch = None
        return BrokerReply() if batch is None else batch.reply()

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

    def _drop(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        self._declared.clear()
        if connection is not None and not (connection.is_closed or connection.is_closing):
            with contextlib.suppress(Exception):  # gone either way
                connection.close()

    async def close(self) -> None:
        gone = self._gone if self._connection is not None else None
        self._drop()
        if gone is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await gone


def _resolve_future(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
