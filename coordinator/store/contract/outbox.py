"""The event outbox part of the store contract (docs/events.md): the Pulse messages that
changes write in their own transactions, handed to the publisher in order.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Sequence

from coordinator.domain.events import BrokerReply, OutboxEntry, OutboxPass, QueueEvent


class OutboxStore(abc.ABC):
    """The event outbox: appended to by writes, published in order."""

    @abc.abstractmethod
    async def publish_outbox(
        self,
        limit: int,
        publish: Callable[[Sequence[OutboxEntry]], Awaitable[BrokerReply]],
        *,
        now: int,
    ) -> OutboxPass:
        """Hand up to ``limit`` outbox entries due at ``now``, the oldest first, to
        ``publish``, which says what the broker answered; delete those it confirmed, retry
        those it refused later or park them (:func:`~coordinator.domain.events.after_refusal`:
        into ``queue_event_outbox_parked``), and keep the unanswered. An entry whose key has an
        earlier one waiting out a refusal is not handed out. One caller at a time across
        replicas (others get nothing and return an empty pass), so the order holds.
        """

    @abc.abstractmethod
    async def append_events(self, events: Sequence[QueueEvent]) -> None:
        """Write ``events`` to the outbox in a transaction of their own (the events that
        follow a change rather than being part of it: task-group and artifact messages)."""

    @abc.abstractmethod
    async def outbox_depth(self) -> int:
        """How many events wait in the outbox."""
