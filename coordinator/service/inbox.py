"""The task inbox (docs/tasks.md#transactional-enqueue): ingesting the rows producers commit in
their own transactions, each as the createTask request of the client it names, and the rows it
refused, which operators list and delete.

A row becomes a task through the :class:`TaskCreator` the app hands over (the createTask
endpoint's checks: the task schema and the scopes, here those the named client holds), as a
hook's fire does. A row it refuses is kept, never dropped, with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

import orjson

from coordinator.domain.errors import DomainError
from coordinator.domain.hooks import SLUGID
from coordinator.service.hooks import TaskCreator
from coordinator.service.metrics import ServiceMetrics
from coordinator.store.base import Store
from coordinator.store.contract.inbox import InboxRow as InboxRow  # the API's rows too

log = logging.getLogger(__name__)

BATCH = 100
"""Rows one pass ingests (in one transaction)."""

ScopesOf = Callable[[str], Sequence[str] | None]
"""What the client ``clientId`` holds, as createTask would check it; ``None``: no such client
(or disabled, or expired)."""


class InboxService:
    """Ingesting the task inbox, and its rejected rows.

    :param create_task: createTask's checks and the create, with the row's client's scopes.
    :param scopes_of: see :data:`ScopesOf`.
    """

    def __init__(
        self,
        *,
        store: Store,
        create_task: TaskCreator,
        scopes_of: ScopesOf,
        metrics: ServiceMetrics,
    ) -> None:
        self._store = store
        self._create_task = create_task
        self._scopes_of = scopes_of
        self._metrics = metrics
        self._counted = False
        self._inserted = asyncio.Event()
        self._inserted.set()  # the first pass runs at once: rows committed while we were down
        self._stopping = False

    async def listen(self) -> None:
        """Be woken by each committed insert from now on (PostgreSQL's ``LISTEN``)."""
        await self._store.listen_inbox(self._inserted.set)

    async def wait_for_rows(self, sweep: float) -> None:
        """Return once a producer committed rows since the last call, or after ``sweep``
        seconds (the sweep: a notification missed while the listener reconnected, rows
        another replica left pending)."""
        if self._stopping:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._inserted.wait(), sweep)
        self._inserted.clear()

    def stop(self) -> None:
        """Wake a waiting pass and make every later one do nothing: the coordinator is
        stopping, and must not wait out a sweep to do so."""
        self._stopping = True
        self._inserted.set()

    async def ingest(self) -> int:
        """One pass: up to :data:`BATCH` committed rows made tasks or rejected; how many."""
        if self._stopping:
            return 0
        rejected = 0

        async def ingest_rows(rows: Sequence[InboxRow]) -> list[str | None]:
            nonlocal rejected
            outcomes = [await self._ingest_row(row) for row in rows]
            rejected = sum(reason is not None for reason in outcomes)
            return outcomes

        handled = await self._store.ingest_inbox(BATCH, ingest_rows)
        if handled >= BATCH:
            self._inserted.set()  # more may wait: the next pass must not wait for a commit
        if handled:
            self._metrics.inbox_ingested(created=handled - rejected, rejected=rejected)
        if rejected or not self._counted:
            await self._count_rejected()
        return handled

    async def _ingest_row(self, row: InboxRow) -> str | None:
        """None once the row's task exists, or why the row is refused."""
        reason = await self._refusal(row)
        if reason is None:
            log.info(
                "inbox row ingested id=%d taskId=%s clientId=%s", row.id, row.task_id, row.client_id
            )
        else:
            log.warning(
                "inbox row rejected id=%d taskId=%s clientId=%s reason=%s",
                row.id,
                row.task_id,
                row.client_id,
                reason,
            )
        return reason

    async def _refusal(self, row: InboxRow) -> str | None:
        if not SLUGID.fullmatch(row.task_id):
            return f"taskId {row.task_id!r} is not a slugid"
        try:
            task = orjson.loads(row.definition)
        except orjson.JSONDecodeError as error:
            return f"the definition is not JSON: {error}"
        if not isinstance(task, dict):
            return f"the definition is a JSON {type(task).__name__}, not an object"
        scopes = self._scopes_of(row.client_id)
        if scopes is None:
            return f"no client {row.client_id!r} (unknown, disabled or expired)"
        try:
            await self._create_task(row.task_id, task, scopes=scopes)
        except DomainError as error:
            return str(error)
        return None

    async def rejected(self, *, limit: int, after: int | None) -> list[InboxRow]:
        """Up to ``limit`` rejected rows by id, those after ``after``."""
        return await self._store.rejected_inbox_rows(limit=limit, after=after)

    async def delete_rejected(self, row_id: int) -> bool:
        """Delete the rejected row ``row_id``; whether there was one."""
        deleted = await self._store.delete_inbox_row(row_id)
        if deleted:
            await self._count_rejected()
        return deleted

    async def _count_rejected(self) -> None:
        self._metrics.set_inbox_rejected(await self._store.count_rejected_inbox_rows())
        self._counted = True
