"""Cancellations: how a worker hears within moments that a run it is running was cancelled.

While the worker runs handlers, :class:`RunWatch` keeps one ``watchRuns`` long poll in flight
naming all of their runs (one per 32 runs), issued again when the set grows or the poll
answers. A run the coordinator reports no longer running (cancelTask, cancelTaskGroup, a bulk
cancel, or resolved by someone else) has its lease cancelled: ``task-cancelled`` for a cancel,
``claim-lost`` otherwise, and either way the worker stops its handler and reports nothing (the
run is resolved already). A coordinator without the route (404, an older release during a
rolling upgrade) is not asked again: the worker then learns of a cancel at its next reclaim,
as before.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

from worker_sdk.client import MAX_BATCH_RUNS, CoordinatorClient, StoppedRun
from worker_sdk.errors import RequestFailed
from worker_sdk.runs import CancelReason, Lease
from worker_sdk.timing import Backoff

log = logging.getLogger(__name__)

REISSUE_INTERVAL = 0.25
"""The least time between two issues of the long polls: runs started meanwhile wait that long
to be watched, so that a worker starting and ending many runs a second does not send a poll
for each."""

Run = tuple[str, int]
"""``(taskId, runId)``."""


class RunWatch:
    """The ``watchRuns`` long polls of one worker's running runs; see the module docs.

    :param backoff: the waits after failed polls.
    """

    def __init__(self, *, backoff: Backoff, rng: random.Random) -> None:
        self._backoff = backoff
        self._rng = rng
        self._leases: dict[Run, Lease] = {}
        self._unwatched: set[Run] = set()
        """Runs the coordinator refused to watch: they learn at their reclaim."""
        self._grown = asyncio.Event()

    def add(self, run: Run, lease: Lease) -> None:
        """Watch ``run`` (its handler started) until :meth:`discard`."""
        self._leases[run] = lease
        self._grown.set()

    def discard(self, run: Run) -> None:
        """Stop watching ``run`` (its handler ended); the polls in flight keep naming it until
        they are issued again, and what they say of it is ignored."""
        self._leases.pop(run, None)
        self._unwatched.discard(run)

    async def run(self, client: CoordinatorClient) -> None:
        """Keep the polls in flight until cancelled, or until the coordinator shows it has no
        ``watchRuns``."""
        failures = 0
        issued = -float("inf")
        while True:
            watched = [run for run in self._leases if run not in self._unwatched]
            if not watched:
                self._grown.clear()
                await self._grown.wait()
                continue
            await asyncio.sleep(max(0.0, issued + REISSUE_INTERVAL - time.monotonic()))
            watched = [run for run in self._leases if run not in self._unwatched]
            if not watched:
                continue
            self._grown.clear()
            issued = time.monotonic()
            try:
                answers = await self._poll(client, watched)
            except RequestFailed as error:
                if error.status == 404:
                    log.info(
                        "the coordinator has no watchRuns (an older release): cancelled runs "
                        "are noticed at their next reclaim"
                    )
                    return
                delay = self._backoff.delay(failures, self._rng)
                failures += 1
                log.warning("watchRuns failed error=%s retryIn=%.2f", error, delay)
                await asyncio.sleep(delay)
                continue
            failures = 0
            for run, answer in answers.items():
                self._stop(run, answer)

    async def _poll(
        self, client: CoordinatorClient, watched: list[Run]
    ) -> dict[Run, StoppedRun | RequestFailed]:
        """The polls of ``watched`` (a batch each) until the first answers or more runs are
        to be watched (then nothing); what the polls that answered said."""
        polls = {
            asyncio.ensure_future(client.watch_runs(watched[start : start + MAX_BATCH_RUNS]))
            for start in range(0, len(watched), MAX_BATCH_RUNS)
        }
        grown = asyncio.ensure_future(self._grown.wait())
        try:
            done, _ = await asyncio.wait({*polls, grown}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (*polls, grown):
                pending.cancel()
            await asyncio.wait({*polls, grown})
        answers: dict[Run, StoppedRun | RequestFailed] = {}
        for poll in polls & done:
            answers.update(poll.result())  # a failed poll raises its RequestFailed
        return answers

    def _stop(self, run: Run, answer: StoppedRun | RequestFailed) -> None:
        """Act on what the coordinator said of ``run``: cancel its lease when it no longer
        runs or no longer exists; stop watching it when it may not be watched."""
        lease = self._leases.get(run)
        if lease is None:
            return  # its handler ended meanwhile
        task_id, run_id = run
        if isinstance(answer, RequestFailed):
            if answer.status != 404:
                log.warning(
                    "run not watched, a cancel is noticed at its reclaim taskId=%s runId=%d "
                    "error=%s",
                    task_id,
                    run_id,
                    answer,
                )
                self._unwatched.add(run)
                return
            log.warning("task deleted while it ran taskId=%s runId=%d", task_id, run_id)
            reason: CancelReason = "claim-lost"
        else:
            log.info(
                "run stopped on the coordinator taskId=%s runId=%d state=%s reason=%s",
                task_id,
                run_id,
                answer.state,
                answer.reason_resolved or "-",
            )
            reason = "task-cancelled" if answer.reason_resolved == "canceled" else "claim-lost"
        del self._leases[run]
        lease.cancel(reason)
