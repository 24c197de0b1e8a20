"""Unit tests of the record helpers the state machine relies on
(:mod:`coordinator.domain.records`): RFC 3339 times, a record built from its definition, its
status and its runs' stored form."""

from __future__ import annotations

import pytest

from coordinator.domain.records import Run, from_iso, record_from_definition, to_iso
from coordinator.domain.task_queues import PRIORITIES, priority_level
from tests.fixtures.lifecycle import (
    DAY,
    DEADLINE,
    DEP_A,
    DEP_B,
    EXPIRES,
    GROUP_ID,
    MINUTE,
    PROVISIONER,
    T0,
    TASK_ID,
    WORKER_GROUP,
    WORKER_ID,
    WORKER_TYPE,
    definition,
    do_report,
    exception,
    running,
    unscheduled,
)

# --- times -----------------------------------------------------------------------------------


def test_to_iso_formats_utc_with_milliseconds_and_z() -> None:
    assert to_iso(0) == "1970-01-01T00:00:00.000Z"
    assert to_iso(T0) == "2026-03-01T12:00:00.000Z"
    assert to_iso(T0 + 7) == "2026-03-01T12:00:00.007Z"
    assert to_iso(T0 + DAY - 1) == "2026-03-02T11:59:59.999Z"
    assert to_iso(-1) == "1969-12-31T23:59:59.999Z"


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("2026-03-01T12:00:00.000Z", "2026-03-01T12:00:00.000Z"),
        ("2026-03-01T12:00:00Z", "2026-03-01T12:00:00.000Z"),
        ("2026-03-01T12:00:00.5Z", "2026-03-01T12:00:00.500Z"),
        ("2026-03-01t12:00:00.123z", "2026-03-01T12:00:00.123Z"),
        ("2026-03-01T12:00:00.000+00:00", "2026-03-01T12:00:00.000Z"),
        ("2026-03-01T13:00:00.000+01:00", "2026-03-01T12:00:00.000Z"),
        ("2026-03-01T06:30:00.250-05:30", "2026-03-01T12:00:00.250Z"),
        ("2026-03-02T01:45:00.000+13:45", "2026-03-01T12:00:00.000Z"),
        # sub-millisecond digits are truncated, never rounded up
        ("2026-03-01T12:00:00.123999Z", "2026-03-01T12:00:00.123Z"),
        ("2026-03-01T12:00:00.999999Z", "2026-03-01T12:00:00.999Z"),
        ("2026-03-01T12:00:00.000999+02:00", "2026-03-01T10:00:00.000Z"),
        ("1969-12-31T23:59:59.9995Z", "1969-12-31T23:59:59.999Z"),
    ],
)
def test_from_iso_then_to_iso_normalises(text: str, normalised: str) -> None:
    assert to_iso(from_iso(text)) == normalised
    assert from_iso(normalised) == from_iso(text)


def test_from_iso_values() -> None:
    assert from_iso("1970-01-01T00:00:00.000Z") == 0
    assert from_iso("1970-01-01T00:00:01.001Z") == 1_001
    assert from_iso("1970-01-01T01:00:00.000+01:00") == 0
    assert from_iso("1969-12-31T23:59:59.999Z") == -1
    assert from_iso("2026-03-01T12:00:00.000Z") == 1_772_366_400_000


@pytest.mark.parametrize(
    "ms",
    [0, 1, 999, 1_000, T0, T0 + 1, T0 + 999, DEADLINE - 1, EXPIRES, 253_402_300_799_999, -1],
)
def test_to_iso_then_from_iso_round_trips(ms: int) -> None:
    assert from_iso(to_iso(ms)) == ms


@pytest.mark.parametrize(
    "text",
    [
        "2026-03-01T12:00:00",
        "2026-03-01T12:00:00.000",
        "2026-03-01 12:00:00.123456",
        "2026-03-01",
        "not a date",
        "",
    ],
)
def test_from_iso_rejects_anything_but_a_date_time_with_a_time_zone(text: str) -> None:
    with pytest.raises(ValueError):
        from_iso(text)


