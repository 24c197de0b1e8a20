"""A run's progress, as its handler reports it and as a task's caller reads it.

``run.progress(fraction, message)`` (:class:`RunProgressReporter`) only records the value and
returns at once, from an async handler, a sync handler's thread, or a handler's child process
alike. The reports are coalesced: at most one reportProgress a second per run, carrying the
last value recorded (the ones in between are never sent), and the worker flushes the last
value before it reports the run resolved. A report that fails is logged and dropped: progress
is advice for people watching, never a reason to fail the run.

:class:`RunProgress` is one run's last report, as ``TaskHandle.progress()`` reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from run_progress import checked
from worker_sdk.errors import RequestFailed

log = logging.getLogger(__name__)

INTERVAL = 1.0
"""Seconds between two reports of one run, at least."""

Send = Callable[[float, str | None], Awaitable[None]]
"""Sends one report (reportProgress with the run's current credentials)."""


@dataclass(frozen=True, kw_only=True)
class RunProgress:
    """Run ``run_id``'s last progress report: ``fraction`` done (0 to 1) and its message, as
    the coordinator received it at ``updated``."""

    run_id: int
    fraction: float
    message: str | None
    updated: datetime

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> RunProgress:
        return cls(
            run_id=int(value["runId"]),
            fraction=float(value["fraction"]),
            message=value["message"],
            updated=datetime.fromisoformat(value["updated"]),
        )


class RunProgressReporter:
    """Coalesces one run's progress reports; see the module docs.

    :param send: sends one report.
    :param loop: where reports are sent: the worker's loop; ``None`` (a handler's child
        process) starts a loop of its own in a thread at the first report.
    :param clock: monotonic seconds; tests inject their own.
    :param interval: seconds between two reports, at least.
    """

    def __init__(
        self,
        send: Send,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval: float = INTERVAL,
    ) -> None:
        self._send = send
        self._loop = loop
        self._clock = clock
        self._interval = interval
        # Guards _pending and _scheduled: record() runs in whatever thread the handler does.
        self._lock = threading.Lock()
        self._pending: tuple[float, str | None] | None = None
        self._scheduled = False
        self._sender: asyncio.Task[None] | None = None
        self._hurry: asyncio.Event | None = None
        self._last_sent = -math.inf
        self._own = False

    def record(self, fraction: float, message: str | None = None) -> None:
        """Keep ``fraction`` and ``message`` as the run's progress, to be sent within a
        second; returns at once.

        :raises ValueError: see :func:`run_progress.checked`.
        """
        value = checked(fraction, message)
        with self._lock:
            self._pending = value
            if self._scheduled:
                return
            self._scheduled = True
            loop = self._loop or self._own_loop()
        loop.call_soon_threadsafe(self._start)

    async def flush(self) -> None:
        """Send the value recorded last now, if it was not sent yet; on the reporter's loop."""
        if self._sender is not None and not self._sender.done():
            assert self._hurry is not None
            self._hurry.set()
            await asyncio.wait({self._sender})
        await self._send_pending()

    def close_sync(self, timeout: float = 30.0) -> None:
        """:meth:`flush` from a thread off the reporter's loop, then stop that loop if it is
        the reporter's own (a handler's child process, once the handler returned)."""
        loop = self._loop
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.flush(), loop).result(timeout)
        finally:
            if self._own:
                loop.call_soon_threadsafe(loop.stop)

    def _start(self) -> None:
        self._hurry = asyncio.Event()
        self._sender = asyncio.ensure_future(self._sending())

    async def _sending(self) -> None:
        """Send the value pending, at most one a second, until none is."""
        assert self._hurry is not None
        try:
            while True:
                pause = self._last_sent + self._interval - self._clock()
                if pause > 0 and not self._hurry.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._hurry.wait(), pause)
                if not await self._send_pending():
                    return
        except BaseException:
            with self._lock:
                self._scheduled = False
            raise

    async def _send_pending(self) -> bool:
        """Send the pending value; whether there was one."""
        with self._lock:
            value, self._pending = self._pending, None
            if value is None:
                # Unscheduled with the check, so a value recorded from now on starts a sender.
                self._scheduled = False
                return False
        self._last_sent = self._clock()
        try:
            await self._send(*value)
        except RequestFailed as error:
            log.warning("progress not reported fraction=%s error=%s", value[0], error)
        return True

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name="progress", daemon=True).start()
        self._loop = loop
        self._own = True
        return loop
