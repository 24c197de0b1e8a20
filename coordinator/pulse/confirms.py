"""The publisher confirms one batch of outbox entries waits for (:class:`ConfirmBatch`): which
delivery tag is which entry, the broker's acks and nacks (one at a time or ``multiple``), and
what a channel closed mid-batch means for the entries still unanswered."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from coordinator.domain.events import BrokerReply, OutboxEntry


class ConfirmBatch:
    """The confirms a batch waits for: entry ``i`` went out with delivery tag
    ``first_tag + i``."""

    def __init__(self, entries: Sequence[OutboxEntry], first_tag: int) -> None:
        self.entries = entries
        self.first_tag = first_tag
        self.confirmed: set[int] = set()
        self.refused: dict[int, str] = {}
        self.answered = 0
        self._lowest = 0  # entries below this index are all answered
        self.done = asyncio.get_running_loop().create_future()

    def answer(self, tag: int, *, multiple: bool, acked: bool) -> None:
        """The broker's ack or nack of ``tag`` (and, ``multiple``, of every earlier tag)."""
        last = tag - self.first_tag
        for index in range(self._lowest if multiple else last, last + 1):
            if 0 <= index < len(self.entries):
                entry_id = self.entries[index].id
                if entry_id in self.confirmed or entry_id in self.refused:
                    continue
                if acked:
                    self.confirmed.add(entry_id)
                else:
                    self.refused[entry_id] = "the broker refused it (nack)"
                self.answered += 1
        while self._lowest < len(self.entries) and self._answered(self._lowest):
            self._lowest += 1
        if self.answered == len(self.entries) and not self.done.done():
            self.done.set_result(None)

    def _answered(self, index: int) -> bool:
        entry_id = self.entries[index].id
        return entry_id in self.confirmed or entry_id in self.refused

    def cut(self, error: BaseException, *, blame_next: bool) -> None:
        """The channel or connection closed before every answer came; with ``blame_next``
        (the broker closed the channel over a message) the first unanswered entry is refused
        with ``error``."""
        if blame_next:
            for index in range(self._lowest, len(self.entries)):
                if not self._answered(index):
                    self.refused[self.entries[index].id] = f"the broker closed the channel: {error}"
                    break
        if not self.done.done():
            self.done.set_exception(error)

    def reply(self) -> BrokerReply:
        return BrokerReply(confirmed=frozenset(self.confirmed), refused=dict(self.refused))
