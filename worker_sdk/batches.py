"""Reclaims and reports of many runs in one request: ``reclaimRuns`` and ``resolveRuns``.

A worker holding many runs would otherwise send one ``reclaimTask`` per run every few
minutes and one report per run as it ends, and runs claimed together (one Azure get, one
``claimRuns``) come up for reclaiming together and often end together. :class:`RunBatches`
gathers the calls made within :data:`BATCH_WINDOW` of the first into one request (sent at
once when it holds :data:`MAX_BATCH_RUNS`), signed with the worker's own credentials, and hands
each caller its own run's answer as if it had made the single call:

- the reclaim, with the new ``takenUntil`` and credentials, or the same
  :class:`~worker_sdk.errors.RequestFailed` (status, code, message) the single call would
  have raised, so callers keep telling a lost claim (409) from a deleted task (404);
- a transient failure of the whole request, for every run in it: each caller's own retry
  loop retries, and the retries are gathered again;
- for a run the batch refuses (401, 403: the worker's client may lack the worker-id scope),
  or every run of a batch refused as a whole, the answer of the single call made once with
  the run's temporary credentials;
- a coordinator without the route (404: an older one) gets single calls from then on. Until
  the coordinator has answered a batch, one batch of a route is in flight at a time, so a
  missing route costs one request however many batches were waiting.

A report may carry its run's small artifacts (the run log): stored with the report, they cost
no request of their own. A report sent singly uploads them first instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from hawk_signing import Credentials
from worker_sdk.client import (
    MAX_BATCH_RUNS,
    CoordinatorClient,
    InlineArtifact,
    Reclaim,
    Resolution,
    RunReport,
)
from worker_sdk.errors import RequestFailed

log = logging.getLogger(__name__)

BATCH_WINDOW = 0.005
"""How long a batch waits for more calls after its first: short next to any deadline, long
enough to catch runs whose timers fire together."""
_Item = TypeVar("_Item")
_Result = TypeVar("_Result")

Run = tuple[str, int]
"""``(taskId, runId)``."""


class _Unbatched(Exception):
    """The run is to be sent as the single call instead."""


class _Coalescer(Generic[_Item, _Result]):
    """Gathers the items submitted within the window into one request of one batch route."""

    def __init__(
        self,
        *,
        route: str,
        send: Callable[[list[_Item]], Awaitable[Sequence[_Result | RequestFailed]]],
        run_of: Callable[[_Item], Run],
        window: float,
        enabled: bool,
    ) -> None:
        self.route = route
        self.enabled = enabled
        """False once the coordinator showed it lacks the route (or batching is off)."""
        self._send = send
        self._run_of = run_of
        self._window = window
        self._pending: list[tuple[_Item, asyncio.Future[_Result]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._deliveries: set[asyncio.Task[None]] = set()
        self._known = not enabled
        """Whether the coordinator has shown whether it has the route."""
        self._probe = asyncio.Lock()

    async def submit(self, item: _Item) -> _Result:
        """The item's answer; raises its RequestFailed, or :class:`_Unbatched`."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Result] = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) >= MAX_BATCH_RUNS:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._window, self._flush)
        try:
            return await future
        except asyncio.CancelledError:
            # The caller gave up (its run ended): a batch not sent yet goes without it.
            self._pending = [entry for entry in self._pending if entry[1] is not future]
            raise

    async def aclose(self) -> None:
        """Drop what is in flight; for when nobody waits for an answer any more."""
        if self._timer is not None:
            self._timer.cancel()
        for delivery in self._deliveries:
            delivery.cancel()
        await asyncio.gather(*self._deliveries, return_exceptions=True)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending = self._pending, []
        if batch:
            delivery = asyncio.create_task(self._deliver(batch))
            self._deliveries.add(delivery)
            delivery.add_done_callback(self._deliveries.discard)

    async def _deliver(self, batch: list[tuple[_Item, asyncio.Future[_Result]]]) -> None:
        if self._known:
            await self._answer(batch)
            return
        async with self._probe:
            await self._answer(batch)

    async def _answer(self, batch: list[tuple[_Item, asyncio.Future[_Result]]]) -> None:
        results: Sequence[_Result | BaseException]
        try:
            if not self.enabled:  # the batch before this one found the route missing
                raise _Unbatched()
            results = await self._send([item for item, _ in batch])
            self._known = True
        except _Unbatched as unbatched:
            results = [unbatched] * len(batch)
        except RequestFailed as error:
            self._known = self._known or not error.transient
            results = [self._failed(error, len(batch))] * len(batch)
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as error:  # a bug: the callers see it rather than wait forever
            results = [error] * len(batch)
        for (item, future), result in zip(batch, results, strict=True):
            if future.done():  # its caller gave up
                continue
            if isinstance(result, RequestFailed) and result.refused:
                log.info(
                    "run refused in a batch, sent singly route=%s taskId=%s runId=%d"
                    " status=%s code=%s",
                    self.route,
                    *self._run_of(item),
                    result.status,
                    result.code,
                )
                future.set_exception(_Unbatched())
            elif isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    def _failed(self, error: RequestFailed, runs: int) -> BaseException:
        """What every run of a batch whose request failed as a whole gets."""
        if error.transient:
            return error
        if error.status == 404:
            if self.enabled:
                log.info("coordinator lacks %s, sending runs singly from now on", self.route)
            self.enabled = False
        else:
            # 400, 401, 403 for the whole request: each run's single call tells what is wrong.
            log.warning(
                "batch refused, runs sent singly route=%s runs=%d error=%s", self.route, runs, error
            )
        return _Unbatched()


