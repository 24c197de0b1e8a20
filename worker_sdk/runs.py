"""What a handler gets: :class:`TaskRun`, one claimed run, and the :class:`Lease` behind it.

The worker keeps a lease per run it holds: the claim's deadline and credentials, renewed by
each reclaim, and the cancellation. A run handed to a handler in another process travels as
JSON (:meth:`TaskRun.to_json`) and arrives as a snapshot (:meth:`TaskRun.from_json`).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, Literal

from hawk_signing import Credentials
from worker_sdk.client import Claim, Reclaim

Handler = Callable[["TaskRun"], Awaitable[None] | None]
"""An ``async def`` (run on the event loop) or a plain function (run in a thread)."""

CancelReason = Literal["claim-lost", "worker-shutdown"]


class Lease:
    """The changing state of one claimed run: its deadline, credentials and cancellation."""

    def __init__(self, claim: Claim) -> None:
        self.taken_until = claim.taken_until
        self.expires_at = claim.expires_at
        self.credentials = claim.credentials
        self.cancel_reason: CancelReason | None = None
        self.cancelled = threading.Event()
        self.handler: asyncio.Task[None] | None = None

    def renew(self, reclaim: Reclaim) -> None:
        self.taken_until = reclaim.taken_until
        self.expires_at = reclaim.expires_at
        self.credentials = reclaim.credentials

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
    background. ``cancelled`` is set when the worker gives up on the run (claim lost, or
    shutdown after the grace period): async handlers are cancelled outright, but a sync
    handler's thread cannot be, so long sync handlers should check it and return early.
    """

    def __init__(self, claim: Claim, lease: Lease) -> None:
        self._claim = claim
        self._lease = lease

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

    def __repr__(self) -> str:
        return f"TaskRun(task_id={self.task_id!r}, run_id={self.run_id})"

    def to_json(self) -> str:
        """The run as it stands now, for :meth:`from_json` in another process."""
        credentials = self.credentials
        return json.dumps(
            {
                "taskId": self.task_id,
                "runId": self.run_id,
                "task": self.task,
                "takenUntil": self.taken_until.isoformat(),
                "retriesLeft": self.retries_left,
                "credentials": {
                    "clientId": credentials.client_id,
                    "accessToken": credentials.access_token,
                    "certificate": credentials.certificate,
                },
            }
        )

    @classmethod
    def from_json(cls, text: str) -> TaskRun:
        """A snapshot of the run :meth:`to_json` wrote: its ``taken_until`` and
        ``credentials`` stay those of that moment, and ``cancelled`` is never set."""
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
        return cls(claim, Lease(claim))
