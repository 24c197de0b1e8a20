"""What every poller shares: the question it answers, who asks and how the worker paces
itself, and the loop that waits out idle spells and transient failures.

A poller answers one question, :meth:`Poller.claims`: "give me up to N runs to work on",
waiting as long as it takes, and answering ``[]`` only once the worker is stopping. It pauses
with jitter when there is no work, backs off exponentially with jitter on transient errors,
and raises :class:`~worker_sdk.errors.RequestFailed` only for errors a retry cannot fix (the
coordinator refusing the worker's credentials, say). Who the worker is and how it paces
itself reach every poller as one :class:`WorkerIdentity` and one :class:`PollSettings`.

There are two: :class:`~worker_sdk.azure_poller.AzurePoller` claims from Azure hints
(docs/protocol.md, worker protocol steps 1-6) and
:class:`~worker_sdk.claim_work_poller.ClaimWorkPoller` through the coordinator's claimWork.
Both log through :data:`log`, ``worker_sdk.poller``: the logger of the alert line
(docs/worker-sdk.md), which operators filter on.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Protocol, TypedDict

from worker_sdk.client import Claim, CoordinatorClient
from worker_sdk.priorities import PollOrder, TaskQueue
from worker_sdk.timing import Backoff, jittered

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class WorkerIdentity:
    """Who polls and claims: the task queues whose work is taken, and the worker that every
    claim is made for."""

    task_queues: tuple[TaskQueue, ...]
    worker_group: str
    worker_id: str


@dataclass(frozen=True, kw_only=True)
class PollSettings:
    """How the worker paces itself, fixed for its lifetime.

    ``idle_delay`` is the pause (jittered) when there is no work; ``backoff`` the schedule
    after transient failures, of polls and claims here and of the worker's reclaims and
    reports alike; ``batching`` sends many runs' claims, reclaims and reports in one request
    each (:mod:`worker_sdk.batches`). Azure mode only (in claimWork mode the coordinator
    reads the queues): a hint dequeued more than ``dequeue_warning`` times is logged as
    :data:`~worker_sdk.azure_poller.DEQUEUE_WARNING`, ``order`` arranges the queues of each
    pass, and a queue that answered empty is skipped for between half and all of
    ``empty_queue_skip`` seconds (0: never skipped), and an idle worker's pauses grow until
    it makes ``idle_rate`` Azure requests a second on average.
    """

    idle_delay: float
    idle_rate: float
    backoff: Backoff
    dequeue_warning: int
    order: PollOrder
    batching: bool
    empty_queue_skip: float


class PollerParts(TypedDict):
    """What every poller is made of: see :class:`BasePoller`."""

    client: CoordinatorClient
    identity: WorkerIdentity
    settings: PollSettings
    stopping: asyncio.Event
    rng: random.Random


class Poller(Protocol):
    async def claims(self, count: int) -> list[Claim]:
        """Claim up to ``count`` runs; at least one, or none once the worker is stopping."""
        ...


class Transient(Exception):
    """A transient failure somewhere in a walk over the queues: pause, then start over."""


class _Retrying:
    """Pausing that a stop request cuts short, and the backoff schedule over failures."""

    def __init__(self, *, stopping: asyncio.Event, backoff: Backoff, rng: random.Random) -> None:
        self._stopping = stopping
        self._backoff = backoff
        self._rng = rng
        self._failures = 0

    async def pause(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                await self._stopping.wait()
        except TimeoutError:
            pass

    def delay(self, attempt: int) -> float:
        """The jittered backoff before retry ``attempt`` (0-based)."""
        return self._backoff.delay(attempt, self._rng)

    async def wait_after_failure(self, error: BaseException) -> None:
        delay = self.delay(self._failures)
        self._failures += 1
        log.warning("poll failed error=%s failures=%d retryIn=%.2f", error, self._failures, delay)
        await self.pause(delay)

    def succeeded(self) -> None:
        self._failures = 0


class BasePoller(abc.ABC):
    """What both pollers share: who is asking, and the loop that waits out idle spells and
    transient failures until there is work or the worker stops."""

    def __init__(
        self,
        *,
        client: CoordinatorClient,
        identity: WorkerIdentity,
        settings: PollSettings,
        stopping: asyncio.Event,
        rng: random.Random,
    ) -> None:
        self._client = client
        self._identity = identity
        self._settings = settings
        self._stopping = stopping
        self._rng = rng
        self._retrying = _Retrying(stopping=stopping, backoff=settings.backoff, rng=rng)

    async def claims(self, count: int) -> list[Claim]:
        while not self._stopping.is_set():
            try:
                claims = await self._attempt(count)
            except Transient as transient:
                await self._retrying.wait_after_failure(transient.__cause__ or transient)
                continue
            self._retrying.succeeded()
            if claims:
                return claims
        return await self._leftovers()

    async def _leftovers(self) -> list[Claim]:
        """Once the worker stops: end what is in flight, and return the runs claimed anyway
        (the worker hands them straight back)."""
        return []

    @abc.abstractmethod
    async def _attempt(self, count: int) -> list[Claim]:
        """One try at claiming; raises :class:`Transient` on a transient failure. An empty
        answer sends :meth:`claims` straight into the next try, so where that would only spin,
        pause first (:meth:`_idle`)."""

    async def _idle(self) -> None:
        await self._retrying.pause(jittered(self._settings.idle_delay, self._rng))
