""":class:`TaskHandle`: a dispatched function call, as its caller follows it.

``result()`` polls the task's status (every 50 ms at first, backing off to every second)
until the task is resolved, then reads the ``result.json`` of its last run
(:mod:`worker_sdk.results`): the function's return value, or :class:`TaskFailed`. A task that
is retried is not resolved until its last run is, so ``result()`` waits through the retries.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from worker_sdk.connection import Connection, blocking_form
from worker_sdk.errors import RequestFailed
from worker_sdk.progress import RunProgress
from worker_sdk.results import RESULT_ARTIFACT, outcome, task_failed

RESOLVED = frozenset({"completed", "failed", "exception"})

FIRST_POLL = 0.05
"""Seconds between the first status polls of ``result()``; each wait doubles, up to
:data:`LAST_POLL`."""
LAST_POLL = 1.0


@dataclass(frozen=True, kw_only=True)
class TaskHandle:
    """A task created by ``dispatch`` (or any task of an app's functions, by its id)."""

    task_id: str
    connection: Connection

    async def status(self) -> str:
        """The task's state: ``unscheduled``, ``pending``, ``running``, ``completed``,
        ``failed`` or ``exception``."""
        status = await self.connection.client().task_status(self.task_id)
        return str(status["state"])

    async def progress(self) -> list[RunProgress]:
        """The last progress report of each of the task's runs that sent one (a handler's
        ``run.progress``), by run; empty before any."""
        return await self.connection.client().task_progress(self.task_id)

    async def cancel(self) -> None:
        """Cancel the task (``exception/canceled``); nothing for a task already resolved.
        A running function is stopped when its worker next reclaims the run."""
        await self.connection.client().cancel_task(self.task_id)

    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 (SPEC §22's name)
        """Wait for the task to be resolved; the function's return value.

        :param timeout: seconds to wait at most (``None``: until the task's deadline).
        :raises TaskFailed: the task ended ``failed`` or ``exception``.
        :raises TimeoutError: it is not resolved within ``timeout``.
        """
        client = self.connection.client()
        until = None if timeout is None else time.monotonic() + timeout
        pause = FIRST_POLL
        while True:
            status = await client.task_status(self.task_id)
            if status["state"] in RESOLVED:
                break
            if until is not None and time.monotonic() + pause > until:
                raise TimeoutError(
                    f"task {self.task_id} is still {status['state']} after {timeout} s"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, LAST_POLL)
        body = await self._result_json(status["runs"][-1]["runId"])
        if status["state"] == "completed":
            return None if body is None else body["value"]
        raise task_failed(self.task_id, status, body)

    async def _result_json(self, run_id: int) -> dict[str, Any] | None:
        """The run's ``result.json``; ``None`` if it has none (its function returned
        ``None``, or never raised)."""
        try:
            content = await self.connection.client().artifact_content(
                self.task_id, run_id, RESULT_ARTIFACT
            )
        except RequestFailed as error:
            if error.status == 404:
                return None
            raise
        return dict(outcome(content))

    status_sync = blocking_form(status)
    cancel_sync = blocking_form(cancel)
    progress_sync = blocking_form(progress)
    result_sync = blocking_form(result)
