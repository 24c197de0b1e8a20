"""Unit tests of the deadline in the task state machine (:mod:`coordinator.domain.lifecycle`):
what the deadline resolver does to a task at each point of its life."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.domain.lifecycle import exceed_deadline
from coordinator.domain.records import Run, TaskRecord
from tests.fixtures.lifecycle import (
    COMPLETED,
    DEADLINE,
    FAILED,
    HOUR,
    MINUTE,
    SECOND,
    T0,
    Report,
    assert_unchanged,
    check,
    do_claim,
    do_report,
    exception,
    pending,
    resolved,
    running,
    unscheduled,
)


def test_deadline_of_an_unscheduled_task_adds_an_exception_run_0() -> None:
    record = unscheduled()
    now = DEADLINE + 30 * SECOND
    result = check(exceed_deadline(record, now=now))
    new = result.record
    assert result.changed and result.resolved and result.hint is None
    assert new.runs == (
        Run(
            run_id=0,
            state="exception",
            reason_created="exception",
            reason_resolved="deadline-exceeded",
            scheduled=now,
            visible_at=now,
            resolved=now,
        ),
    )
    assert new.state == "exception"
    assert new.notify_dependents and not new.hint_needed
    assert new.open_deadline is None and new.hint_due is None and new.taken_until is None
    assert new.status()["runs"] == [
        {
            "runId": 0,
            "state": "exception",
            "reasonCreated": "exception",
            "reasonResolved": "deadline-exceeded",
            "scheduled": "2026-03-02T12:00:30.000Z",
            "resolved": "2026-03-02T12:00:30.000Z",
        }
    ]


def test_deadline_of_a_pending_task() -> None:
    record = pending()
    result = check(exceed_deadline(record, now=DEADLINE))
    new = result.record
    assert result.changed and result.resolved and result.hint is None
    assert new.runs == (
        Run(
            run_id=0,
            state="exception",
            reason_created="scheduled",
            reason_resolved="deadline-exceeded",
            scheduled=T0,
            visible_at=T0,
            resolved=DEADLINE,
        ),
    )
    assert new.notify_dependents and not new.hint_needed
    assert new.hint_due is None and new.open_deadline is None


def test_deadline_of_a_running_task() -> None:
    record = do_claim(pending(), now=DEADLINE - MINUTE).record
    result = check(exceed_deadline(record, now=DEADLINE))
    new = result.record
    assert result.resolved
    assert new.runs[0] == Run(
        **{
            **record.runs[0].to_stored(),
            "state": "exception",
            "reason_resolved": "deadline-exceeded",
            "resolved": DEADLINE,
        }
    )
    assert new.taken_until is None and new.open_deadline is None
    assert new.notify_dependents


def test_deadline_touches_only_the_last_run_of_a_retried_task() -> None:
    record = do_report(running(retries=1), exception("worker-shutdown"), now=T0 + HOUR).record
    result = check(exceed_deadline(record, now=DEADLINE))
    assert result.record.runs[0] == record.runs[0]
    assert result.record.runs[1].reason_resolved == "deadline-exceeded"
    assert result.record.runs[1].reason_created == "retry"
    assert result.record.retries_left == 0


@pytest.mark.parametrize(
    "what", [COMPLETED, FAILED, exception("worker-shutdown")], ids=lambda what: "/".join(what)
)
def test_deadline_of_a_resolved_task_does_nothing(what: Report) -> None:
    record = resolved(what)
    assert_unchanged(check(exceed_deadline(record, now=DEADLINE + HOUR)), record)


def test_deadline_exceeded_repeated_does_nothing() -> None:
    record = check(exceed_deadline(pending(), now=DEADLINE)).record
    assert_unchanged(check(exceed_deadline(record, now=DEADLINE + MINUTE)), record)


@pytest.mark.parametrize("make", [unscheduled, pending, running])
def test_deadline_does_nothing_before_the_deadline(make: Callable[[], TaskRecord]) -> None:
    record = make()
    assert_unchanged(check(exceed_deadline(record, now=DEADLINE - 1)), record)
