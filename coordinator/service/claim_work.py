"""Server-side claimWork: the coordinator polls Azure on a worker's behalf.

For deployments whose workers cannot reach Azure. One call long-polls up to ``timeout_s``: it
walks the task queue's Azure queues in priority order, claims what the hints point at, deletes
each hint after a definitive answer (a claim, or a domain refusal: the hint is stale) and
releases it (visibility 0) after anything else, and returns as soon as at least one claim
succeeded. While idle it waits on a wake-up that this process's own hint puts ring, so a task
created through the same coordinator is handed out without waiting for the next poll. Each
round passes the queue's claim gate (:mod:`coordinator.service.queue_controls`): it takes no
more hints than the queue's pause and limits let through, and none while they let none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable

from coordinator.azure.queues import QueueService, ReceivedHint
from coordinator.domain.errors import DomainError, Throttled
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.queue_controls import QueueControlService
from coordinator.service.tasks import TaskService
from coordinator.store.errors import StoreUnavailable

log = logging.getLogger(__name__)


class ClaimWork:
    """Long-polling claims for one coordinator process.

    :param timeout_s: how long one call waits for work (seconds).
    :param idle_poll_s: seconds between Azure polls while a queue is empty.
    :param visibility_timeout_s: how long a received hint stays hidden while it is claimed.
    """

    def __init__(
        self,
        *,
        service: TaskService,
        azure_queues: QueueService,
        controls: QueueControlService,
        timeout_s: float = 20.0,
        idle_poll_s: float = 1.0,
        visibility_timeout_s: int = 60,
    ) -> None:
        self.service = service
        self.azure_queues = azure_queues
        self.controls = controls
        self.timeout_s = timeout_s
        self.idle_poll_s = idle_poll_s
        self.visibility_timeout_s = visibility_timeout_s
        self._wakeups: defaultdict[tuple[str, str], asyncio.Event] = defaultdict(asyncio.Event)

    def wake(self, provisioner_id: str, worker_type: str) -> None:
        """A hint for this task queue was just put: waiting callers should poll now."""
        event = self._wakeups.get((provisioner_id, worker_type))
        if event is not None:
            event.set()

    async def claim(
        self,
        provisioner_id: str,
        worker_type: str,
        *,
        worker_group: str,
        worker_id: str,
        count: int,
        disconnected: Callable[[], bool],
        quarantined: Callable[[], bool],
    ) -> list[TaskRecord]:
        """Claim up to ``count`` runs; an empty list after ``timeout_s`` without work.

        :param disconnected: true once the client went away; the poll then stops.
        :param quarantined: true while the worker is quarantined: it then gets nothing, at the
            end of the poll as Taskcluster answers (an answer at once would have it ask again
            at once, in a loop), unless the quarantine ends during the poll.
        """
        give_up = time.monotonic() + self.timeout_s
        wakeup = self._wakeups[(provisioner_id, worker_type)]

        async def receive_and_claim(allowed: int) -> list[TaskRecord]:
            hints = await self.azure_queues.receive(
                provisioner_id,
                worker_type,
                max_messages=allowed,
                visibility_timeout=self.visibility_timeout_s,
            )
            return await self._claim_hints(hints, worker_group=worker_group, worker_id=worker_id)

        while True:
            wakeup.clear()
            if not quarantined():
                try:
                    gated = await self.controls.claiming(
                        TaskQueue(provisioner_id, worker_type), count, receive_and_claim
                    )
                except Throttled:
                    pass  # paused, or at its limits: wait as for an empty queue
                else:
                    if gated.results:
                        return list(gated.results)
            remaining = give_up - time.monotonic()
            if remaining <= 0 or disconnected():
                return []
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), min(self.idle_poll_s, remaining))
            # The client may have gone while we waited: claiming for it now would leave the
            # run running for nobody until its claim expires.
            if disconnected():
                return []

    async def _claim_hints(
        self, hints: list[ReceivedHint], *, worker_group: str, worker_id: str
    ) -> list[TaskRecord]:
        claimed: dict[str, TaskRecord] = {}
        for hint in hints:
            if hint.task_id is None or hint.run_id is None:
                log.warning(
                    "poison hint deleted queue=%s messageId=%s", hint.azure_queue, hint.message_id
                )
                await self._forget(hint)
                continue
            try:
                record = await self.service.claim(
                    hint.task_id, hint.run_id, worker_group=worker_group, worker_id=worker_id
                )
            except DomainError as error:
                # A definitive refusal: the hint is stale (claimed, resolved, gone) and will
                # never be useful.
                log.info(
                    "stale hint deleted taskId=%s runId=%s reason=%s",
                    hint.task_id,
                    hint.run_id,
                    type(error).__name__,
                )
                await self._forget(hint)
                continue
            except StoreUnavailable:
                # An outage, logged once by the store: another worker may claim it later.
                log.debug("claim deferred, store unavailable taskId=%s", hint.task_id)
                with contextlib.suppress(Exception):
                    await self.azure_queues.release(hint)
                continue
            except Exception:
                log.exception(
                    "claim failed, hint released taskId=%s runId=%s", hint.task_id, hint.run_id
                )
                with contextlib.suppress(Exception):
                    await self.azure_queues.release(hint)
                continue
            claimed[record.task_id] = record
            await self._forget(hint)
        return list(claimed.values())

    async def _forget(self, hint: ReceivedHint) -> None:
        try:
            await self.azure_queues.delete(hint)
        except Exception as error:
            log.warning(
                "hint delete failed taskId=%s runId=%s queue=%s error=%r",
                hint.task_id,
                hint.run_id,
                hint.azure_queue,
                error,
            )
