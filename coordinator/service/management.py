"""TaskManagement: what operators do to many tasks at once, selected by a
:class:`~coordinator.domain.task_filters.TaskFilter`: list, stream, count, cancel, rerun and
delete;
the resolved-task TTLs, which delete resolved tasks early; and the deletion of expired tasks.
Whatever deletes tasks deletes their artifacts' bytes first (the store deletes their rows with
them), so no bytes outlive the rows that point at them.

Every bulk operation works in bounded batches, each its own short transaction (or, for cancel
and rerun, one compare-and-set per task), so a million matches neither holds a long
transaction nor keeps other requests from the store. Streaming reads page by page with the
same keyset the paged listing uses: memory stays at one page, and no database cursor or
snapshot is held open while a slow client reads.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

from coordinator.blobs import BlobUnavailable
from coordinator.domain import lifecycle
from coordinator.domain.errors import InputError
from coordinator.domain.lifecycle import TransitionResult
from coordinator.domain.listings import Page
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_filters import RERUNNABLE_STATES, TaskCounts, TaskFilter
from coordinator.service.artifacts import ArtifactService
from coordinator.service.tasks import TaskService
from coordinator.service.transitions import Transition
from coordinator.store.base import Store

STREAM_PAGE = 500
"""How many tasks a stream reads from the store at a time."""
CANCEL_BATCH = 100
"""How many matches cancelTasks and rerunTasks read at a time; their compare-and-sets run
concurrently."""
DELETE_BATCH = 500
"""How many tasks one deleteTasks (or resolved-task TTL) transaction deletes."""
TOKEN_SECRET = "continuation-tokens"
"""The name of the shared secret that signs continuation tokens."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResolvedTTLs:
    """How long resolved tasks are kept after they resolved (ms); ``None``: until ``expires``.

    :param completed_ms: for completed tasks.
    :param failed_ms: for failed and exception tasks.
    """

    completed_ms: int | None = None
    failed_ms: int | None = None


