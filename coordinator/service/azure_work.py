"""claimWork's runs under Azure dispatch: the coordinator reads hints from the task queue's
Azure queues on the worker's behalf, for workers that cannot reach Azure.

One ask receives up to ``count`` hints, walking the queues in priority order, claims the runs
they point at, deletes each hint after a definitive answer (a claim, or a domain refusal: the
hint is stale) and releases it (visibility 0) after anything else; a run whose concurrency key
is at its limit has its hint released to come back after the ``Retry-After``.

A worker's weights per priority (:mod:`coordinator.domain.claim_weights`) draw how many hints
to receive from each priority's queue first, as store dispatch draws its runs' priorities; what
a drawn queue cannot give (it is empty) comes from the others in priority order, so an ask
never comes back empty while hints wait.
"""

from __future__ import annotations

import contextlib
import logging
import random

from coordinator.azure.queues import QueueService, ReceivedHint
from coordinator.domain.claim_weights import ClaimWeights
from coordinator.domain.concurrency_keys import KeyRoom
from coordinator.domain.errors import DomainError, Throttled
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.queue_controls import KeyLimit
from coordinator.service.tasks import TaskService
from coordinator.store.errors import StoreUnavailable

log = logging.getLogger(__name__)


class AzureWork:
    """A :class:`~coordinator.service.claim_work.WorkSource` over Azure's hints.

    :param visibility_timeout_s: how long a received hint stays hidden while it is claimed.
    :param rng: where a worker's weights draw from.
    """

    def __init__(
        self,
        *,
        service: TaskService,
        azure_queues: QueueService,
        visibility_timeout_s: int = 60,
        rng: random.Random | None = None,
    ) -> None:
        self.service = service
        self.azure_queues = azure_queues
        self.visibility_timeout_s = visibility_timeout_s
        self.rng = rng or random.Random()

    async def take(
        self,
        task_queue: TaskQueue,
        *,
        worker_group: str,
        worker_id: str,
        count: int,
        weights: ClaimWeights | None,
        per_key: KeyLimit | None = None,
    ) -> list[TaskRecord]:
        hints = await self.azure_queues.receive(
            task_queue.provisioner_id,
            task_queue.worker_type,
            max_messages=count,
            visibility_timeout=self.visibility_timeout_s,
            quotas=None if weights is None else weights.blind_quotas(count, self.rng),
        )
        room = None if per_key is None or not hints else await per_key.room()
        return await self._claim_hints(
            hints, worker_group=worker_group, worker_id=worker_id, room=room
        )

    async def _claim_hints(
        self,
        hints: list[ReceivedHint],
        *,
        worker_group: str,
        worker_id: str,
        room: KeyRoom | None = None,
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
                    hint.task_id,
                    hint.run_id,
                    worker_group=worker_group,
                    worker_id=worker_id,
                    permit=None if room is None else room.admit,
                )
            except Throttled as error:
                # Its concurrency key is at its limit: the hint waits out the Retry-After
                # hidden, so that the other keys' hints come first meanwhile.
                log.debug("claim throttled, hint released taskId=%s", hint.task_id)
                with contextlib.suppress(Exception):
                    await self.azure_queues.release(hint, after_s=error.retry_after_s)
                continue
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
