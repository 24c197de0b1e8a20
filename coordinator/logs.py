"""Log lines: ``key=value`` after a timestamp and level by default, or one JSON object per line
with ``COORDINATOR_LOG_FORMAT=json``. Messages are written ``what happened key=value ...`` so
that both formats carry the same fields (taskId, runId, ...)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from aiohttp.http_exceptions import HttpProcessingError

from coordinator.config import ConfigurationError

KEY_VALUE_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"
_FIELD = re.compile(r"(\w+)=(\S+)")


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


class UnparseableRequestFilter(logging.Filter):
    """aiohttp logs a request it cannot parse (a request line or header over 8 KiB, a NUL in a
    header) at ERROR with a traceback, before any of our code sees it, and answers it 400
    itself. That is the client's mistake, not ours: keep one WARNING line saying what was
    wrong, so the log's tracebacks stay the coordinator's own bugs."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError) and error.code < 500:
            record.msg = "unparseable request answered %s error=%s"
            record.args = (error.code, " ".join(str(error.message).split()))
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


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
    handler.setFormatter(JsonFormatter() if kind == "json" else logging.Formatter(KEY_VALUE_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # The Azure SDK logs every HTTP request at INFO; our own lines already say what matters.
    logging.getLogger("azure").setLevel(logging.WARNING)
    server_logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, UnparseableRequestFilter) for f in server_logger.filters):
        server_logger.addFilter(UnparseableRequestFilter())
