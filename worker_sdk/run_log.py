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

A run log is bounded: past :data:`MAX_RUN_LOG_BYTES` of text it ends with one line saying so,
and later records are dropped. It is gzipped once, at its end, while it holds no more than
:data:`GZIPPED_AS_WRITTEN_PAST` (most logs), with a window no larger than the text, or stored in
its gzip member uncompressed up to :data:`STORED_UP_TO`; a longer one is gzipped as it is
written.
"""

from __future__ import annotations

import functools
import logging
import math
import struct
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

GZIPPED_AS_WRITTEN_PAST = 64 * 2**10
"""Text a run log keeps as it is, to gzip in one go when the run ends; past it, the log is
gzipped as lines arrive, by a compressor with zlib's largest window and memory. Setting that one
up cost 40-50 µs a run, about a tenth of a worker's CPU a task in the bench, and a small log
gains nothing from it: one sized to the text takes under 10 µs
(docs/performance-history.md)."""

STORED_UP_TO = 512
"""Text a run log's gzip member holds as it is (a stored deflate block) rather than compressed:
deflate saves a few dozen bytes of a log this short, and setting up even a small compressor
costs over ten times what the rest of the member does (docs/performance-history.md)."""

_GZIP = 16
"""What zlib's ``wbits`` adds for a gzip header and trailer."""

_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
"""A gzip member's header: deflate, no flags, no time, no extra flags, operating system
unknown."""


class RunLogFormatter(logging.Formatter):
    """``2026-05-01T12:00:00.123Z INFO logger.name: message``, then any traceback."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        # rounded to the microsecond as datetime.fromtimestamp rounds, then cut to the ms
        second = math.floor(record.created)
        micros = round((record.created - second) * 1e6)
        if micros == 1_000_000:
            second, micros = second + 1, 0
        return f"{_second(second)}{micros // 1000:03d}Z"


@functools.lru_cache(maxsize=64)
def _second(epoch: int) -> str:
    # Cached: a run's lines fall within a few seconds, and building the datetime and its text
    # for each line took 8 times as long.
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.")


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
        self._compressor: zlib._Compress | None = None  # once past GZIPPED_AS_WRITTEN_PAST
        self._text: list[bytes] = []  # until then
        self._parts: list[bytes] = []  # gzipped
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
            if self._compressor is not None:
                self._parts.append(self._compressor.compress(data))
                return
            self._text.append(data)
            if self._written > GZIPPED_AS_WRITTEN_PAST:
                self._compressor = _compressor(zlib.MAX_WBITS)
                self._parts.append(self._compressor.compress(b"".join(self._text)))
                self._text = []

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
                if self._compressor is not None:
                    self._parts.append(self._compressor.flush())
                else:
                    text = b"".join(self._text)
                    self._text = []
                    self._parts.append(
                        _stored(text) if len(text) <= STORED_UP_TO else _gzipped_at_once(text)
                    )
            return b"".join(self._parts)


def _stored(text: bytes) -> bytes:
    """``text`` as a gzip member (RFC 1952) holding it in one stored deflate block (RFC 1951,
    3.2.4): the header, the block's (final, stored, its length and the length's complement),
    the text, and the text's CRC-32 and length."""
    size = len(text)
    block = struct.pack("<BHH", 1, size, size ^ 0xFFFF)
    return b"".join((_GZIP_HEADER, block, text, struct.pack("<II", zlib.crc32(text), size)))


def _gzipped_at_once(text: bytes) -> bytes:
    # a window as large as the text, at least zlib's smallest
    compressor = _compressor(max(9, min(zlib.MAX_WBITS, len(text).bit_length())))
    return compressor.compress(text) + compressor.flush()


def _compressor(window_bits: int) -> zlib._Compress:
    """A gzip compressor with a window of ``2 ** window_bits`` bytes and a hash table to match
    (zlib's default memory level for its largest window)."""
    return zlib.compressobj(6, zlib.DEFLATED, _GZIP + window_bits, window_bits - 7)


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
