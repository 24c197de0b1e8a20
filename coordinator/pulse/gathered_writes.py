"""pika's asyncio connection, sending what it writes within one turn of the event loop as one
buffer (:class:`GatheredWrites`)."""

from __future__ import annotations

from typing import Any

from pika.adapters.asyncio_connection import AsyncioConnection


class GatheredWrites(AsyncioConnection):  # type: ignore[misc]  # pika ships no types
    """pika's asyncio connection, handing its transport what it writes within one turn of the
    event loop as one buffer.

    pika writes each frame (a message is three: method, header, body) as a buffer of its own,
    and its transport sends each buffer with a ``send`` of its own once the socket is
    writable, which is a turn of the loop later anyway. Gathered, a batch of messages is one
    system call instead of three a message.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._gathered: list[bytes] = []

    def _adapter_emit_data(self, data: bytes) -> None:
        if not self._gathered:
            self.ioloop.call_soon(self._hand_over)
        self._gathered.append(data)

    def _hand_over(self) -> None:
        data, self._gathered = b"".join(self._gathered), []
        if self._transport is not None:  # None once the connection is lost: nothing to send
            super()._adapter_emit_data(data)
