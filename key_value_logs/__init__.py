"""The ``key=value`` log line both processes write (the coordinator's ``serve`` and
``queue-worker``), so that their logs read and parse alike: a timestamp and level, then the
message, written ``what happened key=value ...``; and the log records both make without
what no format of theirs shows. Imports neither coordinator nor worker_sdk."""

from __future__ import annotations

import logging
import time

KEY_VALUE_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"


class KeyValueFormatter(logging.Formatter):
    """:data:`KEY_VALUE_FORMAT`, with ``asctime`` as ``logging.Formatter`` writes it but its
    seconds formatted once per second: the coordinator writes a line per request that changes
    runs and a worker two a run, and ``strftime`` was a sixth of each line's cost."""

    def __init__(self) -> None:
        super().__init__(KEY_VALUE_FORMAT)
        self._stamp: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        cached, text = self._stamp  # one tuple: handlers on other threads share it safely
        if cached != second:
            text = time.strftime(self.default_time_format, self.converter(second))
            self._stamp = (second, text)
        return f"{text},{int(record.msecs):03d}"  # logging's default_msec_format


def lean_log_records() -> None:
    """Make this process's log records without the caller's file, function and line, or the
    thread's and process's names: no format of either process names them, and looking them up
    for every line is a third of its cost (the logging HOWTO's "Optimization"). The coordinator
    writes a line per request that changes runs, and a worker two a run."""
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
