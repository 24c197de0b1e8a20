"""pika's asyncio connection, sending what it writes within one turn of the event loop as one
buffer, publishing a message as its marshaled frames and handing a confirm channel's acks and
nacks straight to their callback (:class:`GatheredWrites`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pika
from pika.adapters.asyncio_connection import AsyncioConnection

from coordinator.pulse.frames import publish_frames

_CONFIRMS = (pika.spec.Basic.Ack, pika.spec.Basic.Nack)


class GatheredWrites(AsyncioConnection):  # type: ignore[misc]  # pika ships no types
    """pika's asyncio connection, handing its transport what it writes within one turn of the
    event loop as one buffer.

    pika writes each frame (a message is three: method, header, body) as a buffer of its own,
    and its transport sends each buffer with a ``send`` of its own once the socket is
    writable, which is a turn of the loop later anyway. Gathered, a batch of messages is one
    system call instead of three a message.

    Per message, :meth:`publish` writes the frames :func:`~coordinator.pulse.frames.
    publish_frames` marshals, and the broker's ack or nack of it on the channel named by
    :meth:`confirm` goes to that callback without pika's dispatch through its callback
    manager, which cost more than the rest of the confirm's handling together (and is only
    what pika would have called).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gathered: list[bytes] = []
        self._confirms: tuple[int, Callable[[Any], None]] | None = None

    def _adapter_emit_data(self, data: bytes) -> None:
        if not self._gathered:
            self.ioloop.call_soon(self._hand_over)
        self._gathered.append(data)

    def _hand_over(self) -> None:
        data, self._gathered = b"".join(self._gathered), []
        if self._transport is not None:  # None once the connection is lost: nothing to send
            super()._adapter_emit_data(data)

    def confirm(self, channel_number: int, on_confirm: Callable[[Any], None]) -> None:
        """Hand each Basic.Ack and Basic.Nack frame of channel ``channel_number`` (in confirm
        mode) to ``on_confirm``."""
        self._confirms = (channel_number, on_confirm)

    def publish(
        self, channel_number: int, exchange: str, routing_key: str, body: bytes, properties: bytes
    ) -> None:
        """What ``Channel.basic_publish`` sends, for the encoded ``properties``
        (:func:`~coordinator.pulse.frames.properties`); the caller has checked that the channel
        is open."""
        data = publish_frames(
            channel_number, exchange, routing_key, body, properties, self._body_max_length
        )
        self.bytes_sent += len(data)  # pika's heartbeat checker reads it
        self._adapter_emit_data(data)

    def _process_frame(self, frame_value: Any) -> None:
        confirms = self._confirms
        if (
            confirms is not None
            and frame_value.channel_number == confirms[0]
            and isinstance(getattr(frame_value, "method", None), _CONFIRMS)
        ):
            self.frames_received += 1
            confirms[1](frame_value)
            return
        super()._process_frame(frame_value)
