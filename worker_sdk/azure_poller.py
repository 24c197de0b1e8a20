"""The Azure poller: claims the runs hinted at in the worker's Azure queues, which it reads and
settles through the signed URLs of pollTaskUrls (docs/protocol.md, worker protocol steps 1-6).

A worker may serve several task queues: :class:`AzurePoller` polls all their Azure queues in
one pass, in the order :class:`~worker_sdk.priorities.PollOrder` gives (strict priority or
weighted).

:class:`AzurePoller` claims the runs one Azure get hinted at in one ``claimRuns`` request
(one ``claimTask`` each with batching off, or once the coordinator shows it lacks the route),
and leaves an Azure queue that answered empty alone for a short jittered while
(``empty_queue_skip``): a worker whose work sits in its lowest priority then stops paying a
get on each empty higher one every pass, and work that arrives in a higher priority waits at
most that long (1 s by default) behind the lower ones.

An :class:`AzurePoller` that finds no work backs off: one pass at a time over its queues
(its concurrent polls take turns), each after a pause that doubles from ``idle_delay`` with
every pass in a row that found nothing, up to the pause that holds the worker to
``idle_rate`` Azure requests a second on average (:func:`~worker_sdk.timing.idle_pause`); the
first pass that finds work ends the backoff. The price is pickup latency: work arriving at an
idle worker waits for its next pass, up to the longest pause.

A hint :class:`AzurePoller` took but could not claim because no coordinator answered (no
connection, a timeout, a 5xx, once its short retries are spent) is released through the
queue's ``signedReleaseUrl``: Azure makes it visible again within seconds, for a worker whose
coordinator answers, instead of hiding it for the poll visibility timeout (300 s). So are the
hints taken just as the worker stops. A claim the coordinator answers 429 with
``Retry-After`` (the task queue is paused or at its limits) is not retried in place and its
hint not deleted: it is released to become visible again after ``Retry-After`` seconds. A
coordinator that signs no release URLs (older ones)
gets the old behaviour: the claim is retried in place for up to a minute, then the hint waits
out its visibility timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Unpack

import aiohttp

from worker_sdk import azure
from worker_sdk.client import Claim, PollUrls, SignedQueue
from worker_sdk.errors import NoAzureQueues, RequestFailed, missing_scopes
from worker_sdk.metrics import WorkerMetrics
from worker_sdk.poller import BasePoller, PollerParts, Transient, log
from worker_sdk.priorities import TaskQueue, priority_at
from worker_sdk.timing import idle_pause

CLAIM_RETRY_WINDOW = 60.0
"""How long a claim that failed transiently (5xx, network) is retried before its hint is
left to reappear after the poll visibility timeout (a coordinator without release URLs)."""
RELEASE_RETRY_WINDOW = 2.0
"""How long a claim that failed transiently is retried before its hint is released (a
coordinator with release URLs): long enough to ride out a dropped connection, short because a
released hint reaches another worker within seconds, while one kept here reaches nobody."""
REFUSED_RETRY_WINDOW = 20.0
"""How long a claim the coordinator refuses (401, 403) is retried before the worker stops:
long enough to ride out a clients file being fixed (the coordinator re-reads it), short
enough that a misconfigured worker soon shows as one that exited."""
DEAD_HINT_STATUSES = frozenset({400, 404, 409})
"""claimTask answers that make a hint useless for good: no such run, or one that is not
pending any more. Any other answer says nothing about the hint, so it is kept."""

DEQUEUE_WARNING = "hint dequeued too often taskId=%s runId=%s queue=%s dequeueCount=%d"
"""The line operators alert on; its format is a public interface (see the package docs)."""


@dataclass(frozen=True, kw_only=True)
class _AzureQueue:
    """One Azure queue a pass may poll: one priority of one task queue."""

    task_queue: TaskQueue
    priority: str
    urls: SignedQueue
    name: str
    """The queue's name, for logs."""

    @property
    def key(self) -> tuple[TaskQueue, str]:
        """The same for the queue across refreshes of its signed URLs."""
        return self.task_queue, self.priority