@pytest.mark.parametrize(
    "text",
    ["0732-01-23T01:09:09.611Z", "0001-01-01T00:00:00.000Z", "1969-12-31T23:59:59.999Z"],
)
def test_times_before_1000_and_1970_round_trip_as_rfc_3339(text: str) -> None:
    assert to_iso(from_iso(text)) == text


# --- the record and its derived properties ---------------------------------------------------


def test_record_from_definition() -> None:
    record = record_from_definition(
        TASK_ID,
        definition(
            retries=3, priority="high", dependencies=[DEP_A, DEP_B], requires="all-resolved"
        ),
        version=4,
    )
    assert record.task_id == TASK_ID
    assert record.provisioner_id == PROVISIONER
    assert record.worker_type == WORKER_TYPE
    assert record.task_queue_id == f"{PROVISIONER}/{WORKER_TYPE}"
    assert record.scheduler_id == "ci"
    assert record.task_group_id == GROUP_ID
    assert record.priority == "high"
    assert record.retries_left == 3
    assert record.deadline == DEADLINE
    assert record.expires == EXPIRES
    assert record.dependencies == (DEP_A, DEP_B)
    assert record.requires == "all-resolved"
    assert record.definition["retries"] == 3
    assert record.version == 4
    assert record.runs == ()
    assert not record.hint_needed and not record.notify_dependents
    assert record.state == "unscheduled"
    assert record.last_run is None
    assert not record.is_resolved
    assert record.taken_until is None
    assert record.hint_due is None
    assert record.open_deadline == DEADLINE


@pytest.mark.parametrize(
    ("priority", "level"), [(priority, 7 - index) for index, priority in enumerate(PRIORITIES)]
)
def test_priority_level(priority: str, level: int) -> None:
    assert priority_level(priority) == level


def test_status_of_an_unscheduled_task() -> None:
    assert unscheduled().status() == {
        "taskId": TASK_ID,
        "provisionerId": PROVISIONER,
        "workerType": WORKER_TYPE,
        "taskQueueId": "proj-test/linux-small",
        "schedulerId": "ci",
        "projectId": "none",
        "taskGroupId": GROUP_ID,
        "priority": "lowest",
        "deadline": "2026-03-02T12:00:00.000Z",
        "expires": "2027-03-02T12:00:00.000Z",
        "retriesLeft": 5,
        "state": "unscheduled",
        "runs": [],
    }


def test_status_after_a_retry_shows_every_run_with_iso_times() -> None:
    record = running(retries=2)
    record = do_report(record, exception("worker-shutdown"), now=T0 + 2 * MINUTE + 123).record
    status = record.status()
    assert status["state"] == "pending"
    assert status["retriesLeft"] == 1
    assert status["runs"] == [
        {
            "runId": 0,
            "state": "exception",
            "reasonCreated": "scheduled",
            "reasonResolved": "worker-shutdown",
            "workerGroup": WORKER_GROUP,
            "workerId": WORKER_ID,
            "takenUntil": "2026-03-01T12:21:00.000Z",
            "scheduled": "2026-03-01T12:00:00.000Z",
            "started": "2026-03-01T12:01:00.000Z",
            "resolved": "2026-03-01T12:02:00.123Z",
        },
        {
            "runId": 1,
            "state": "pending",
            "reasonCreated": "retry",
            "scheduled": "2026-03-01T12:02:00.123Z",
        },
    ]


def test_run_stored_form_round_trips_and_omits_absent_fields() -> None:
    record = running()
    run = record.runs[0]
    stored = run.to_stored()
    assert "reason_resolved" not in stored and "resolved" not in stored
    assert Run.from_stored(stored) == run
    assert record.stored_runs() == [stored]
