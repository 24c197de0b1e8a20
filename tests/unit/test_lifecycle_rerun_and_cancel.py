"""Unit tests of rerunTask and cancelTask in the task state machine
(:mod:`coordinator.domain.lifecycle`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.lifecycle import cancel, exceed_deadline, reclaim, rerun
from coordinator.domain.records import MAX_RUNS, Run, TaskRecord
from tests.fixtures.lifecycle import (
    COMPLETED,
    DEADLINE,
    FAILED,
    HOUR,
    MINUTE,
    SECOND,
    T0,
    TIMING,
    Report,
    assert_unchanged,
    check,
    do_claim,
    do_report,
    exception,
    expected_hint,
    pending,
    resolved,
    running,
    unscheduled,
    with_runs,
)

# --- rerunTask -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "what",
    [COMPLETED, FAILED, exception("malformed-payload"), exception("worker-shutdown")],
    ids=lambda what: "/".join(what),
)
def test_rerun_adds_a_rerun_run_to_a_resolved_task(what: Report) -> None:
    record = resolved(what, retries=0)
    now = T0 + HOUR
    result = check(rerun(record, now=now))
    new = result.record
    assert result.changed and not result.resolved
    assert new.runs[0] == record.runs[0]
    assert new.runs[1] == Run(
        run_id=1, state="pending", reason_created="rerun", scheduled=now, visible_at=now
    )
    assert new.state == "pending"
    assert new.hint_needed and new.hint_due == now
    assert new.open_deadline == DEADLINE
    assert new.notify_dependents == record.notify_dependents, "rerun leaves the flag alone"
    assert result.hint == expected_hint(new, visible_at=now)


def test_rerun_restores_the_retry_budget() -> None:
    record = do_report(running(retries=1), exception("intermittent-task"), now=T0 + HOUR).record
    record = do_claim(record, now=T0 + 2 * HOUR).record
    record = do_report(record, exception("intermittent-task"), now=T0 + 3 * HOUR).record
    assert record.state == "exception" and record.retries_left == 0
    record = check(rerun(record, now=T0 + 4 * HOUR)).record
    assert record.retries_left == 1
    assert record.status()["retriesLeft"] == 1
    # and the restored retry is then usable
    record = do_claim(record, now=T0 + 5 * HOUR).record
    result = do_report(record, exception("intermittent-task"), now=T0 + 6 * HOUR)
    assert not result.resolved
    assert result.record.runs[-1].reason_created == "task-retry"


def test_rerun_up_to_the_run_limit() -> None:
    record, now = with_runs(MAX_RUNS - 1)
    record = do_report(record, FAILED, now=now + SECOND).record
    result = check(rerun(record, now=now + 2 * SECOND))
    assert len(result.record.runs) == MAX_RUNS
    assert result.record.runs[-1].run_id == MAX_RUNS - 1
    assert result.record.runs[-1].reason_created == "rerun"

    record = do_claim(result.record, now=now + 3 * SECOND).record
    record = do_report(record, COMPLETED, now=now + 4 * SECOND).record
    with pytest.raises(Conflict, match=f"maximum of {MAX_RUNS} runs"):
        rerun(record, now=now + 5 * SECOND)


@pytest.mark.parametrize("make", [pending, running])
def test_rerun_of_an_unresolved_task_is_unchanged(make: Callable[[], TaskRecord]) -> None:
    record = make()
    assert_unchanged(check(rerun(record, now=T0 + HOUR)), record)


def test_rerun_of_a_running_task_at_the_run_limit_is_unchanged() -> None:
    record, now = with_runs(MAX_RUNS)
    assert_unchanged(check(rerun(record, now=now + SECOND)), record)


def test_rerun_of_an_unscheduled_task_is_a_conflict() -> None:
    with pytest.raises(Conflict, match="unscheduled"):
        rerun(unscheduled(), now=T0 + HOUR)


@pytest.mark.parametrize(
    "make",
    [lambda: resolved(COMPLETED), lambda: exceed_deadline(pending(), now=DEADLINE).record],
    ids=["completed", "deadline-exceeded"],
)
def test_rerun_past_the_deadline_is_a_conflict(make: Callable[[], TaskRecord]) -> None:
    with pytest.raises(Conflict, match="deadline"):
        rerun(make(), now=DEADLINE)


# --- cancelTask ------------------------------------------------------------------------------


def test_cancel_of_an_unscheduled_task_adds_a_canceled_run_0() -> None:
    now = T0 + HOUR
    result = check(cancel(unscheduled(), now=now))
    new = result.record
    assert result.changed and result.resolved and result.hint is None
    assert new.runs == (
        Run(
            run_id=0,
            state="exception",
            reason_created="exception",
            reason_resolved="canceled",
            scheduled=now,
            visible_at=now,
            resolved=now,
        ),
    )
    assert new.state == "exception"
    assert new.notify_dependents and not new.hint_needed
    assert new.open_deadline is None


def test_cancel_of_a_pending_task() -> None:
    now = T0 + HOUR
    result = check(cancel(pending(), now=now))
    new = result.record
    assert result.changed and result.resolved and result.hint is None
    assert new.runs == (
        Run(
            run_id=0,
            state="exception",
            reason_created="scheduled",
            reason_resolved="canceled",
            scheduled=T0,
            visible_at=T0,
            resolved=now,
        ),
    )
    assert new.notify_dependents and not new.hint_needed
    assert new.hint_due is None and new.open_deadline is None


def test_cancel_of_a_running_task() -> None:
    record = running()
    now = T0 + HOUR
    result = check(cancel(record, now=now))
    new = result.record
    assert result.resolved
    assert new.runs[0] == Run(
        **{
            **record.runs[0].to_stored(),
            "state": "exception",
            "reason_resolved": "canceled",
            "resolved": now,
        }
    )
    assert new.taken_until is None and new.open_deadline is None
    assert new.notify_dependents
    # the worker learns of it when it next reclaims or reports
    with pytest.raises(Conflict):
        reclaim(new, run_id=0, now=now + MINUTE, timing=TIMING)
    with pytest.raises(Conflict):
        do_report(new, COMPLETED, now=now + MINUTE)


@pytest.mark.parametrize(
    "make",
    [
        lambda: resolved(COMPLETED),
        lambda: resolved(FAILED),
        lambda: resolved(exception("internal-error")),
        lambda: cancel(pending(), now=T0 + MINUTE).record,
    ],
    ids=["completed", "failed", "exception", "canceled"],
)
def test_cancel_of_a_resolved_task_is_unchanged(make: Callable[[], TaskRecord]) -> None:
    record = make()
    assert_unchanged(check(cancel(record, now=T0 + HOUR)), record)


@pytest.mark.parametrize(
    "make",
    [unscheduled, pending, running, lambda: resolved(COMPLETED)],
    ids=["unscheduled", "pending", "running", "completed"],
)
def test_cancel_past_the_deadline_is_a_conflict(make: Callable[[], TaskRecord]) -> None:
    with pytest.raises(Conflict, match="deadline"):
        cancel(make(), now=DEADLINE)
