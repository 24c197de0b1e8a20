"""The task inbox part of the store contract (docs/tasks.md#transactional-enqueue): the rows
producers insert in their own transactions, each a createTask request on behalf of the client
it names, taken by the ingester, and those it refused, kept for operators. PostgreSQL only:
SQLite's inbox is always empty (no producer can share a transaction with its one process).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class InboxRow:
    """One inbox row.

    :param definition: the row's text, as the producer wrote it (it may not be JSON).
    :param created: when the producer inserted it, epoch ms.
    :param reason: why the ingester refused it; ``None`` while pending.
    """

    id: int
    task_id: str
    client_id: str
    definition: str
    created: int
    reason: str | None = None


IngestRows = Callable[[Sequence[InboxRow]], Awaitable[Sequence[str | None]]]
"""The ingester's handling of pending rows: for each, in order, ``None`` (its task exists now)
or why it was refused."""


class InboxStore(abc.ABC):
    """The task inbox."""

    @abc.abstractmethod
    async def ingest_inbox(self, limit: int, ingest: IngestRows) -> int:
        """Hand up to ``limit`` committed pending rows, the oldest first, to ``ingest``, then
        delete those it took and mark those it refused ``rejected`` with their reasons, in one
        transaction that holds the rows locked throughout: other ingesters, on any replica,
        skip them (``FOR UPDATE SKIP LOCKED``), and an ingester that dies before committing
        leaves them pending for the next (``ingest`` must be idempotent: a taskId is).

        :returns: how many rows were handed over.
        """

    @abc.abstractmethod
    async def rejected_inbox_rows(self, *, limit: int, after: int | None) -> list[InboxRow]:
        """Up to ``limit`` rejected rows by id, those after ``after``."""

    @abc.abstractmethod
    async def delete_inbox_row(self, row_id: int) -> bool:
        """Delete the rejected row ``row_id``; whether there was one (pending rows are the
        ingester's)."""

    @abc.abstractmethod
    async def count_rejected_inbox_rows(self) -> int:
        """How many rejected rows the inbox keeps."""

    @abc.abstractmethod
    async def listen_inbox(self, on_insert: Callable[[], None]) -> None:
        """From now until the store is closed, call ``on_insert`` whenever a transaction that
        inserted inbox rows commits (PostgreSQL: ``LISTEN``, reconnected after an outage);
        SQLite: never."""
