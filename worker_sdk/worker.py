"""The Worker: runs a handler for each claimed run, keeps claims alive, reports how runs resolved.

It runs at most ``capacity`` handlers at once and asks its poller for exactly as many more as
it has room for; a run whose handler ended frees its slot while its report is on its way (up to
``capacity`` such runs), so the answer to one batch of reports is not waited for before the
next get. Each run gets a reclaim loop on the monotonic clock (docs/protocol.md, worker
protocol step 7) and one report at the end (step 8), both gathered with other runs' into
batches (:mod:`worker_sdk.batches`). On :meth:`Worker.stop` (or SIGTERM/SIGINT) it stops
polling, lets running handlers finish within the grace period, then cancels the rest and
reports ``worker-shutdown`` so the coordinator retries them (step 9). A run the coordinator
says was cancelled (:mod:`worker_sdk.cancellations`) has its handler stopped at once and is
not reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import logging
import math
import os
import random
import re
import signal
import socket
import time
import traceback
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp

from hawk_signing import Credentials
from otlp_tracing import SpanKindName
from worker_sdk import timing, tracing
from worker_sdk.artifacts import RunArtifacts
from worker_sdk.azure_poller import AzurePoller
from worker_sdk.batches import RunBatches
from worker_sdk.cancellations import RunWatch
from worker_sdk.claim_work_poller import ClaimWorkPoller
from worker_sdk.client import (
    MAX_BATCH_RUNS,
    MAX_INLINE_ARTIFACT_BYTES,
    Claim,
    CoordinatorClient,
    InlineArtifact,
    Resolution,
    ca_context,
    new_session,
    root_urls_of,
)
from worker_sdk.daemon_threads import in_daemon_thread
from worker_sdk.errors import NoAzureQueues, RequestFailed, RetryTask, TaskException
from worker_sdk.isolation import HandlerError, ProcessIsolation
from worker_sdk.metrics import WorkerMetrics
from worker_sdk.options import WorkerOptions
from worker_sdk.poller import Poller, PollerParts, PollSettings, WorkerIdentity
from worker_sdk.priorities import (
    PollOrder,
    task_queues_of,
    weights_with,
)
from worker_sdk.progress import RunProgressReporter
from worker_sdk.run_log import (
    RUN_LOG_CONTENT_TYPE,
    RUN_LOG_NAME,
    RunLog,
    RunLogFormatter,
    RunLogs,
    current_run,
)
from worker_sdk.runs import Handler, Lease, TaskRun
from worker_sdk.serving import RunTimeExceeded, within_max_run_time

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = logging.getLogger(__name__)

REPORT_TIMEOUT = 30.0
"""After the grace period, how long shutdown waits for the worker-shutdown reports."""

RUN_LOG_TIMEOUT = 20.0
"""How long the upload of a run's log may hold up its report."""

_T = TypeVar("_T")


def resolution_for(
    error: BaseException | None, *, retries_left: int = 0, retry_failures: bool = False
) -> Resolution:
    """The report for a handler that returned (``None``) or raised ``error``.

    :class:`RetryTask`, and with ``retry_failures`` any exception that is no
    :class:`TaskException` nor :class:`RunTimeExceeded`, asks for a retry:
    ``intermittent-task`` while the task has ``retries_left``, ``failed`` on its last run.
    """
    if error is None:
        return Resolution(kind="completed")
    retry = isinstance(error, RetryTask) or (
        retry_failures and not isinstance(error, TaskException | RunTimeExceeded)
    )
    if retry:
        if retries_left > 0:
            retry_after = error.retry_after if isinstance(error, RetryTask) else None
            return Resolution(kind="exception", reason=RetryTask.reason, retry_after=retry_after)
        return Resolution(kind="failed")
    if isinstance(error, TaskException):
        return Resolution(kind="exception", reason=error.reason)
    return Resolution(kind="failed")


def default_worker_group() -> str:
    """The short host name, made a legal Taskcluster identifier."""
    return _identifier(socket.gethostname().split(".")[0] or "worker")


