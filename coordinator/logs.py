"""Log lines: ``key=value`` after a timestamp and level by default, or one JSON object per line
with ``COORDINATOR_LOG_FORMAT=json``. Messages are written ``what happened key=value ...`` so
that both formats carry the same fields (taskId, runId, ...)."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from coordinator.config import ConfigurationError

KEY_VALUE_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"
_FIELD = re.compile(r"(\w+)=(\S+)")


class KeyValueFormatter(logging.Formatter):
    """:data:`KEY_VALUE_FORMAT`, with ``asctime`` as ``logging.Formatter`` writes it but its
    seconds formatted once per second: the coordinator writes a line per request that changes
    runs, and ``strftime`` was a sixth of each line's cost."""

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


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, msg, the message's ``key=value``
    fields as members, and the traceback (``exc``) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        fields = dict(_FIELD.findall(message))
        head = _FIELD.split(message, maxsplit=1)[0].strip()
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": head or message,
            **{key: value for key, value in fields.items() if key not in ("time", "level")},
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure_logging(*, level: str, env: Mapping[str, str]) -> None:
    """Set up the root logger from ``--log-level`` and ``COORDINATOR_LOG_FORMAT``.

    :raises ConfigurationError: an unknown level or format.
    """
    if level.upper() not in logging.getLevelNamesMapping():
        raise ConfigurationError(
            f"log level {level!r} is not one of DEBUG, INFO, WARNING, ERROR "
            "(COORDINATOR_LOG_LEVEL or --log-level)"
        )
    kind = env.get("COORDINATOR_LOG_FORMAT") or "text"
    if kind not in ("text", "json"):
        raise ConfigurationError(f"COORDINATOR_LOG_FORMAT={kind!r} must be text or json")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if kind == "json" else KeyValueFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # No format here names the caller's file, function or line, nor a thread or process: not
    # looking them up for every line is a third of its cost (the logging HOWTO's
    # "Optimization"), and the coordinator logs a line per request that changes runs.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    # The Azure SDK logs every HTTP request at INFO; our own lines already say what matters.
    logging.getLogger("azure").setLevel(logging.WARNING)
    # pika logs every connection and channel step at INFO, and a refused connection at
    # ERROR with its traceback; the Pulse publisher logs an outage once (docs/events.md).
    logging.getLogger("pika").setLevel(logging.CRITICAL)
