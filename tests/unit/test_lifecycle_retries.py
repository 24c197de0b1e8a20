"""Unit tests of retries in the task state machine (:mod:`coordinator.domain.lifecycle`):
reportException's retry runs and their limits, the retry delay (the coordinator's base, a
task's ``retryDelay``, a report's ``retryAfter``) and ``retryPriority``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from coordinator.domain.errors import Conflict, InputError
from coordinator.domain.lifecycle import (
    EXCEPTION_REASONS,
    Timing,
    TransitionResult,
    create,
    expire_claim,
    hint_for,
    report,
    rerun,
    schedule,
)
from coordinator.domain.records import MAX_RUNS, Run, TaskRecord, to_iso
from tests.fixtures.lifecycle import (
    CLAIM_TIMEOUT,
    CLAIMED_AT,
    COMPLETED,
    DEADLINE,
    FAILED,
    HOUR,
    MINUTE,
    RETRYING,
    SECOND,
    T0,
    TIMING,
    check,
    claim_at,
    do_claim,
    do_report,
    exception,
    expected_hint,
    new_task,
    pending,
    resolved,
    running,
    unscheduled,
    with_runs,
)

# --- reportException retries -----------------------------------------------------------------


@pytest.mark.parametrize(("reason", "reason_created"), RETRYING)
def test_retrying_exception_adds_a_retry_run(reason: str, reason_created: str) -> None:
    record = running(retries=2, priority="low")
    now = T0 + 10 * MINUTE
    result = do_report(record, exception(reason), now=now)
    new = result.record
    assert result.changed and not result.resolved
    assert new.retries_left == 1
    assert len(new.runs) == 2
    assert new.runs[0] == Run(
        **{
            **record.runs[0].to_stored(),
            "state": "exception",
            "reason_resolved": reason,
            "resolved": now,
        }
    )
    assert new.runs[1] == Run(
        run_id=1, state="pending", reason_created=reason_created, scheduled=now, visible_at=now
    )
    assert new.state == "pending"
    assert new.hint_needed and new.hint_due == now
    assert not new.notify_dependents, "a retried task is not resolved"
    assert new.open_deadline == DEADLINE
    assert new.taken_until is None
    assert result.hint == expected_hint(new, visible_at=now)
    assert result.hint.run_id == 1 and result.hint.priority == "low"


@pytest.mark.parametrize(("reason", "reason_created"), RETRYING)
def test_retrying_exception_retries_until_no_retries_are_left(
    reason: str, reason_created: str
) -> None:
    retries = 3
    record = pending(retries=retries)
    now = T0
    for attempt in range(retries):
        now += MINUTE
        record = do_claim(record, now=now).record
        now += MINUTE
        result = do_report(record, exception(reason), now=now)
        record = result.record
        assert not result.resolved
        assert record.retries_left == retries - 1 - attempt
        assert len(record.runs) == attempt + 2
        assert record.runs[-1].reason_created == reason_created
        assert record.state == "pending"
        assert result.hint is not None and result.hint.run_id == attempt + 1

    now += MINUTE
    record = do_claim(record, now=now).record
    now += MINUTE
    result = do_report(record, exception(reason), now=now)
    final = result.record
    assert result.changed and result.resolved and result.hint is None
    assert final.retries_left == 0
    assert len(final.runs) == retries + 1
    assert final.state == "exception"
    assert [run.reason_created for run in final.runs] == ["scheduled"] + [reason_created] * 3
    assert [run.reason_resolved for run in final.runs] == [reason] * 4
    assert final.notify_dependents and not final.hint_needed
    assert final.open_deadline is None


@pytest.mark.parametrize(("reason", "reason_created"), RETRYING)
def test_retrying_exception_without_retries_resolves_the_task(
    reason: str, reason_created: str
) -> None:
    result = do_report(running(retries=0), exception(reason), now=T0 + 10 * MINUTE)
    assert result.resolved
    assert len(result.record.runs) == 1
    assert result.record.state == "exception"
    assert result.record.runs[0].reason_resolved == reason


@pytest.mark.parametrize(("reason", "reason_created"), RETRYING)
def test_retrying_exception_at_the_run_limit_resolves_the_task(
    reason: str, reason_created: str
) -> None:
    record, now = with_runs(MAX_RUNS, retries=5)
    assert record.retries_left == 5
    result = do_report(record, exception(reason), now=now + SECOND)
    assert result.resolved
    assert len(result.record.runs) == MAX_RUNS
    assert result.record.state == "exception"


@pytest.mark.parametrize(("reason", "reason_created"), RETRYING)
def test_retrying_exception_past_the_deadline_resolves_the_task(
    reason: str, reason_created: str
) -> None:
    """Reports are not refused past the deadline (only the deadline resolver ends the run),
    but no retry run is added once the task can never run again."""
    record = do_claim(pending(), now=DEADLINE - MINUTE).record
    result = do_report(record, exception(reason), now=DEADLINE + SECOND)
    assert result.resolved
    assert result.record.state == "exception"
    assert result.record.retries_left == 5


# --- retry delay -----------------------------------------------------------------------------


@pytest.mark.parametrize(("reason", "reason_created"), RETRYING)
def test_retry_delay_doubles_with_every_retry_used(reason: str, reason_created: str) -> None:
    base = 10 * SECOND
    timing = Timing(claim_timeout_ms=CLAIM_TIMEOUT, retry_delay_base_ms=base)
    record = pending(retries=4)
    now = T0
    for used in range(4):
        now += HOUR
        record = do_claim(record, now=now, timing=timing).record
        now += MINUTE
        result = do_report(record, exception(reason), now=now, timing=timing)
        record = result.record
        delay = base * 2**used
        assert record.runs[-1].scheduled == now
        assert record.runs[-1].visible_at == now + delay
        assert result.hint == expected_hint(record, visible_at=now + delay)
        assert record.hint_due == now, "the hint was asked for now, to be visible later"
    assert record.retries_left == 0


def test_retry_delay_applies_to_claim_expiry() -> None:
    base = 5 * SECOND
    timing = Timing(claim_timeout_ms=CLAIM_TIMEOUT, retry_delay_base_ms=base)
    record = running(retries=3)
    first_expiry = CLAIMED_AT + CLAIM_TIMEOUT
    result = check(expire_claim(record, taken_until=first_expiry, now=first_expiry, timing=timing))
    assert result.hint is not None
    assert result.hint.visible_at == first_expiry + base
    assert result.record.runs[1].visible_at == first_expiry + base

    record = do_claim(result.record, now=first_expiry + MINUTE, timing=timing).record
    second_expiry = first_expiry + MINUTE + CLAIM_TIMEOUT
    result = check(
        expire_claim(record, taken_until=second_expiry, now=second_expiry, timing=timing)
    )
    assert result.hint is not None
    assert result.hint.visible_at == second_expiry + 2 * base


def test_retry_delay_restarts_after_a_rerun() -> None:
    base = 10 * SECOND
    timing = Timing(claim_timeout_ms=CLAIM_TIMEOUT, retry_delay_base_ms=base)
    record = running(retries=2)
    now = T0 + 5 * MINUTE
    record = do_report(record, exception("worker-shutdown"), now=now, timing=timing).record
    record = do_claim(record, now=now + MINUTE, timing=timing).record
    record = do_report(record, COMPLETED, now=now + 2 * MINUTE, timing=timing).record
    record = check(rerun(record, now=now + 3 * MINUTE)).record
    assert record.retries_left == 2
    record = do_claim(record, now=now + 4 * MINUTE, timing=timing).record
    result = do_report(record, exception("worker-shutdown"), now=now + 5 * MINUTE, timing=timing)
    assert result.hint is not None
    assert result.hint.visible_at == now + 5 * MINUTE + base


@pytest.mark.parametrize(
    "make",
    [
        lambda: check(create(new_task(), now=T0)),
        lambda: check(schedule(unscheduled(), now=T0 + MINUTE)),
        lambda: check(rerun(resolved(FAILED), now=T0 + HOUR)),
    ],
    ids=["create", "schedule", "rerun"],
)
def test_the_retry_delay_never_delays_first_runs_or_reruns(
    make: Callable[[], TransitionResult],
) -> None:
    result = make()
    run = result.record.runs[-1]
    assert run.visible_at == run.scheduled
    assert result.hint is not None and result.hint.visible_at == run.scheduled


@pytest.mark.parametrize(("reason", "reason_created"), RETRYING)
def test_a_delayed_retry_is_refused_until_it_is_due(reason: str, reason_created: str) -> None:
    timing = Timing(claim_timeout_ms=CLAIM_TIMEOUT, retry_delay_base_ms=MINUTE)
    record = do_report(running(), exception(reason), now=CLAIMED_AT + SECOND, timing=timing).record
    due = CLAIMED_AT + SECOND + MINUTE
    assert (record.runs[1].reason_created, record.runs[1].visible_at) == (reason_created, due)
    with pytest.raises(Conflict, match="can't be claimed before"):
        claim_at(record, due - 2 * SECOND, timing)
    assert claim_at(record, due, timing).record.runs[1].state == "running"


# --- a task's retryDelay, a report's retryAfter, retryPriority -------------------------------


def exponential(base: float, factor: float = 2, maximum: float | None = None) -> dict[str, Any]:
    policy: dict[str, Any] = {"base": base, "factor": factor}
    if maximum is not None:
        policy["max"] = maximum
    return policy


def retry_delays(record: TaskRecord, reason: str, count: int, timing: Timing = TIMING) -> list[int]:
    """Run the task through ``count`` retries for ``reason``; each retry's delay (ms)."""
    delays = []
    now = T0
    for _ in range(count):
        now = max(now + HOUR, record.runs[-1].visible_at)
        record = do_claim(record, now=now, timing=timing).record
        now += MINUTE
        if reason == "claim-expired":
            taken_until = record.runs[-1].taken_until
            assert taken_until is not None
            now = taken_until
            result = check(expire_claim(record, taken_until=taken_until, now=now, timing=timing))
        else:
            result = do_report(record, exception(reason), now=now, timing=timing)
        record = result.record
        delays.append(record.runs[-1].visible_at - now)
    return delays