def default_worker_id() -> str:
    """Host name and process id: unique per process within the worker group."""
    suffix = f"-{os.getpid()}"
    return default_worker_group()[: 38 - len(suffix)] + suffix


def _identifier(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "-", text)[:38]


class Worker:
    """Claims runs of its task queues and hands each to ``handler``; see the package docs.

    Its other keywords are the fields of :class:`~worker_sdk.options.WorkerOptions`, each
    saying what it does (docs/worker-sdk.md has them as a table); or give ``options``, a
    ``WorkerOptions``, which the keywords then override. The coordinator is at ``root_url``,
    or ``root_urls``: replicas of one coordinator in order of preference (see
    :mod:`worker_sdk.client`). The task queues are ``task_queues`` and
    ``provisioner_id``/``worker_type`` when given: at least one in all. ``polling`` orders
    their Azure queues (:mod:`worker_sdk.priorities`). ``claim_work`` ``None`` polls Azure
    unless the coordinator has no Azure queues (it dispatches from its store, and
    pollTaskUrls answers 404), then uses claimWork. ``isolation="process"`` runs each handler
    in one of a pool of ``capacity`` child processes (:mod:`worker_sdk.isolation`). Without
    ``handle_signals``, call :meth:`stop` to stop it.

    :raises ValueError: an option that cannot work (:class:`WorkerOptions`), or no task queue.
    """

    def __init__(
        self, *, handler: Handler, options: WorkerOptions | None = None, **keywords: Any
    ) -> None:
        self.options = (
            WorkerOptions(**keywords)
            if options is None
            else dataclasses.replace(options, **keywords)
        )
        given = self.options
        credentials = given.credentials
        self._credentials = (
            credentials
            if credentials is None or isinstance(credentials, Credentials)
            else Credentials.from_json(credentials)
        )
        self._identity = WorkerIdentity(
            task_queues=task_queues_of(given.provisioner_id, given.worker_type, given.task_queues),
            worker_group=given.worker_group or default_worker_group(),
            worker_id=given.worker_id or default_worker_id(),
        )
        self._settings = PollSettings(
            idle_delay=given.idle_delay,
            idle_rate=given.idle_rate,
            backoff=given.backoff,
            dequeue_warning=given.dequeue_warning,
            order=PollOrder(polling=given.polling, weights=weights_with(given.weights or {})),
            batching=given.batching,
            empty_queue_skip=given.empty_queue_skip,
        )
        # claimWork keeps its own long polls in flight (one per task queue); and a loop that
        # the capacity has no run for would never poll
        self._polls_in_flight = (
            1 if given.claim_work else min(given.polls_in_flight, given.capacity)
        )
        self._isolation = (
            ProcessIsolation(
                handler, size=given.capacity, max_runs_per_child=given.max_runs_per_child
            )
            if given.isolation == "process"
            else None
        )
        self._root_urls = root_urls_of(given.root_url, given.root_urls)
        self._tracer = tracing.tracer()
        self._handler = handler
        # Also true for objects with an ``async def __call__``.
        self._handler_is_async = inspect.iscoroutinefunction(
            handler
        ) or inspect.iscoroutinefunction(type(handler).__call__)
        self._capacity = given.capacity
        self._claim_work = given.claim_work
        self._grace_period = given.grace_period
        self._max_run_time = given.max_run_time
        self._retry_failures = given.retry_failures
        self._handle_signals = given.handle_signals
        self._metrics_port = given.metrics_port
        self._metrics_host = given.metrics_host
        # Loaded here: an SSL_CERT_FILE that cannot be loaded is a ValueError like a bad option.
        self._tls = ca_context()
        self._run_logs = RunLogs() if given.run_log else None
        self.metrics = WorkerMetrics()
        self._rng = random.Random()
        self._watch = RunWatch(backoff=given.backoff, rng=self._rng)
        self._stopping = asyncio.Event()
        # Set whenever a run finishes or a stop is requested: the poll loop's reasons to look
        # again at its free capacity.
        self._wakeup = asyncio.Event()
        # Keyed by (taskId, runId): a duplicate hint of a run this worker already holds is
        # claimed again with 200 (claimTask's idempotent repeat), but must not start the
        # handler a second time.
        self._runs: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._leases: set[Lease] = set()
        self._reporting: set[tuple[str, int]] = set()
        """Runs of ``_runs`` whose handler has ended and whose report is on its way."""
        self._asking = 0
        """Runs the poll loops have asked their poller for and not yet received."""
        self._asked: list[float] = []
        """When each claim request in flight was sent (monotonic)."""
        self._finished: dict[tuple[str, int], float] = {}
        """When runs finished (monotonic), oldest first, kept while a claim asked for before
        may still answer with one of them."""

    @property
    def worker_group(self) -> str:
        return self._identity.worker_group

    @property
    def worker_id(self) -> str:
        return self._identity.worker_id

    def stop(self) -> None:
        """Ask for a graceful shutdown; :meth:`run` returns once it is done.

        Call it from the event loop's thread (``loop.call_soon_threadsafe`` otherwise).
        """
        if not self._stopping.is_set():
            log.info(
                "worker stopping workerId=%s runs=%d", self._identity.worker_id, len(self._runs)
            )
        self._stopping.set()
        self._wakeup.set()

    async def run(self) -> None:
        """Work until :meth:`stop` (or a signal), then shut down gracefully.

        Raises :class:`~worker_sdk.errors.RequestFailed` if the coordinator refuses the
        worker for good (bad credentials, missing scopes), after draining running handlers.
        """
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT) if self._handle_signals else ()
        for signum in signals:
            loop.add_signal_handler(signum, self._on_signal, signum)
        try:
            async with contextlib.AsyncExitStack() as stack:
                session = await stack.enter_async_context(new_session(self._tls))
                if self._isolation is not None:
                    await stack.enter_async_context(self._isolation.running())
                if self._run_logs is not None:
                    logging.getLogger().addHandler(self._run_logs)
                    stack.callback(logging.getLogger().removeHandler, self._run_logs)
                if self._metrics_port is not None:
                    stack.callback(self.metrics.serve(self._metrics_port, self._metrics_host))
                client = CoordinatorClient(
                    session=session, root_urls=self._root_urls, credentials=self._credentials
                )
                batches = RunBatches(client=client, enabled=self._settings.batching)
                # Closed before the session: by then only batches nobody waits for are left.
                stack.push_async_callback(batches.aclose)
                watching = asyncio.create_task(self._watch.run(client), name="watchRuns")
                stack.push_async_callback(_cancelled, watching)
                log.info(
                    "worker started taskQueues=%s workerGroup=%s workerId=%s capacity=%d"
                    " mode=%s polling=%s isolation=%s batching=%s emptyQueueSkip=%g"
                    " pollsInFlight=%d runLog=%s rootUrls=%s",
                    ",".join(map(str, self._identity.task_queues)),
                    self._identity.worker_group,
                    self._identity.worker_id,
                    self._capacity,
                    {True: "claimWork", False: "azure", None: "auto"}[self._claim_work],
                    self._settings.order.polling,
                    "process" if self._isolation is not None else "none",
                    "on" if self._settings.batching else "off",
                    self._settings.empty_queue_skip,
                    self._polls_in_flight,
                    "on" if self._run_logs is not None else "off",
                    ",".join(self._root_urls),
                )
                await self._serve(session, client, batches)
        finally:
            for signum in signals:
                loop.remove_signal_handler(signum)
        log.info("worker stopped workerId=%s", self._identity.worker_id)

    def _on_signal(self, signum: int) -> None:
        log.info("signal received signal=%s", signal.Signals(signum).name)
        self.stop()

    async def _serve(
        self, session: aiohttp.ClientSession, client: CoordinatorClient, batches: RunBatches
    ) -> None:
        polling = asyncio.create_task(self._poll_either(session, client, batches))
        stop_requested = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({polling, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Also reached when polling failed for good: drain what runs, then raise.
            self.stop()
            stop_requested.cancel()
            await self._shut_down(polling)
        if not polling.cancelled() and polling.exception() is not None:
            log.error("worker giving up error=%s", polling.exception())
            polling.result()

    async def _poll_either(
        self, session: aiohttp.ClientSession, client: CoordinatorClient, batches: RunBatches
    ) -> None:
        """Poll as ``claim_work`` says; undecided, poll Azure until the coordinator shows it
        has no Azure queues, then claim through claimWork."""
        try:
            await self._poll(self._poller(session, client), client, batches)
        except NoAzureQueues:
            if self._claim_work is not None:
                raise
            log.info(
                "the coordinator dispatches from its store (pollTaskUrls answered 404): "
                "claiming through claimWork"
            )
            self._claim_work = True
            self._polls_in_flight = 1
            await self._poll(self._poller(session, client), client, batches)

    def _poller(self, session: aiohttp.ClientSession, client: CoordinatorClient) -> Poller:
        parts = PollerParts(
            client=client,
            identity=self._identity,
            settings=self._settings,
            stopping=self._stopping,
            rng=self._rng,
        )
        if self._claim_work:
            return ClaimWorkPoller(**parts)
        return AzurePoller(session=session, metrics=self.metrics, **parts)

    async def _poll(self, poller: Poller, client: CoordinatorClient, batches: RunBatches) -> None:
        """Run ``polls_in_flight`` poll loops until the worker stops; the first error (one a
        retry cannot fix) stops the others and is raised."""
        loops = [
            asyncio.create_task(self._poll_loop(poller, client, batches))
            for _ in range(self._polls_in_flight)
        ]
        try:
            done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
        for loop in done:
            loop.result()

    async def _poll_loop(
        self, poller: Poller, client: CoordinatorClient, batches: RunBatches
    ) -> None:
        while not self._stopping.is_set():
            self._wakeup.clear()
            # a run whose report is on its way holds no handler: up to capacity of them
            # leave their slots to new runs, so a slow answer to reports does not idle the
            # worker, yet a coordinator that stops answering them cannot pile runs up; what
            # another loop asked for is spoken for
            free = (
                self._capacity
                - len(self._runs)
                + min(len(self._reporting), self._capacity)
                - self._asking
            )
            if free <= 0:
                await self._wakeup.wait()
                continue
            # each loop asks for its share of the capacity, so that another can poll while
            # this one's claim is on its way
            count = min(free, MAX_BATCH_RUNS, -(-self._capacity // self._polls_in_flight))
            self._asking += count
            asked_at = time.monotonic()
            self._asked.append(asked_at)
            try:
                claims = await poller.claims(count)
            finally:
                self._asking -= count
                self._asked.remove(asked_at)
                self._wakeup.set()  # what was asked and not claimed is free again
            for claim in claims:
                key = (claim.task_id, claim.run_id)
                # A duplicate hint's claim may be answered (the same worker's claim of the run
                # it holds is answered again) while the run goes on, and reach us after the run
                # finished: it is the same run, not a new one.
                if key in self._runs or self._finished.get(key, -math.inf) >= asked_at:
                    log.info("duplicate claim ignored taskId=%s runId=%s", *key)
                    continue
                run = asyncio.create_task(
                    self._execute(claim, client, batches),
                    name=f"taskId={claim.task_id} runId={claim.run_id}",
                )
                self._runs[key] = run
                run.add_done_callback(functools.partial(self._run_finished, key))

    def _run_finished(self, key: tuple[str, int], run: asyncio.Task[None]) -> None:
        del self._runs[key]
        self._finished[key] = time.monotonic()
        # Only a claim asked for before a run finished can be a late duplicate of it.
        oldest = min(self._asked, default=math.inf)
        while self._finished:
            first = next(iter(self._finished))
            if self._finished[first] >= oldest:
                break
            del self._finished[first]
        self._reporting.discard(key)
        self._wakeup.set()
        if not run.cancelled() and run.exception() is not None:
            log.error("run supervisor crashed %s", run.get_name(), exc_info=run.exception())

    async def _shut_down(self, polling: asyncio.Task[None]) -> None:
        grace_ends = time.monotonic() + self._grace_period
        # Polling ends at its next pause; only an in-flight request (a claimWork long poll)
        # can hold it up, and then the grace period bounds the wait.
        await asyncio.wait({polling}, timeout=self._grace_period)
        if not polling.done():
            polling.cancel()
            await asyncio.wait({polling})
        if self._runs:
            log.info("waiting for running handlers runs=%d", len(self._runs))
            await asyncio.wait(
                set(self._runs.values()), timeout=max(0.0, grace_ends - time.monotonic())
            )
        for lease in list(self._leases):
            lease.cancel("worker-shutdown")
        if self._runs:
            _, late = await asyncio.wait(set(self._runs.values()), timeout=REPORT_TIMEOUT)
            for run in late:
                log.error("report abandoned at shutdown %s", run.get_name())
                run.cancel()
            if late:
                await asyncio.wait(late)

    async def _execute(self, claim: Claim, client: CoordinatorClient, batches: RunBatches) -> None:
        lease = Lease(claim)
        artifacts = RunArtifacts(
            root_urls=self._root_urls,
            task_id=claim.task_id,
            run_id=claim.run_id,
            task_expires=claim.task.get("expires"),
            credentials=lambda: lease.credentials,
            client=client,
            loop=asyncio.get_running_loop(),
            backoff=self._settings.backoff,
        )
        progress = RunProgressReporter(
            lambda fraction, message: client.report_progress(
                claim.task_id, claim.run_id, fraction, message, credentials=lease.credentials
            ),
            loop=asyncio.get_running_loop(),
        )
        run = TaskRun(claim, lease, artifacts, progress)
        if self._stopping.is_set():
            # Claimed while the worker was stopping: hand it straight back for a retry.
            log.info("run returned, worker stopping taskId=%s runId=%s", run.task_id, run.run_id)
            await self._report(
                batches, run, lease, Resolution(kind="exception", reason="worker-shutdown")
            )
            return
        key = (run.task_id, run.run_id)
        run_log = self._run_logs.collect(key) if self._run_logs is not None else None
        try:
            await self._supervise(run, lease, run_log, artifacts, batches, progress)
        finally:
            if self._run_logs is not None:
                self._run_logs.forget(key)

    async def _supervise(
        self,
        run: TaskRun,
        lease: Lease,
        run_log: RunLog | None,
        artifacts: RunArtifacts,
        batches: RunBatches,
        progress: RunProgressReporter,
    ) -> None:
        """Run the handler while keeping the claim, then send its last progress, upload the
        run log and report."""
        lease.handler = asyncio.create_task(self._call(run, lease, run_log))
        self._leases.add(lease)
        key = (run.task_id, run.run_id)
        self._watch.add(key, lease)
        # The keeper starts at the first reclaim's time: most runs end well before it, and a
        # timer costs less than a task that sleeps until then.
        keeper: asyncio.Task[None] | None = None

        def keep() -> None:
            nonlocal keeper
            keeper = asyncio.create_task(self._keep_claimed(batches, run, lease))

        started = time.monotonic()
        first_reclaim = asyncio.get_running_loop().call_later(
            timing.reclaim_at(now=started, expires_at=lease.expires_at) - started, keep
        )
        log.info("run started taskId=%s runId=%s", run.task_id, run.run_id)
        self.metrics.running.inc()
        try:
            await asyncio.wait({lease.handler})
        finally:
            self.metrics.running.dec()
            self.metrics.task_duration.observe(time.monotonic() - started)
            self._leases.discard(lease)
            self._watch.discard(key)
            first_reclaim.cancel()
            if keeper is not None:
                keeper.cancel()
                # asyncio.wait, unlike awaiting the task, never swallows our own cancellation.
                await asyncio.wait({keeper})
        resolution = self._resolution(run, lease, lease.handler)
        if resolution is not None:
            self._reporting.add((run.task_id, run.run_id))
            self._wakeup.set()
            await progress.flush()
            content = None
            if run_log is not None:
                content = self._run_log_content(run, lease, run_log, resolution)
            await self._report(
                batches,
                run,
                lease,
                resolution,
                run_log=None if content is None else (content, artifacts),
            )

    async def _call(self, run: TaskRun, lease: Lease, run_log: RunLog | None) -> None:
        # This task's context (and the threads and tasks it starts) is the run's: what it
        # logs goes to the run's log.
        current_run.set((run.task_id, run.run_id))
        if self._tracer is None:
            await self._call_handler_within(run, lease, run_log)
            return
        with self._run_span("handler", "consumer", run):
            await self._call_handler_within(run, lease, run_log)

    async def _call_handler_within(
        self, run: TaskRun, lease: Lease, run_log: RunLog | None
    ) -> None:
        """The handler, stopped as a function past its ``max_run_time`` is when it runs longer
        than the worker's."""
        if self._max_run_time is None:
            await self._call_handler(run, lease, run_log)
            return
        stopped = (
            "its process was ended"
            if self._isolation is not None
            else "cancelled"
            if self._handler_is_async
            else "abandoned in its thread"
        )
        await within_max_run_time(
            self._max_run_time,
            functools.partial(self._call_handler, run, lease, run_log),
            what=f"the handler was {stopped}",
            task_id=run.task_id,
            run_id=run.run_id,
        )

    def _run_span(
        self, name: str, kind: SpanKindName, run: TaskRun
    ) -> AbstractContextManager[Span]:
        """The span ``name`` of ``run``, under the claim's (only with a tracer)."""
        assert self._tracer is not None
        return tracing.run_span(
            self._tracer,
            name,
            kind,
            task_id=run.task_id,
            run_id=run.run_id,
            task=run.task,
            worker_id=self._identity.worker_id,
            traceparent=run.traceparent,
        )

    async def _call_handler(self, run: TaskRun, lease: Lease, run_log: RunLog | None) -> None:
        if self._isolation is not None:
            await self._isolation.run(
                run, lease, log_line=run_log.write if run_log is not None else None
            )
            return
        if self._handler_is_async:
            result = self._handler(run)
        else:
            result = await in_daemon_thread(
                functools.partial(self._handler, run),
                name=f"handler taskId={run.task_id} runId={run.run_id}",
            )
        if result is not None:
            await result

    def _resolution(
        self, run: TaskRun, lease: Lease, handler: asyncio.Task[None]
    ) -> Resolution | None:
        """What to report for a finished handler; ``None`` for a run that is no longer ours."""
        if lease.cancel_reason == "claim-lost":
            log.warning("run abandoned, claim lost taskId=%s runId=%s", run.task_id, run.run_id)
            return None
        if lease.cancel_reason == "task-cancelled":
            log.info("run stopped, task cancelled taskId=%s runId=%s", run.task_id, run.run_id)
            return None
        if lease.cancel_reason == "worker-shutdown":
            log.warning("run cancelled by shutdown taskId=%s runId=%s", run.task_id, run.run_id)
            return Resolution(kind="exception", reason="worker-shutdown")
        if handler.cancelled():
            log.error("handler cancelled itself taskId=%s runId=%s", run.task_id, run.run_id)
            return Resolution(kind="failed")
        error = handler.exception()
        resolution = resolution_for(
            error, retries_left=run.retries_left, retry_failures=self._retry_failures
        )
        if resolution.kind == "failed":
            log.error(
                "handler failed taskId=%s runId=%s retriesLeft=%d",
                run.task_id,
                run.run_id,
                run.retries_left,
                exc_info=error,
            )
        elif resolution.kind == "exception":
            log.warning(
                "handler raised taskId=%s runId=%s reason=%s retriesLeft=%d error=%s",
                run.task_id,
                run.run_id,
                resolution.reason,
                run.retries_left,
                error,
                # A failure being retried (retry_failures) still deserves its traceback.
                exc_info=None if isinstance(error, TaskException) else error,
            )
        return resolution

    def _run_log_content(
        self, run: TaskRun, lease: Lease, run_log: RunLog, resolution: Resolution
    ) -> bytes | None:
        """The run's log, gzipped, ended with the handler's traceback and the resolution;
        ``None`` for a run whose handler logged nothing and raised nothing."""
        assert lease.handler is not None
        handler = lease.handler
        error = None if handler.cancelled() else handler.exception()
        if error is None and run_log.empty:
            return None
        ending = f"run {run.task_id}/{run.run_id} resolved {resolution.kind}"
        if resolution.reason is not None:
            ending += f"/{resolution.reason}"
        if error is not None:
            ending += f", the handler raised:\n{_traceback(error)}"
        run_log.write(_run_log_line(ending))
        return run_log.gzipped()

    async def _upload_run_log(
        self, run: TaskRun, lease: Lease, content: bytes, artifacts: RunArtifacts
    ) -> None:
        """Upload the run's log (createArtifact and PUT) within :data:`RUN_LOG_TIMEOUT` and
        the claim; a failure is logged, never raised."""
        try:
            within = min(RUN_LOG_TIMEOUT, lease.expires_at - time.monotonic())
            async with asyncio.timeout(max(0.0, within)):
                await artifacts.upload(
                    RUN_LOG_NAME,
                    content,
                    content_type=RUN_LOG_CONTENT_TYPE,
                    content_encoding="gzip",
                )
        except Exception as failure:  # whatever it was, the report must still go out
            # a warning: the run itself is unharmed, and is reported next
            log.warning(
                "run log not uploaded taskId=%s runId=%s error=%s",
                run.task_id,
                run.run_id,
                failure if str(failure) else type(failure).__name__,
            )

    async def _keep_claimed(self, batches: RunBatches, run: TaskRun, lease: Lease) -> None:
        """Reclaim now, then well before each deadline, forever; cancel the handler if the
        claim is lost. Started at the first reclaim's time."""
        while True:
            try:
                # A retry still in flight at the deadline must not keep the handler running
                # past it: the coordinator hands the task to someone else at takenUntil.
                async with asyncio.timeout(max(0.0, lease.expires_at - time.monotonic())):
                    reclaim = await self._while_claimed(
                        lambda: batches.reclaim(
                            run.task_id, run.run_id, credentials=lease.credentials
                        ),
                        run,
                        lease,
                        retry_line="reclaim failed taskId=%s runId=%s error=%s retryIn=%.2f",
                    )
            except TimeoutError:
                log.warning(
                    "claim lost taskId=%s runId=%s error=takenUntil passed while reclaiming",
                    run.task_id,
                    run.run_id,
                )
                lease.cancel("claim-lost")
                return
            except RequestFailed as error:
                # 409: the run was resolved or superseded; nobody wants our report.
                log.warning(
                    "claim lost taskId=%s runId=%s error=%s", run.task_id, run.run_id, error
                )
                lease.cancel("claim-lost")
                return
            lease.renew(reclaim)
            log.info(
                "reclaimed taskId=%s runId=%s takenUntil=%s",
                run.task_id,
                run.run_id,
                reclaim.taken_until.isoformat(),
            )
            now = time.monotonic()
            await asyncio.sleep(timing.reclaim_at(now=now, expires_at=lease.expires_at) - now)

    async def _report(
        self,
        batches: RunBatches,
        run: TaskRun,
        lease: Lease,
        resolution: Resolution,
        *,
        run_log: tuple[bytes, RunArtifacts] | None = None,
    ) -> None:
        """Report, retrying transient errors while the claim lasts (after that it's moot).

        :param run_log: the run's log (:meth:`_run_log_content`) and what uploads it: carried
            in the report when small, else (or when the report goes singly) uploaded first.
        """
        if self._tracer is None:
            await self._report_run(batches, run, lease, resolution, None, run_log)
            return
        with self._run_span("report", "client", run) as span:
            span.set_attribute("resolution", resolution.kind)
            traceparent = self._tracer.traceparent(span)
            await self._report_run(batches, run, lease, resolution, traceparent, run_log)

    async def _report_run(
        self,
        batches: RunBatches,
        run: TaskRun,
        lease: Lease,
        resolution: Resolution,
        traceparent: str | None,
        run_log: tuple[bytes, RunArtifacts] | None,
    ) -> None:
        inline: tuple[InlineArtifact, ...] = ()
        upload = None
        if run_log is not None:
            content, artifacts = run_log
            upload = _once(functools.partial(self._upload_run_log, run, lease, content, artifacts))
            if len(content) <= MAX_INLINE_ARTIFACT_BYTES:
                inline = (
                    InlineArtifact(
                        name=RUN_LOG_NAME,
                        content_type=RUN_LOG_CONTENT_TYPE,
                        content_encoding="gzip",
                        content=content,
                    ),
                )
            else:
                await upload()
        try:
            await self._while_claimed(
                lambda: batches.report(
                    run.task_id,
                    run.run_id,
                    resolution,
                    credentials=lease.credentials,
                    traceparent=traceparent,
                    artifacts=inline,
                    upload=upload,
                ),
                run,
                lease,
                retry_line="report failed taskId=%s runId=%s error=%s retryIn=%.2f",
            )
        except RequestFailed as error:
            if error.status == 404:
                # an operator deleted the task (deleteTasks, a resolved-task TTL): nobody wants it
                log.warning(
                    "task deleted while it ran, run forgotten taskId=%s runId=%s outcome=%s",
                    run.task_id,
                    run.run_id,
                    resolution.kind,
                )
                return
            log.error(
                "report not accepted taskId=%s runId=%s outcome=%s error=%s",
                run.task_id,
                run.run_id,
                resolution.kind,
                error,
            )
            return
        self.metrics.tasks.labels(resolution.kind).inc()
        log.info(
            "run resolved taskId=%s runId=%s outcome=%s reason=%s",
            run.task_id,
            run.run_id,
            resolution.kind,
            resolution.reason or "-",
        )

    async def _while_claimed(
        self,
        call: Callable[[], Awaitable[_T]],
        run: TaskRun,
        lease: Lease,
        *,
        retry_line: str,
    ) -> _T:
        """``call``, retried with jittered backoff after transient failures for as long as the
        claim lasts; raises the RequestFailed that ends the tries."""
        failures = 0
        while True:
            try:
                return await call()
            except RequestFailed as error:
                remaining = lease.expires_at - time.monotonic()
                if not error.transient or remaining <= 0:
                    raise
                delay = min(self._settings.backoff.delay(failures, self._rng), remaining)
                failures += 1
                log.warning(retry_line, run.task_id, run.run_id, error, delay)
                await asyncio.sleep(delay)


async def _cancelled(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it to end."""
    task.cancel()
    await asyncio.wait({task})


def _once(call: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """``call``, awaited the first time only: a report retried after its upload went out does
    not upload again."""
    called = False

    async def once() -> None:
        nonlocal called
        if not called:
            called = True
            await call()

    return once


def _traceback(error: BaseException) -> str:
    """The handler's traceback; a child process's is in its HandlerError's message."""
    if isinstance(error, HandlerError):
        return str(error)
    return "".join(traceback.format_exception(error)).rstrip("\n")


_RUN_LOG_FORMAT = RunLogFormatter()


def _run_log_line(message: str) -> str:
    """``message`` as the worker's own line of a run log."""
    record = logging.LogRecord(__name__, logging.INFO, __file__, 0, message, None, None)
    return _RUN_LOG_FORMAT.format(record)