class TaskManagement:
    """The management API's operations.

    :param service: the task service, whose transitions cancel tasks.
    :param store: the task store.
    :param artifacts: whose bytes go before their tasks.
    :param ttls: the resolved-task TTLs the expiry sweeper applies.
    """

    def __init__(
        self,
        *,
        service: TaskService,
        store: Store,
        artifacts: ArtifactService,
        ttls: ResolvedTTLs,
    ) -> None:
        self._service = service
        self._store = store
        self._artifacts = artifacts
        self.ttls = ttls

    async def token_key(self) -> bytes:
        """The key continuation tokens are signed with, shared by every replica."""
        secret = await self._store.shared_secret(TOKEN_SECRET, new=secrets.token_hex(32))
        return bytes.fromhex(secret)

    async def list_tasks(
        self, matching: TaskFilter, *, limit: int, after: str | None
    ) -> Page[TaskRecord, str]:
        return await self._store.list_tasks(
            matching, now=self._service.clock(), limit=limit, after=after
        )

    async def stream_tasks(self, matching: TaskFilter) -> AsyncIterator[TaskRecord]:
        """Every task ``matching`` matches, by task id, read :data:`STREAM_PAGE` at a time."""
        after: str | None = None
        while True:
            page = await self.list_tasks(matching, limit=STREAM_PAGE, after=after)
            for record in page.items:
                yield record
            if page.next_after is None:
                return
            after = page.next_after

    async def count_tasks(self, matching: TaskFilter) -> TaskCounts:
        return await self._store.count_tasks(matching, now=self._service.clock())

    async def cancel_tasks(self, matching: TaskFilter) -> int:
        """Cancel every unresolved task ``matching`` matches, as cancelTask does; how many
        this call cancelled. Tasks past their deadline are left to the deadline resolver, and
        a task another caller resolves meanwhile is skipped.

        :raises InputError: ``matching`` is empty.
        """
        _refuse_empty(matching, "cancelTasks")
        unresolved = matching.unresolved()
        if unresolved is None:
            return 0
        cancelled, _ = await self._apply_matching(unresolved, _cancel, action="canceled")
        return cancelled

    async def rerun_tasks(self, matching: TaskFilter) -> tuple[int, int]:
        """Rerun every failed or exception task ``matching`` matches, as rerunTask does;
        ``(rerun, matched)``: how many this call reran, of how many failed or exception
        tasks it found (a task past its deadline or at its maximum of runs is not rerun, nor
        one another caller reran meanwhile).

        :raises InputError: ``matching`` is empty.
        """
        _refuse_empty(matching, "rerunTasks")
        rerunnable = matching.rerunnable()
        if rerunnable is None:
            return 0, 0
        return await self._apply_matching(rerunnable, _rerun, action="rerun")

    async def _apply_matching(
        self, matching: TaskFilter, transition: Transition, *, action: str
    ) -> tuple[int, int]:
        """Apply ``transition`` to every task ``matching`` matches, :data:`CANCEL_BATCH` at a
        time in task-id order (a task it changes may stop matching: the next batch starts
        after the last id, so none is read twice); ``(changed, matched)``."""
        changed = matched = 0
        after: str | None = None
        while True:
            batch = await self._store.matching_task_ids(
                matching, now=self._service.clock(), limit=CANCEL_BATCH, after=after
            )
            # concurrently, each with the skipping of a task that vanished or refuses
            done = await asyncio.gather(
                *(
                    self._service.apply_each([(task_id, transition)], action=action)
                    for task_id in batch
                )
            )
            changed += sum(done)
            matched += len(batch)
            if len(batch) < CANCEL_BATCH:
                return changed, matched
            after = batch[-1]

    async def delete_tasks(self, matching: TaskFilter) -> int:
        """Delete every task ``matching`` matches; how many this call deleted. A worker
        holding a run of a deleted task gets 404 when it reports.

        :raises InputError: ``matching`` is empty.
        :raises BlobUnavailable: the blob store failed before every match was deleted.
        """
        _refuse_empty(matching, "deleteTasks")
        return await self._delete(matching)

    async def _delete(self, matching: TaskFilter, *, limit: int | None = None) -> int:
        """Delete batches until none is full, or about ``limit`` tasks are gone: each batch's
        artifact bytes, then its tasks.

        A task that starts matching between the two (one resolving, under a resolved filter)
        and sorts among the batch may be deleted in the place of one whose bytes went; its own
        bytes would then stay behind. The window is one store round trip.

        :raises BlobUnavailable: the blob store failed; the batch's tasks are kept.
        """
        deleted = 0
        while limit is None or deleted < limit:
            now = self._service.clock()
            task_ids = await self._store.matching_task_ids(
                matching, now=now, limit=DELETE_BATCH, after=None
            )
            if not task_ids:
                break
            await self._artifacts.delete_bytes_of(task_ids)
            batch = await self._store.delete_matching(matching, now=now, limit=len(task_ids))
            deleted += batch
            if len(task_ids) < DELETE_BATCH:
                break
            await asyncio.sleep(0)  # let waiting requests in between transactions
        return deleted

    async def delete_expired(self, limit: int) -> int:
        """Delete up to about ``limit`` expired artifacts (bytes, then rows) and then up to
        ``limit`` tasks past ``expires`` whose artifacts are all gone; how many of both.

        A blob store outage deletes nothing (the backend logged it); the next pass retries.
        """
        try:
            swept = await self._artifacts.expire(limit)
        except BlobUnavailable:
            return 0
        return swept.deleted + await self._store.delete_expired(swept.through, limit)

    async def expire_resolved(self, limit: int) -> int:
        """Delete resolved tasks past their resolved-task TTL (about ``limit`` of each state at
        most, for the coordinator's TTLs and for each task queue's own), their artifacts'
        bytes first; how many. A task queue with a TTL of its own for a state is swept by it
        alone. A blob store outage stops the pass (the backend logged it); the next one
        retries."""
        now = self._service.clock()
        own = [c for c in await self._store.queue_controls() if any(c.defaults.ttls_s)]
        rules: list[TaskFilter] = []
        for index, (ttl_ms, states) in enumerate(
            ((self.ttls.completed_ms, ("completed",)), (self.ttls.failed_ms, RERUNNABLE_STATES))
        ):
            by_queue = {
                c.task_queue: ttl_s for c in own if (ttl_s := c.defaults.ttls_s[index]) is not None
            }
            rules += [
                TaskFilter(task_queue=queue, states=states, resolved_before=now - ttl_s * 1000 + 1)
                for queue, ttl_s in by_queue.items()
            ]
            if ttl_ms is not None:
                rules.append(
                    TaskFilter(
                        states=states,
                        resolved_before=now - ttl_ms + 1,
                        other_than_task_queues=tuple(by_queue),
                    )
                )
        deleted = 0
        for matching in rules:
            try:
                deleted += await self._delete(matching, limit=limit)
            except BlobUnavailable:
                break
        return deleted


def _cancel(record: TaskRecord, now: int) -> TransitionResult:
    return lifecycle.cancel(record, now=now)


def _rerun(record: TaskRecord, now: int) -> TransitionResult:
    return lifecycle.rerun(record, now=now)


def _refuse_empty(matching: TaskFilter, method: str) -> None:
    if matching.is_empty:
        raise InputError(
            f"{method} needs at least one filter: it would act on every task (to really do "
            "that, name every state with state=...)"
        )