class RunBatches:
    """The worker's reclaims and reports, gathered into batches; see the module docs.

    With ``enabled=False`` every call goes singly, as to a coordinator without the routes.
    """

    def __init__(
        self, *, client: CoordinatorClient, enabled: bool, window: float = BATCH_WINDOW
    ) -> None:
        self._client = client
        self._inline = True
        """Whether reports carry their runs' small artifacts (see :meth:`report`)."""
        self._reclaims: _Coalescer[Run, Reclaim] = _Coalescer(
            route="reclaimRuns",
            send=client.reclaim_runs,
            run_of=lambda run: run,
            window=window,
            enabled=enabled,
        )
        self._reports: _Coalescer[RunReport, None] = _Coalescer(
            route="resolveRuns",
            send=client.resolve_runs,
            run_of=lambda report: (report.task_id, report.run_id),
            window=window,
            enabled=enabled,
        )

    async def reclaim(self, task_id: str, run_id: int, *, credentials: Credentials) -> Reclaim:
        """reclaimTask's answer for the run; ``credentials`` (the run's) sign a single call."""
        return await _batched(
            self._reclaims,
            (task_id, run_id),
            lambda: self._client.reclaim_task(task_id, run_id, credentials=credentials),
        )

    async def report(
        self,
        task_id: str,
        run_id: int,
        resolution: Resolution,
        *,
        credentials: Credentials,
        traceparent: str | None = None,
        artifacts: Sequence[InlineArtifact] = (),
        upload: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Report the run as ``resolution`` says; ``credentials`` (the run's) sign a single call,
        which carries ``traceparent`` (a batch has no place for it).

        :param artifacts: small artifacts of the run carried in a batched report.
        :param upload: uploads ``artifacts`` (createArtifact and PUT) instead, and is awaited
            before the report whenever it is not batched: batching is off, or a report
            carrying artifacts was sent singly, after which artifacts are uploaded always
            (a coordinator that refuses them is one that predates them).
        """
        if artifacts and not (self._reports.enabled and self._inline):
            artifacts = ()
            if upload is not None:
                await upload()

        async def single() -> None:
            if artifacts:
                if self._inline:
                    log.info("reports carry no artifacts from now on, they are uploaded")
                self._inline = False
                if upload is not None:
                    await upload()
            if resolution.reason is not None:
                await self._client.report_exception(
                    task_id, run_id, resolution, credentials=credentials, traceparent=traceparent
                )
            elif resolution.kind == "completed":
                await self._client.report_completed(
                    task_id, run_id, credentials=credentials, traceparent=traceparent
                )
            else:
                await self._client.report_failed(
                    task_id, run_id, credentials=credentials, traceparent=traceparent
                )

        report = RunReport(
            task_id=task_id, run_id=run_id, resolution=resolution, artifacts=artifacts
        )
        await _batched(self._reports, report, single)

    async def aclose(self) -> None:
        """End the batches still in flight; call it once every run has been reported."""
        await asyncio.gather(self._reclaims.aclose(), self._reports.aclose())


async def _batched(
    coalescer: _Coalescer[_Item, _Result],
    item: _Item,
    single: Callable[[], Awaitable[_Result]],
) -> _Result:
    if coalescer.enabled:
        try:
            return await coalescer.submit(item)
        except _Unbatched:
            pass
    return await single()