class AzurePoller(BasePoller):
    """Polls the Azure queues of the worker's task queues and claims their hints.

    Several :meth:`claims` may run at once (the worker's ``polls_in_flight``): the next get
    goes out while the last one's hints are being claimed.
    """

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        metrics: WorkerMetrics,
        **parts: Unpack[PollerParts],
    ) -> None:
        super().__init__(**parts)
        self._session = session
        self._metrics = metrics
        self._urls: dict[TaskQueue, tuple[PollUrls, list[_AzureQueue]]] = {}
        """Each task queue's signed URLs and the Azure queues they sign, built once per refresh."""
        self._coordinator_lost = False
        """Claims got no answer: take no more hints until the coordinator answers again."""
        self._batch_claims = self._settings.batching
        """Claim through claimRuns, until the coordinator shows it lacks the route."""
        self._deleting: set[asyncio.Future[list[None]]] = set()
        """Deletes of hints already answered (claimed or dead), still on their way."""
        self._empty_until: dict[tuple[TaskQueue, str], float] = {}
        """Monotonic time until which a queue that answered empty is not polled again."""
        self._empty_passes = 0
        """Passes in a row that found no work: while there are any, the worker is idle."""
        self._idle_turn = asyncio.Lock()
        """Held by the one poll whose pass (and pause) an idle worker makes at a time."""

    async def _attempt(self, count: int) -> list[Claim]:
        if self._empty_passes:
            # Idle: the polls take turns, so the worker makes one pass per pause, not one
            # per poll in flight.
            async with self._idle_turn:
                if self._empty_passes:
                    return await self._pass(count)
        return await self._pass(count)

    async def _pass(self, count: int) -> list[Claim]:
        """One pass over the queues in the settings' order, stopping at the first that yields
        claims; pauses before answering ``[]`` when every queue was empty (or skipped, having
        been empty a moment ago), longer after each such pass in a row."""
        if self._coordinator_lost:
            # A hint taken now could not be claimed: it would hide for the poll visibility
            # timeout (300 s), or with a release URL come back only after a needless round.
            await self._coordinator_answers()
        azure_queues = [
            azure_queue
            for task_queue in self._identity.task_queues
            for azure_queue in await self._azure_queues(task_queue)
        ]
        gets = 0
        for azure_queue in self._settings.order.arrange(
            azure_queues, lambda q: q.priority, self._rng
        ):
            if self._stopping.is_set():
                return []
            if time.monotonic() < self._empty_until.get(azure_queue.key, 0.0):
                continue
            gets += 1
            self._metrics.azure_requests.labels("get").inc()
            try:
                messages = await azure.get_messages(
                    self._session, azure.poll_url(azure_queue.urls.poll_url, count)
                )
            except RequestFailed as error:
                if error.status == 404:
                    # The coordinator creates queues lazily and deletes idle ones.
                    log.debug("queue missing queue=%s", azure_queue.name)
                    messages = []
                else:
                    if not error.transient:
                        # Most likely an expired or rejected signature: get new URLs first.
                        self._urls.pop(azure_queue.task_queue, None)
                    raise Transient() from error
            if messages:
                self._empty_passes = 0
                return await self._take_all(azure_queue, messages)
            skip = self._settings.empty_queue_skip
            self._empty_until[azure_queue.key] = time.monotonic() + self._rng.uniform(
                skip / 2, skip
            )
        # Nothing anywhere: the idle pause already spaces the gets out, so the next pass asks
        # every queue again (a skip outlasting the pause would only delay picking work up).
        self._empty_until.clear()
        self._empty_passes += 1
        settings = self._settings
        pause = idle_pause(
            self._empty_passes,
            gets,
            idle_delay=settings.idle_delay,
            idle_rate=settings.idle_rate,
            rng=self._rng,
        )
        log.debug(
            "no work, pausing emptyPasses=%d gets=%d pause=%.3f", self._empty_passes, gets, pause
        )
        await self._retrying.pause(pause)
        return []

    async def _leftovers(self) -> list[Claim]:
        """Let the deletes on their way finish: a hint left behind would be claimed again in
        vain once its visibility timeout ends."""
        if self._deleting:
            await asyncio.wait(self._deleting)
        return []

    async def _coordinator_answers(self) -> None:
        """Return once the coordinator answers a ping (any answer but a 5xx); raise
        :class:`Transient` while it does not, so polling backs off with jitter."""
        try:
            await self._client.ping()
        except RequestFailed as error:
            if error.transient:
                raise Transient() from error
        self._coordinator_lost = False
        log.info("coordinator answers again, polling resumed")

    async def _azure_queues(self, task_queue: TaskQueue) -> list[_AzureQueue]:
        cached = self._urls.get(task_queue)
        if cached is None or time.monotonic() >= cached[0].refresh_at:
            try:
                urls = await self._client.poll_task_urls(
                    task_queue.provisioner_id, task_queue.worker_type
                )
            except RequestFailed as error:
                if error.transient:
                    raise Transient() from error
                if error.status == 404:
                    raise NoAzureQueues.of(error) from error
                raise
            azure_queues = [
                _AzureQueue(
                    task_queue=task_queue,
                    priority=priority_at(index),
                    urls=signed,
                    name=azure.queue_name_of_url(signed.poll_url),
                )
                for index, signed in enumerate(urls.queues)
            ]
            cached = self._urls[task_queue] = (urls, azure_queues)
            log.info(
                "poll urls refreshed taskQueue=%s queues=%d expires=%s",
                task_queue,
                len(urls.queues),
                urls.expires.isoformat(),
            )
        return cached[1]

    async def _take_all(
        self, azure_queue: _AzureQueue, messages: list[azure.QueueMessage]
    ) -> list[Claim]:
        """Claim the runs one get's messages hint at, each run once however many messages
        name it, and delete the messages unless their claim must be retried."""
        hints = await asyncio.gather(*(self._hint(azure_queue, message) for message in messages))
        runs: dict[tuple[str, int], list[azure.QueueMessage]] = {}
        for message, hint in zip(messages, hints, strict=True):
            if hint is not None:
                runs.setdefault((hint.task_id, hint.run_id), []).append(message)
        if not runs or self._stopping.is_set():
            # Claiming now would only lead to reporting worker-shutdown, which spends one of
            # the task's retries: hand the hints to another worker.
            if runs and azure_queue.urls.release_url is not None:
                log.info(
                    "worker stopping, releasing hints queue=%s runs=%d", azure_queue.name, len(runs)
                )
                await self._release(azure_queue, runs)
            return []
        outcomes = await self._claim(list(runs), azure_queue)
        # return_exceptions: one failed claim must not discard the runs the others claimed.
        results = await asyncio.gather(
            *(
                self._settle_hints(azure_queue, run, run_messages, outcome)
                for (run, run_messages), outcome in zip(runs.items(), outcomes, strict=True)
            ),
            return_exceptions=True,
        )
        claims = [result for result in results if isinstance(result, Claim)]
        failures: list[RequestFailed] = []
        for result in results:
            if isinstance(result, RequestFailed):
                failures.append(result)
            elif isinstance(result, BaseException):
                raise result
        if claims or not failures:
            # Only stale hints: an empty answer sends the caller straight back to the top queue.
            return claims
        if azure_queue.urls.release_url is not None and all(map(_throttled, failures)):
            # Paused or at its limits: its hints are released for Retry-After; as if empty.
            await self._idle()
            return []
        for failure in failures:
            if failure.refused:
                raise failure
        if any(failure.transient for failure in failures):
            log.warning(
                "coordinator not answering, no more hints taken until it does error=%s", failures[0]
            )
            self._coordinator_lost = True
        raise Transient() from failures[0]

    async def _hint(
        self, azure_queue: _AzureQueue, message: azure.QueueMessage
    ) -> azure.AzureHint | None:
        """The hint a message holds; ``None`` for a poison one, which is deleted."""
        try:
            hint = azure.parse_hint(message.text)
        except azure.PoisonHint as error:
            log.warning(
                "poison hint deleted queue=%s messageId=%s dequeueCount=%d error=%s",
                azure_queue.name,
                message.message_id,
                message.dequeue_count,
                error,
            )
            await self._delete(azure_queue, message, task_id="-", run_id="-")
            return None
        if message.dequeue_count > self._settings.dequeue_warning:
            self._metrics.dequeue_warnings.inc()
            log.warning(
                DEQUEUE_WARNING, hint.task_id, hint.run_id, azure_queue.name, message.dequeue_count
            )
        return hint

    async def _settle_hints(
        self,
        azure_queue: _AzureQueue,
        run: tuple[str, int],
        messages: list[azure.QueueMessage],
        outcome: Claim | RequestFailed,
    ) -> Claim | None:
        """Act on how the claim of a run ended: delete its messages when it was claimed or
        cannot be; release them when no coordinator answered and the queue has a release URL;
        raise the RequestFailed when the hint is not deleted."""
        task_id, run_id = run
        name = azure_queue.name
        if isinstance(outcome, RequestFailed):
            if outcome.status not in DEAD_HINT_STATUSES:
                if _throttled(outcome) and azure_queue.urls.release_url is not None:
                    log.info(
                        "claim throttled, hint released taskId=%s runId=%s queue=%s "
                        "retryAfter=%s code=%s",
                        task_id,
                        run_id,
                        name,
                        outcome.retry_after,
                        outcome.code,
                    )
                    await self._release(azure_queue, {run: messages}, after_s=outcome.retry_after)
                elif outcome.transient and azure_queue.urls.release_url is not None:
                    log.warning(
                        "claim failed, releasing hint taskId=%s runId=%s queue=%s error=%s",
                        task_id,
                        run_id,
                        name,
                        outcome,
                    )
                    await self._release(azure_queue, {run: messages})
                elif not outcome.refused:  # a refusal was logged as an ERROR when it came
                    log.warning(
                        "claim failed, hint kept taskId=%s runId=%s queue=%s error=%s",
                        task_id,
                        run_id,
                        name,
                        outcome,
                    )
                raise outcome
            # A definitive no (stale hint, run already taken, task gone): the hint is useless.
            log.info(
                "hint not claimable taskId=%s runId=%s queue=%s status=%s code=%s",
                task_id,
                run_id,
                name,
                outcome.status,
                outcome.code,
            )
            claim = None
        else:
            log.debug(
                "claimed taskId=%s runId=%s queue=%s takenUntil=%s",
                task_id,
                run_id,
                name,
                outcome.taken_until.isoformat(),
            )
            claim = outcome
        # The claim's answer is all the handler waits for; the deletes go on meanwhile.
        deletes = asyncio.gather(
            *(
                self._delete(azure_queue, message, task_id=task_id, run_id=run_id)
                for message in messages
            )
        )
        self._deleting.add(deletes)
        deletes.add_done_callback(self._deleting.discard)
        return claim

    async def _claim(
        self, runs: list[tuple[str, int]], azure_queue: _AzureQueue
    ) -> list[Claim | RequestFailed]:
        """Claim ``runs``, retrying in place those that failed transiently for up to
        :data:`RELEASE_RETRY_WINDOW` when the queue has a release URL (the hint is released
        then), else :data:`CLAIM_RETRY_WINDOW`: the message stays hidden from every other
        worker until its visibility timeout (300 s) ends, so giving up at once would leave its
        run waiting that long after a short coordinator outage. A refusal (401, 403) is retried for
        :data:`REFUSED_RETRY_WINDOW`, in case the worker's scopes are being fixed. Each retry
        is one request for every run still to be retried; the answer is each run's last
        outcome, in order."""
        name = azure_queue.name
        releasable = azure_queue.urls.release_url is not None
        started = time.monotonic()
        outcomes: dict[tuple[str, int], Claim | RequestFailed] = {}
        todo = runs
        attempt = 0
        while True:
            for (task_id, run_id), outcome in zip(todo, await self._claim_once(todo), strict=True):
                outcomes[task_id, run_id] = outcome
                if isinstance(outcome, RequestFailed) and outcome.refused and attempt == 0:
                    _log_refusal(task_id, run_id, name, outcome)
            delay = self._retrying.delay(attempt)
            retry_by = time.monotonic() + delay
            todo = [
                run
                for run in todo
                if isinstance(failure := outcomes[run], RequestFailed)
                and not self._stopping.is_set()
                and retry_by < started + _claim_retry_window(failure, releasable=releasable)
            ]
            if not todo:
                return [outcomes[run] for run in runs]
            attempt += 1
            for task_id, run_id in todo:
                log.info(
                    "claim retried taskId=%s runId=%s queue=%s error=%s retryIn=%.2f",
                    task_id,
                    run_id,
                    name,
                    outcomes[task_id, run_id],
                    delay,
                )
            await self._retrying.pause(delay)

    async def _claim_once(self, runs: list[tuple[str, int]]) -> list[Claim | RequestFailed]:
        """One try at claiming ``runs``: one claimRuns request while the coordinator offers
        it, one claimTask each otherwise."""
        if self._batch_claims:
            try:
                return await self._client.claim_runs(
                    runs,
                    worker_group=self._identity.worker_group,
                    worker_id=self._identity.worker_id,
                )
            except RequestFailed as error:
                if error.status == 404:
                    self._batch_claims = False
                    log.info("coordinator lacks claimRuns, claiming one run per request")
                elif error.status == 400:
                    # One hint the coordinator rejects (a taskId that is no slugid) fails the
                    # whole batch; claimed singly, every other hint still gets its run.
                    log.warning(
                        "claim batch rejected, claiming singly runs=%d error=%s", len(runs), error
                    )
                else:
                    return [error] * len(runs)
        return await asyncio.gather(
            *(self._claim_task(task_id, run_id) for task_id, run_id in runs)
        )

    async def _claim_task(self, task_id: str, run_id: int) -> Claim | RequestFailed:
        try:
            return await self._client.claim_task(
                task_id,
                run_id,
                worker_group=self._identity.worker_group,
                worker_id=self._identity.worker_id,
            )
        except RequestFailed as error:
            return error

    async def _delete(
        self,
        azure_queue: _AzureQueue,
        message: azure.QueueMessage,
        *,
        task_id: str,
        run_id: int | str,
    ) -> None:
        self._metrics.azure_requests.labels("delete").inc()
        try:
            await azure.delete_message(
                self._session, azure.delete_url(azure_queue.urls.delete_url, message)
            )
        except RequestFailed as error:
            # Not retried: the message reappears after its visibility timeout, and the claim
            # it leads to then fails and deletes it.
            self._metrics.delete_failures.inc()
            log.warning(
                "hint delete failed taskId=%s runId=%s queue=%s messageId=%s error=%s",
                task_id,
                run_id,
                azure_queue.name,
                message.message_id,
                error,
            )

    async def _release(
        self,
        azure_queue: _AzureQueue,
        runs: Mapping[tuple[str, int], list[azure.QueueMessage]],
        *,
        after_s: int | None = None,
    ) -> None:
        """Make the messages hinting at ``runs`` visible again within seconds, or after
        ``after_s`` (Update Message through the queue's release URL, which it must have)."""
        template = azure_queue.urls.release_url
        assert template is not None
        await asyncio.gather(
            *(
                self._release_one(
                    azure_queue,
                    azure.release_url(template, message, after_s=after_s),
                    message,
                    task_id=task_id,
                    run_id=run_id,
                )
                for (task_id, run_id), messages in runs.items()
                for message in messages
            )
        )

    async def _release_one(
        self,
        azure_queue: _AzureQueue,
        url: str,
        message: azure.QueueMessage,
        *,
        task_id: str,
        run_id: int,
    ) -> None:
        self._metrics.azure_requests.labels("release").inc()
        try:
            await azure.release_message(self._session, url)
        except RequestFailed as error:
            # Not retried: the message reappears after its visibility timeout anyway (and a
            # 404 or PopReceiptMismatch means it is gone, or taken again, already).
            log.warning(
                "hint release failed taskId=%s runId=%s queue=%s messageId=%s error=%s",
                task_id,
                run_id,
                azure_queue.name,
                message.message_id,
                error,
            )


