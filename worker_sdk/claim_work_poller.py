"""The claimWork poller: the coordinator claims the worker's runs for it (claimWork's long
poll), from its store or from Azure on the worker's behalf; the worker needs no Azure access.

:class:`ClaimWorkPoller` shares the worker's free capacity out among claimWork long polls, one
per task queue.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Unpack

from worker_sdk.client import Claim
from worker_sdk.errors import RequestFailed
from worker_sdk.poller import BasePoller, PollerParts, Transient, log
from worker_sdk.priorities import TaskQueue


@dataclass(frozen=True, kw_only=True)
class _ClaimWorkCall:
    """A claimWork long poll in flight: for which task queue, and how many runs it asked for."""

    task_queue: TaskQueue
    tasks: int


class ClaimWorkPoller(BasePoller):
    """Asks the coordinator to claim work for the worker (``claimWork``); no Azure access.

    The coordinator claims each task queue's runs highest priority first, or, with
    ``--polling weighted``, by the worker's weights, which every poll sends (under store
    dispatch the coordinator draws each run's priority by them; under Azure dispatch, how
    many hints it receives from each priority's queue). A worker with
    several task queues keeps a long poll in flight for as many of them as its free capacity
    covers, sharing the capacity out among them (the task queue that waited longest first),
    and never hangs one up while it runs: a poll's claims cannot be taken back, so hanging up
    one that is claiming would leave its runs held by nobody until their claim expires, and
    asking each task queue for all the free capacity would claim more than the worker can
    run. Only a stopping worker hangs up.
    """

    def __init__(self, **parts: Unpack[PollerParts]) -> None:
        super().__init__(**parts)
        self._turns = collections.deque(self._identity.task_queues)
        """Task queues by how long they have waited for a poll, longest first."""
        self._calls: dict[asyncio.Task[list[Claim]], _ClaimWorkCall] = {}
        order = self._settings.order
        self._weights = dict(order.weights) if order.polling == "weighted" else None

    async def _attempt(self, count: int) -> list[Claim]:
        self._call(count)
        try:
            claims = await self._answers()
        except RequestFailed as error:
            if error.transient:
                raise Transient() from error
            # The worker gives up: end the other polls first.
            claims = await self._leftovers()
            if not claims:
                raise
        # DEBUG: "run started" follows at once at INFO; a line more per run is a write more
        for claim in claims:
            log.debug(
                "claimed taskId=%s runId=%s takenUntil=%s",
                claim.task_id,
                claim.run_id,
                claim.taken_until.isoformat(),
            )
        if not claims:
            # The server already waited ~20 s; the pause only guards against one that doesn't.
            await self._idle()
        return claims

    def _call(self, count: int) -> None:
        """Start polls for task queues without one, sharing out the ``count`` free runs less
        what the polls in flight asked for."""
        free = count - sum(call.tasks for call in self._calls.values())
        busy = {call.task_queue for call in self._calls.values()}
        idle = [task_queue for task_queue in self._turns if task_queue not in busy]
        for index, task_queue in enumerate(idle):
            tasks = -(-free // (len(idle) - index))  # an even share, rounded up
            if tasks <= 0:
                break
            free -= tasks
            self._turns.remove(task_queue)
            self._turns.append(task_queue)
            poll = asyncio.create_task(
                self._client.claim_work(
                    task_queue.provisioner_id,
                    task_queue.worker_type,
                    worker_group=self._identity.worker_group,
                    worker_id=self._identity.worker_id,
                    tasks=tasks,
                    weights=self._weights,
                )
            )
            self._calls[poll] = _ClaimWorkCall(task_queue=task_queue, tasks=tasks)

    async def _answers(self) -> list[Claim]:
        """The claims of the polls that answer first; raises the first failure when none
        claimed anything.

        When the worker stops, every poll is hung up: waiting out the server's ~20 s would
        hold up every shutdown, and the coordinator stops claiming for a client that has gone
        away.
        """
        stop = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({*self._calls, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if self._stopping.is_set():
            return await self._leftovers()
        claims, errors = self._collect()
        if claims or not errors:
            return claims
        # One a retry cannot fix (a refusal) decides over a transient one.
        raise next((e for e in errors if not e.transient), errors[0])

    async def _leftovers(self) -> list[Claim]:
        for poll in self._calls:
            poll.cancel()
        if self._calls:
            await asyncio.wait(self._calls)
        claims, _ = self._collect()
        return claims

    def _collect(self) -> tuple[list[Claim], list[RequestFailed]]:
        """Forget the polls that ended; what they claimed, and how they failed."""
        claims: list[Claim] = []
        errors: list[RequestFailed] = []
        for poll in [poll for poll in self._calls if poll.done()]:
            del self._calls[poll]
            if poll.cancelled():
                continue
            error = poll.exception()
            if error is None:
                claims.extend(poll.result())
            elif isinstance(error, RequestFailed):
                errors.append(error)
            else:
                raise error
        return claims, errors
