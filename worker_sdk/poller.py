"""Where claims come from: Azure hints (SPEC §8 steps 1-6) or the coordinator's claimWork.

Both pollers answer one question, :meth:`Poller.claims`: "give me up to N runs to work on",
waiting as long as it takes, and answering ``[]`` only once the worker is stopping. They
pause with jitter when there is no work, back off exponentially with jitter on transient
errors, and raise :class:`~worker_sdk.errors.RequestFailed` only for errors a retry cannot
fix (the coordinator refusing the worker's credentials, say). Who the worker is and how it
paces itself reach both as one :class:`WorkerIdentity` and one :class:`PollSettings`.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from worker_sdk import azure
from worker_sdk.client import Claim, CoordinatorClient, PollUrls, SignedQueue
from worker_sdk.errors import RequestFailed
from worker_sdk.timing import Backoff, jittered

log = logging.getLogger(__name__)

MAX_BATCH = azure.MAX_MESSAGES
"""Azure's ``numofmessages`` limit; claimWork's ``tasks`` stops at the same 32."""
CLAIM_RETRY_WINDOW = 60.0
"""How long a claim that failed transiently (5xx, network) is retried before its hint is
left to reappear after the poll visibility timeout."""

DEQUEUE_WARNING = "hint dequeued too often taskId=%s runId=%s queue=%s dequeueCount=%d"
"""The line operators alert on; its format is a public interface (see the package docs)."""


@dataclass(frozen=True, kw_only=True)
class WorkerIdentity:
    """Who polls and claims: the worker type whose queues are read, and the worker that every
    claim is made for."""

    provisioner_id: str
    worker_type: str
    worker_group: str
    worker_id: str


@dataclass(frozen=True, kw_only=True)
class PollSettings:
    """How the worker paces itself, fixed for its lifetime.

    ``idle_delay`` is the pause (jittered) when there is no work; ``backoff`` the schedule
    after transient failures, of polls and claims here and of the worker's reclaims and
    reports alike; a hint dequeued more than ``dequeue_warning`` times is logged as
    :data:`DEQUEUE_WARNING` (Azure mode only: in claimWork mode the worker never sees the
    messages).
    """

    idle_delay: float
    backoff: Backoff
    dequeue_warning: int


class Poller(Protocol):
    async def claims(self, count: int) -> list[Claim]:
        """Claim up to ``count`` runs; at least one, or none once the worker is stopping."""
        ...


class _Transient(Exception):
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


class _Polling(abc.ABC):
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
            except _Transient as transient:
                await self._retrying.wait_after_failure(transient.__cause__ or transient)
                continue
            self._retrying.succeeded()
            if claims:
                return claims
        return []

    @abc.abstractmethod
    async def _attempt(self, count: int) -> list[Claim]:
        """One try at claiming; raises :class:`_Transient` on a transient failure. An empty
        answer sends :meth:`claims` straight into the next try, so where that would only spin,
        pause first (:meth:`_idle`)."""

    async def _idle(self) -> None:
        await self._retrying.pause(jittered(self._settings.idle_delay, self._rng))


class AzurePoller(_Polling):
    """Polls the Azure queues of one worker type in priority order and claims their hints."""

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        client: CoordinatorClient,
        identity: WorkerIdentity,
        settings: PollSettings,
        stopping: asyncio.Event,
        rng: random.Random,
    ) -> None:
        super().__init__(
            client=client, identity=identity, settings=settings, stopping=stopping, rng=rng
        )
        self._session = session
        self._urls: PollUrls | None = None

    async def _attempt(self, count: int) -> list[Claim]:
        """One pass over the queues, highest priority first, stopping at the first that yields
        claims; pauses before answering ``[]`` when every queue was empty."""
        urls = await self._signed_urls()
        for queue in urls.queues:
            if self._stopping.is_set():
                return []
            name = azure.queue_name_of_url(queue.poll_url)
            try:
                messages = await azure.get_messages(
                    self._session, azure.poll_url(queue.poll_url, count)
                )
            except RequestFailed as error:
                if error.status == 404:
                    # The coordinator creates queues lazily and deletes idle ones.
                    log.debug("queue missing queue=%s", name)
                    continue
                if not error.transient:
                    # Most likely an expired or rejected signature: get new URLs first.
                    self._urls = None
                raise _Transient() from error
            if messages:
                return await self._take_all(queue, name, messages)
        await self._idle()
        return []

    async def _signed_urls(self) -> PollUrls:
        if self._urls is None or time.monotonic() >= self._urls.refresh_at:
            try:
                self._urls = await self._client.poll_task_urls(
                    self._identity.provisioner_id, self._identity.worker_type
                )
            except RequestFailed as error:
                if error.transient:
                    raise _Transient() from error
                raise
            log.info(
                "poll urls refreshed queues=%d expires=%s",
                len(self._urls.queues),
                self._urls.expires.isoformat(),
            )
        return self._urls

    async def _take_all(
        self, queue: SignedQueue, name: str, messages: list[azure.QueueMessage]
    ) -> list[Claim]:
        # return_exceptions: one failed claim must not discard the runs the others claimed.
        results = await asyncio.gather(
            *(self._take(queue, name, message) for message in messages), return_exceptions=True
        )
        claims = [result for result in results if isinstance(result, Claim)]
        failures = [result for result in results if isinstance(result, BaseException)]
        for failure in failures:
            if not isinstance(failure, RequestFailed):
                raise failure
        if failures and not claims:
            raise _Transient() from failures[0]
        # Only stale hints: an empty answer sends the caller straight back to the top queue.
        return claims

    async def _take(
        self, queue: SignedQueue, name: str, message: azure.QueueMessage
    ) -> Claim | None:
        """Claim the run a message hints at, deleting the message unless that must be retried."""
        try:
            hint = azure.parse_hint(message.text)
        except azure.PoisonHint as error:
            log.warning(
                "poison hint deleted queue=%s messageId=%s dequeueCount=%d error=%s",
                name,
                message.message_id,
                message.dequeue_count,
                error,
            )
            await self._delete(queue, name, message, task_id="-", run_id="-")
            return None
        if message.dequeue_count > self._settings.dequeue_warning:
            log.warning(DEQUEUE_WARNING, hint.task_id, hint.run_id, name, message.dequeue_count)
        if self._stopping.is_set():
            # Claiming now would only lead to reporting worker-shutdown, which spends one of
            # the task's retries; the hint comes back when its visibility timeout ends.
            return None
        try:
            claim = await self._claim(hint, name)
        except RequestFailed as error:
            if error.transient:
                log.warning(
                    "claim failed, hint kept taskId=%s runId=%s queue=%s error=%s",
                    hint.task_id,
                    hint.run_id,
                    name,
                    error,
                )
                raise
            # A definitive no (stale hint, run already taken, task gone): the hint is useless.
            log.info(
                "hint not claimable taskId=%s runId=%s queue=%s status=%s code=%s",
                hint.task_id,
                hint.run_id,
                name,
                error.status,
                error.code,
            )
            await self._delete(queue, name, message, task_id=hint.task_id, run_id=hint.run_id)
            return None
        log.info(
            "claimed taskId=%s runId=%s queue=%s takenUntil=%s",
            claim.task_id,
            claim.run_id,
            name,
            claim.taken_until.isoformat(),
        )
        await self._delete(queue, name, message, task_id=hint.task_id, run_id=hint.run_id)
        return claim

    async def _claim(self, hint: azure.AzureHint, name: str) -> Claim:
        """claimTask, retried in place on transient failures for up to
        :data:`CLAIM_RETRY_WINDOW`: the message stays hidden from every other worker until its
        visibility timeout (300 s) ends, so giving up at once would leave its run waiting that
        long after a short coordinator outage."""
        give_up = time.monotonic() + CLAIM_RETRY_WINDOW
        attempt = 0
        while True:
            try:
                return await self._client.claim_task(
                    hint.task_id,
                    hint.run_id,
                    worker_group=self._identity.worker_group,
                    worker_id=self._identity.worker_id,
                )
            except RequestFailed as error:
                delay = self._retrying.delay(attempt)
                if (
                    not error.transient
                    or self._stopping.is_set()
                    or time.monotonic() + delay >= give_up
                ):
                    raise
                attempt += 1
                log.info(
                    "claim retried taskId=%s runId=%s queue=%s error=%s retryIn=%.2f",
                    hint.task_id,
                    hint.run_id,
                    name,
                    error,
                    delay,
                )
                await self._retrying.pause(delay)

    async def _delete(
        self,
        queue: SignedQueue,
        name: str,
        message: azure.QueueMessage,
        *,
        task_id: str,
        run_id: int | str,
    ) -> None:
        try:
            await azure.delete_message(self._session, azure.delete_url(queue.delete_url, message))
        except RequestFailed as error:
            # Not retried: the message reappears after its visibility timeout, and the claim
            # it leads to then fails and deletes it.
            log.warning(
                "hint delete failed taskId=%s runId=%s queue=%s messageId=%s error=%s",
                task_id,
                run_id,
                name,
                message.message_id,
                error,
            )


class ClaimWorkPoller(_Polling):
    """Asks the coordinator to claim work for the worker (``claimWork``); no Azure access."""

    async def _attempt(self, count: int) -> list[Claim]:
        try:
            claims = await self._long_poll(count)
        except RequestFailed as error:
            if error.transient:
                raise _Transient() from error
            raise
        for claim in claims:
            log.info(
                "claimed taskId=%s runId=%s takenUntil=%s",
                claim.task_id,
                claim.run_id,
                claim.taken_until.isoformat(),
            )
        if not claims:
            # The server already waited ~20 s; the pause only guards against one that doesn't.
            await self._idle()
        return claims

    async def _long_poll(self, count: int) -> list[Claim]:
        """One claimWork call, abandoned when the worker stops.

        Waiting out the server's ~20 s would hold up every shutdown. Hanging up is safe: the
        coordinator stops claiming for a client that has gone away.
        """
        request = asyncio.create_task(
            self._client.claim_work(
                self._identity.provisioner_id,
                self._identity.worker_type,
                worker_group=self._identity.worker_group,
                worker_id=self._identity.worker_id,
                tasks=count,
            )
        )
        stop = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({request, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not request.done():
                request.cancel()
            await asyncio.wait({request})
        # Claims that made it anyway are returned: the worker hands them back at once.
        return [] if request.cancelled() else request.result()
