"""Log lines: ``key=value`` after a timestamp and level by default (:mod:`key_value_logs`, the
worker's format too), or one JSON object per line with ``COORDINATOR_LOG_FORMAT=json``.
Messages are written ``what happened key=value ...`` so that both formats carry the same fields
(taskId, runId, ...)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from coordinator.config import ConfigurationError
from key_value_logs import KeyValueFormatter, lean_log_records

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
    lean_log_records()
    # The Azure SDK logs every HTTP request at INFO; our own lines already say what matters.
    logging.getLogger("azure").setLevel(logging.WARNING)
    # pika logs every connection and channel step at INFO, and a refused connection at
    # ERROR with its traceback; the Pulse publisher logs an outage once (docs/events.md).
    logging.getLogger("pika").setLevel(logging.CRITICAL)
