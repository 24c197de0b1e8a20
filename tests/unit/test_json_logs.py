"""Log formats: with ``COORDINATOR_LOG_FORMAT=json`` a lifecycle log line is one JSON object
carrying taskId and runId as fields; the default key=value lines time-stamped as logging's own
formatter would."""

from __future__ import annotations

import io
import json
import logging

from coordinator.domain import definitions, lifecycle
from coordinator.domain.records import TaskRecord, record_from_definition
from coordinator.logs import JsonFormatter
from coordinator.service.clock import wall_clock
from coordinator.service.transitions import log_changes
from devharness.tasks import task_definition
from key_value_logs import KEY_VALUE_FORMAT, KeyValueFormatter

TASK_ID = "fN1LcKYkTkC7C3Fh6NtB2A"


def _created(task_id: str) -> TaskRecord:
    now = wall_clock()
    definition = definitions.normalise(
        task_id, task_definition(now), now=now, max_deadline_ms=86_400_000
    )
    return lifecycle.create(record_from_definition(task_id, definition), now=now).record


def _json_lines(records: list[TaskRecord]) -> list[dict[str, str]]:
    """The JSON lines logged for creating ``records``."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("coordinator.service.transitions")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        log_changes("created", [(record.task_id, record.runs) for record in records])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_log_line_parses_and_carries_task_and_run_ids() -> None:
    [line] = _json_lines([_created(TASK_ID)])
    assert line["taskId"] == TASK_ID
    assert line["runId"] == "0"
    assert line["state"] == "pending"
    assert line["msg"] == "task created"
    assert line["level"] == "INFO"
    assert line["logger"] == "coordinator.service.transitions"


def test_a_batch_logs_one_line_naming_every_run() -> None:
    task_ids = [TASK_ID, "gN1LcKYkTkC7C3Fh6NtB2A", "hN1LcKYkTkC7C3Fh6NtB2A"]
    [line] = _json_lines([_created(task_id) for task_id in task_ids])
    assert line["msg"] == "tasks created"
    assert line["count"] == "3"
    assert line["state"] == "pending"
    assert line["runs"] == ",".join(f"{task_id}/0" for task_id in task_ids)


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