def _log_refusal(task_id: str, run_id: int, name: str, error: RequestFailed) -> None:
    # 403 lists the scopes the worker's client lacks; 401 says why its credentials do not
    # verify.
    detail = (
        f"missingScopes={missing_scopes(error)}"
        if error.status == 403
        else f"message={error.message.splitlines()[0] if error.message else '-'}"
    )
    log.error(
        "claim refused, hint kept taskId=%s runId=%s queue=%s status=%s code=%s %s",
        task_id,
        run_id,
        name,
        error.status,
        error.code,
        detail,
    )


def _throttled(error: RequestFailed) -> bool:
    """The coordinator refused the claim for now, saying when to ask again (a paused or
    limited task queue): its hint is good, only not now."""
    return error.status == 429 and error.retry_after is not None


def _claim_retry_window(error: RequestFailed, *, releasable: bool) -> float:
    """How long after its first try a claim that failed with ``error`` is still retried;
    ``releasable``: its hint can be released once the tries end (at once when the coordinator
    said when to ask again)."""
    if _throttled(error) and releasable:
        return 0.0
    if error.transient:
        return RELEASE_RETRY_WINDOW if releasable else CLAIM_RETRY_WINDOW
    if error.refused:
        return REFUSED_RETRY_WINDOW
    return 0.0