@pytest.mark.parametrize("reason", ["intermittent-task", "claim-expired"])
def test_retry_delay_exponential_with_a_maximum(reason: str) -> None:
    record = pending(retries=6, retryDelay=exponential(10, factor=3, maximum=500))
    assert retry_delays(record, reason, 6) == [
        10 * SECOND,
        30 * SECOND,
        90 * SECOND,
        270 * SECOND,
        500 * SECOND,
        500 * SECOND,
    ]


def test_retry_delay_schedule_repeats_its_last_value() -> None:
    record = pending(retries=5, retryDelay={"schedule": [1, 60, 5.5]})
    assert retry_delays(record, "intermittent-task", 5) == [
        SECOND,
        MINUTE,
        5500,
        5500,
        5500,
    ]


def test_a_tasks_retry_delay_replaces_the_coordinators_base() -> None:
    timing = Timing(claim_timeout_ms=CLAIM_TIMEOUT, retry_delay_base_ms=MINUTE)
    record = pending(retries=2, retryDelay={"schedule": [3]})
    assert retry_delays(record, "intermittent-task", 2, timing) == [3 * SECOND, 3 * SECOND]


def test_worker_shutdown_retries_at_once_despite_a_retry_delay() -> None:
    record = pending(retries=2, retryDelay=exponential(600))
    assert retry_delays(record, "worker-shutdown", 2) == [0, 0]


