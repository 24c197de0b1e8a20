"""Log formats: with ``COORDINATOR_LOG_FORMAT=json`` a lifecycle log line is one JSON object
carrying taskId and runId as fields; the default key=value lines time-stamped as logging's own
formatter would."""

from __future__ import annotations

import io
import json
import logging

from coordinator.domain import definitions, lifecycle
from coordinator.domain.records import record_from_definition
from coordinator.logs import KEY_VALUE_FORMAT, JsonFormatter, KeyValueFormatter
from coordinator.service.clock import wall_clock
from coordinator.service.transitions import log_changes
from devharness.tasks import task_definition

TASK_ID = "fN1LcKYkTkC7C3Fh6NtB2A"


def test_a_json_log_line_parses_and_carries_task_and_run_ids() -> None:

    now = wall_clock()
    definition = definitions.normalise(
        TASK_ID, task_definition(now), now=now, max_deadline_ms=86_400_000
    )
    created = lifecycle.create(record_from_definition(TASK_ID, definition), now=now)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("coordinator.service.transitions")
    logger.addHandler(handler)
    try:
        log_changes("created", None, created.record)
    finally:
        logger.removeHandler(handler)
    line = json.loads(stream.getvalue().splitlines()[0])
    assert line["taskId"] == TASK_ID
    assert line["runId"] == "0"
    assert line["state"] == "pending"
    assert line["msg"] == "task created"
    assert line["level"] == "INFO"
    assert line["logger"] == "coordinator.service.transitions"


def test_key_value_lines_carry_the_time_stamp_logging_writes() -> None:
    fast, standard = KeyValueFormatter(), logging.Formatter(KEY_VALUE_FORMAT)
    logger = logging.getLogger("coordinator.service.transitions")
    # within one second, across seconds, back to an earlier second, and at whole seconds
    for created in (
        1_700_000_000.0,
        1_700_000_000.5,
        1_700_000_000.999,
        1_700_000_001.001,
        1_700_000_000.25,
        1_800_000_000.0,
    ):
        record = logger.makeRecord(logger.name, logging.INFO, __file__, 1, "task %s", ("x",), None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert fast.format(record) == standard.format(record)
