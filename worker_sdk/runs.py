"""What a handler gets: :class:`TaskRun`, one claimed run, and the :class:`Lease` behind it.

The worker keeps a lease per run it holds: the claim's deadline and credentials, renewed by
each reclaim, and the cancellation. A run handed to a handler in another process travels as
JSON (:meth:`TaskRun.to_json`) and arrives as a snapshot (:func:`run_from_json`) whose lease
the worker's process keeps renewing (:mod:`worker_sdk.isolation`).

A run creates its artifacts (:mod:`worker_sdk.artifacts`): ``await run.upload_artifact(...)``
and its siblings in an async handler, ``run.blocking.upload_artifact(...)`` in a sync one; it
reports its progress with ``run.progress(...)`` in either (:mod:`worker_sdk.progress`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import datetime
from typing import Any, Concatenate, Literal, ParamSpec

from hawk_signing import Credentials
from worker_sdk.artifacts import RunArtifacts
from worker_sdk.client import Claim, CoordinatorClient, Reclaim, new_session
from worker_sdk.progress import RunProgressReporter
from worker_sdk.timing import Backoff

Handler = Callable[["TaskRun"], Awaitable[None] | None]
"""An ``async def`` (run on the event loop) or a plain function (run in a thread)."""

CancelReason = Literal["claim-lost", "task-cancelled", "worker-shutdown"]
"""Why the worker stopped a handler: its claim was lost (the run resolved or taken from it),
the task was cancelled (cancelTask, cancelTaskGroup, a bulk cancel), or the worker is shutting
down past its grace period. Only a shutdown is reported; the others' runs are resolved
already."""

_P = ParamSpec("_P")


_ArtifactsMethod = Callable[Concatenate[RunArtifacts, _P], Coroutine[Any, Any, None]]
"""A coroutine method of :class:`~worker_sdk.artifacts.RunArtifacts` taking ``_P``."""


def _artifacts_method(
    method: _ArtifactsMethod[_P],
) -> Callable[Concatenate[TaskRun, _P], Coroutine[Any, Any, None]]:
    """``method`` as a :class:`TaskRun` method: called on the run's artifacts."""

    @functools.wraps(method)
    async def call(run: TaskRun, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        await method(run._artifacts, *args, **kwargs)

    return call


def _blocking_method(
    method: _ArtifactsMethod[_P],
) -> Callable[Concatenate[BlockingArtifacts, _P], None]:
    """``method`` as a :class:`BlockingArtifacts` method: run to its end on an event loop of
    its own."""

    @functools.wraps(method)
    def call(blocking: BlockingArtifacts, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(method(blocking._run._artifacts, *args, **kwargs))
            return
        raise RuntimeError(
            "run.blocking is for sync handlers; an async handler awaits the TaskRun's methods"
        )

    return call


class Lease:
    """The changing state of one claimed run: its deadline, credentials and cancellation."""

    def __init__(self, claim: Claim) -> None:
        self.taken_until = claim.taken_until
        self.expires_at = claim.expires_at
        self.credentials = claim.credentials
        self.cancel_reason: CancelReason | None = None
        self.cancelled = threading.Event()
        self.handler: asyncio.Task[None] | None = None
        self._watchers: list[Callable[[Lease], None]] = []

    def renew(self, reclaim: Reclaim) -> None:
        self.taken_until = reclaim.taken_until
        self.expires_at = reclaim.expires_at
        self.credentials = reclaim.credentials
        for watcher in list(self._watchers):
            watcher(self)

    def watch(self, watcher: Callable[[Lease], None]) -> Callable[[], None]:
        """Call ``watcher`` after each renewal, until the function returned is called."""
        self._watchers.append(watcher)
        return lambda: self._watchers.remove(watcher)

    def cancel(self, reason: CancelReason) -> None:
        """Stop the handler; the first reason given decides what gets reported."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.cancelled.set()
        if self.handler is not None:
            self.handler.cancel()


class TaskRun:
    """What a handler gets: one claimed run of a task.

    ``taken_until`` and ``credentials`` change as the worker reclaims the run in the
    background. ``cancelled`` is set when the worker gives up on the run (the task cancelled,
    the claim lost, or shutdown after the grace period): async handlers are cancelled
    outright, but a sync handler's thread cannot be, so long sync handlers should check it and
    return early.

    Artifacts: :meth:`upload_artifact`, :meth:`create_link_artifact`,
    :meth:`create_reference_artifact` and :meth:`create_error_artifact` are coroutines for
    async handlers; :attr:`blocking` has the same methods for sync ones. Each retries
    transient failures a few times, then raises :class:`~worker_sdk.errors.RequestFailed`
    (which the handler may catch: the run is still reported as the handler ends).
    """

    def __init__(
        self,
        claim: Claim,
        lease: Lease,
        artifacts: RunArtifacts,
        progress: RunProgressReporter | None = None,
    ) -> None:
        self._claim = claim
        self._lease = lease
        self._artifacts = artifacts
        self._progress = progress or RunProgressReporter(self._send_progress)

    @property
    def task_id(self) -> str:
        return self._claim.task_id

    @property
    def run_id(self) -> int:
        return self._claim.run_id

    @property
    def task(self) -> Mapping[str, Any]:
        """The task definition, as createTask stored it (with defaults)."""
        return self._claim.task

    @property
    def payload(self) -> Any:
        return self._claim.task.get("payload")

    @property
    def traceparent(self) -> str | None:
        """The W3C traceparent of the coordinator's span of this claim, under which the
        worker's spans of the run go; ``None`` when the coordinator does not trace."""
        return self._claim.traceparent

    @property
    def retries_left(self) -> int:
        """The task's ``retriesLeft`` at the claim: 0 means this is its last run."""
        return self._claim.retries_left

    @property
    def taken_until(self) -> datetime:
        return self._lease.taken_until

    @property
    def credentials(self) -> Credentials:
        """The run's current temporary credentials (scoped to the run and task)."""
        return self._lease.credentials

    @property
    def cancelled(self) -> threading.Event:
        return self._lease.cancelled

    @property
    def blocking(self) -> BlockingArtifacts:
        """The artifact methods for a sync handler, each blocking until it is done."""
        return BlockingArtifacts(self)

    # The artifact methods are the run's RunArtifacts', with their parameters and docs.
    upload_artifact = _artifacts_method(RunArtifacts.upload)
    create_link_artifact = _artifacts_method(RunArtifacts.link)
    create_reference_artifact = _artifacts_method(RunArtifacts.reference)
    create_error_artifact = _artifacts_method(RunArtifacts.error)

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Say how far the run is: ``fraction`` of its work done (0 to 1) and, optionally,
        what it is doing (at most 1,000 characters). Returns at once, in async and sync
        handlers alike: at most one report a second reaches the coordinator, the last value
        given, and the last before the run ends is sent before it is reported. Callers of the
        task read it (``TaskHandle.progress()``, ``GET /task/<taskId>/progress``, the
        dashboard).

        :raises ValueError: ``fraction`` is not a number from 0 to 1, or ``message`` is not a
            string of at most 1,000 characters.
        """
        self._progress.record(fraction, message)

    async def _send_progress(self, fraction: float, message: str | None) -> None:
        """One report, through a client of its own (a handler's child process)."""
        async with new_session() as session:
            client = CoordinatorClient(
                session=session, root_urls=self._artifacts.root_urls, credentials=None
            )
            await client.report_progress(
                self.task_id, self.run_id, fraction, message, credentials=self.credentials
            )

    def __repr__(self) -> str:
        return f"TaskRun(task_id={self.task_id!r}, run_id={self.run_id})"

    def to_json(self) -> str:
        """The run as it stands now, for :func:`run_from_json` in another process."""
        return json.dumps(
            {
                "taskId": self.task_id,
                "runId": self.run_id,
                "task": self.task,
                "takenUntil": self.taken_until.isoformat(),
                "retriesLeft": self.retries_left,
                "credentials": self.credentials.to_json(),
                "rootUrls": list(self._artifacts.root_urls),
                "backoff": {
                    "base": self._artifacts.backoff.base,
                    "cap": self._artifacts.backoff.cap,
                },
            }
        )


class BlockingArtifacts:
    """A :class:`TaskRun`'s artifact methods for sync handlers (``run.blocking``): the same
    parameters, each call blocking until it is done. They run their own event loop, so an
    async handler, on a running loop, awaits the :class:`TaskRun` methods instead."""

    def __init__(self, run: TaskRun) -> None:
        self._run = run

    upload_artifact = _blocking_method(RunArtifacts.upload)
    create_link_artifact = _blocking_method(RunArtifacts.link)
    create_reference_artifact = _blocking_method(RunArtifacts.reference)
    create_error_artifact = _blocking_method(RunArtifacts.error)


def close_progress(run: TaskRun) -> None:
    """Send the run's last progress, if it is not sent yet, once its handler returned in a
    child process; blocks until it is."""
    run._progress.close_sync()


def run_from_json(text: str) -> tuple[TaskRun, Lease]:
    """A snapshot of the run :meth:`TaskRun.to_json` wrote, and its lease: ``taken_until``
    and ``credentials`` stay those of that moment unless the lease is renewed here, and
    ``cancelled`` is never set."""
    value = json.loads(text)
    claim = Claim(
        task_id=value["taskId"],
        run_id=value["runId"],
        task=value["task"],
        taken_until=datetime.fromisoformat(value["takenUntil"]),
        # The worker that wrote it keeps the claim; here it never expires.
        expires_at=math.inf,
        credentials=Credentials.from_json(value["credentials"]),
        retries_left=value["retriesLeft"],
    )
    lease = Lease(claim)
    artifacts = RunArtifacts(
        root_urls=value["rootUrls"],
        task_id=claim.task_id,
        run_id=claim.run_id,
        task_expires=claim.task.get("expires"),
        credentials=lambda: lease.credentials,
        backoff=Backoff(**value["backoff"]),
    )
    return TaskRun(claim, lease, artifacts), lease
