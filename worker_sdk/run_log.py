"""The run log: what a handler logged while it ran, which becomes the run's
``public/logs/live_backing.log`` (Taskcluster's name for a task's log) no later than the
run's report: carried in the report when it is small (``resolveRuns`` ``artifacts``, stored
with the resolution at no request of its own), uploaded before it otherwise. A run whose
handler logged nothing and raised nothing has no run log: the worker's own ending line alone
would say only what the run's status says.

Which records belong to which run is decided by context, not by logger: the worker runs each
handler with :data:`current_run` set to its ``(taskId, runId)`` (contextvars follow a
coroutine into the tasks it starts and, through the worker, a sync handler into its thread),
and :class:`RunLogs`, a handler on the root logger, writes a record to that run's
:class:`RunLog`. Concurrent runs in one worker therefore never see each other's records. A
handler in a child process (``isolation="process"``) sends its records' lines to the worker
itself (:mod:`worker_sdk.isolation`). Records a logger's level drops never reach a handler,
so the run log has what the worker's logging configuration lets through.

A run log is gzipped as it is written, and bounded: past :data:`MAX_RUN_LOG_BYTES` of text it
ends with one line saying so, and later records are dropped.
"""

from __future__ import annotations

import logging
import threading
import zlib
from contextvars import ContextVar
from datetime import UTC, datetime

RUN_LOG_NAME = "public/logs/live_backing.log"
RUN_LOG_CONTENT_TYPE = "text/plain"
MAX_RUN_LOG_BYTES = 10 * 2**20
"""Text (before compression) a run log keeps at most."""

RunKey = tuple[str, int]
"""``(taskId, runId)``."""

current_run: ContextVar[RunKey | None] = ContextVar("worker_sdk_current_run", default=None)
"""The run whose handler the current context belongs to, if any."""

_GZIP = 16 + zlib.MAX_WBITS
"""zlib's ``wbits`` for a gzip header and trailer."""


class RunLogFormatter(logging.Formatter):
    """``2026-05-01T12:00:00.123Z INFO logger.name: message``, then any traceback."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        moment = datetime.fromtimestamp(record.created, UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class RunLog:
    """One run's log, gzipped in memory as lines arrive (from any thread).

    :param limit: bytes of text kept; the line that would pass it is replaced by a line
        saying the log was truncated, and later ones are dropped.
    """

    def __init__(self, *, limit: int = MAX_RUN_LOG_BYTES) -> None:
        self._limit = limit
        self._written = 0
        self._full = False
        self._closed = False
        # made by the first write: a compressor's state costs some 50 µs to set up, and most
        # runs of a quiet handler never write
        self._compressor: zlib._Compress | None = None
        self._parts: list[bytes] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        """Append ``text`` as one entry (a line, or several for a traceback)."""
        data = (text.rstrip("\n") + "\n").encode("utf-8", errors="backslashreplace")
        with self._lock:
            if self._closed or self._full:
                return
            if self._written + len(data) > self._limit:
                self._full = True
                data = f"[run log truncated: it passed {self._limit} bytes]\n".encode()
            self._written += len(data)
            self._parts.append(self._made_compressor().compress(data))

    def _made_compressor(self) -> zlib._Compress:
        if self._compressor is None:
            self._compressor = zlib.compressobj(6, zlib.DEFLATED, _GZIP)
        return self._compressor

    @property
    def empty(self) -> bool:
        """Nothing was written to the log."""
        with self._lock:
            return self._written == 0  # every entry ends with a newline

    def gzipped(self) -> bytes:
        """The log as gzip bytes; the log takes no more lines after this."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._parts.append(self._made_compressor().flush())
            return b"".join(self._parts)


class RunLogs(logging.Handler):
    """A logging handler that writes each record to the :class:`RunLog` of the run in whose
    context it was logged (:data:`current_run`), if that run's log is open."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(RunLogFormatter())
        self._logs: dict[RunKey, RunLog] = {}

    def collect(self, key: RunKey) -> RunLog:
        """Start collecting the log of run ``key``."""
        log = self._logs[key] = RunLog()
        return log

    def forget(self, key: RunKey) -> None:
        """Stop collecting the log of run ``key``."""
        self._logs.pop(key, None)

    def emit(self, record: logging.LogRecord) -> None:
        key = current_run.get()
        log = self._logs.get(key) if key is not None else None
        if log is None:
            return
        try:
            log.write(self.format(record))
        except Exception:  # logging's contract: a bad record must not break the caller
            self.handleError(record)