def report_retry_after(
    record: TaskRecord, reason: str, retry_after_ms: int, *, now: int
) -> TransitionResult:
    """reportException of the last run with a ``retryAfter``."""
    return check(
        report(
            record,
            run_id=len(record.runs) - 1,
            state="exception",
            reason=reason,
            now=now,
            timing=TIMING,
            retry_after_ms=retry_after_ms,
        )
    )


@pytest.mark.parametrize("retry_after_ms", [0, 7 * SECOND, DEADLINE - CLAIMED_AT - SECOND])
def test_retry_after_replaces_the_tasks_retry_delay(retry_after_ms: int) -> None:
    record = running(retries=2, retryDelay=exponential(600), notBefore=to_iso(T0))
    now = CLAIMED_AT + SECOND
    result = report_retry_after(record, "intermittent-task", retry_after_ms, now=now)
    retry = result.record.runs[-1]
    assert (retry.reason_created, retry.state) == ("task-retry", "pending")
    assert retry.visible_at == now + retry_after_ms
    assert result.hint == expected_hint(result.record, visible_at=now + retry_after_ms)
    assert result.record.retries_left == 1


def test_retry_after_never_makes_a_run_visible_before_not_before() -> None:
    not_before = CLAIMED_AT + HOUR
    record = do_claim(pending(retries=1, notBefore=to_iso(not_before)), now=not_before).record
    # claimed at notBefore; a retry 0 s later is visible at once, never before notBefore
    result = report_retry_after(record, "intermittent-task", 0, now=not_before + SECOND)
    assert result.record.runs[-1].visible_at == not_before + SECOND


def test_retry_after_without_retries_left_resolves_the_task() -> None:
    result = report_retry_after(
        running(retries=0), "intermittent-task", MINUTE, now=CLAIMED_AT + SECOND
    )
    assert result.resolved and result.hint is None
    assert result.record.runs[-1].reason_resolved == "intermittent-task"


@pytest.mark.parametrize("reason", sorted(EXCEPTION_REASONS - {"intermittent-task"}))
def test_retry_after_with_another_reason_is_an_input_error(reason: str) -> None:
    with pytest.raises(InputError, match="retryAfter is only for reason intermittent-task"):
        report_retry_after(running(), reason, SECOND, now=CLAIMED_AT + SECOND)


def test_retry_after_past_the_deadline_is_an_input_error_naming_it() -> None:
    now = CLAIMED_AT + SECOND
    with pytest.raises(InputError, match=r"retryAfter must be from 0 to the \d+ s left"):
        report_retry_after(running(), "intermittent-task", DEADLINE - now + 1, now=now)
    with pytest.raises(InputError, match="retryAfter"):
        report_retry_after(running(), "intermittent-task", -1, now=now)


def test_retry_priority_queues_automatic_retries_only() -> None:
    record = running(priority="high", retryPriority="very-low")
    retry = do_report(record, exception("intermittent-task"), now=CLAIMED_AT + SECOND)
    assert retry.hint is not None and retry.hint.priority == "very-low"
    assert hint_for(retry.record).priority == "very-low"
    done = do_report(do_claim(retry.record, now=T0 + HOUR).record, FAILED, now=T0 + 2 * HOUR)
    again = check(rerun(done.record, now=T0 + 3 * HOUR))
    assert again.hint is not None and again.hint.priority == "high"
    assert check(create(new_task(priority="high"), now=T0)).hint == expected_hint(
        pending(priority="high"), visible_at=T0
    )
