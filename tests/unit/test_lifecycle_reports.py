"""Unit tests of reportCompleted, reportFailed and reportException in the task state machine
(:mod:`coordinator.domain.lifecycle`) that resolve the task: repeats, conflicts, and the
reasons only the resolvers give (the retries are ``test_lifecycle_retries.py``'s)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.domain.errors import Conflict, NotFound
from coordinator.domain.lifecycle import (
    EXCEPTION_REASONS,
    cancel,
    exceed_deadline,
    expire_claim,
    report,
)
from coordinator.domain.records import Run, TaskRecord, to_iso
from tests.fixtures.lifecycle import (
    CLAIM_TIMEOUT,
    CLAIMED_AT,
    COMPLETED,
    DEADLINE,
    FAILED,
    MINUTE,
    NON_RETRYING_REASONS,
    T0,
    TIMING,
    WORKER_GROUP,
    WORKER_ID,
    Report,
    assert_unchanged,
    do_claim,
    do_report,
    exception,
    pending,
    running,
    unscheduled,
)


@pytest.mark.parametrize(
    "what",
    [COMPLETED, FAILED, *(exception(reason) for reason in NON_RETRYING_REASONS)],
    ids=lambda what: "/".join(what),
)
def test_report_resolves_the_task_for_good(what: Report) -> None:
    """completed, failed and every exception reason that never retries, retries left or not."""
    record = running(retries=5)
    now = T0 + 10 * MINUTE
    result = do_report(record, what, now=now)
    new = result.record
    state, reason = what
    assert result.changed and result.resolved and result.hint is None
    assert new.runs == (
        Run(
            run_id=0,
            state=state,  # type: ignore[arg-type]
            reason_created="scheduled",
            reason_resolved=reason,
            scheduled=T0,
            visible_at=T0,
            worker_group=WORKER_GROUP,
            worker_id=WORKER_ID,
            started=CLAIMED_AT,
            taken_until=CLAIMED_AT + CLAIM_TIMEOUT,
            resolved=now,
        ),
    )
    assert new.state == state
    assert new.is_resolved
    assert new.retries_left == 5
    assert new.notify_dependents and not new.hint_needed
    assert new.open_deadline is None
    assert new.taken_until is None
    assert new.hint_due is None
    assert new.status()["runs"][0]["resolved"] == to_iso(now)
    assert new.status()["runs"][0]["reasonResolved"] == reason


ALL_REPORTS: list[Report] = [
    COMPLETED,
    FAILED,
    *(exception(reason) for reason in sorted(EXCEPTION_REASONS)),
]


@pytest.mark.parametrize("what", ALL_REPORTS, ids=lambda what: "/".join(what))
@pytest.mark.parametrize("retries", [0, 5])
def test_the_same_report_repeated_is_unchanged(what: Report, retries: int) -> None:
    """Also for a retried run, which is no longer the last one."""
    first = do_report(running(retries=retries), what, now=T0 + 10 * MINUTE).record
    result = do_report(first, what, run_id=0, now=T0 + 11 * MINUTE)
    assert_unchanged(result, first)


DIFFERENT_REPORTS: list[Report] = [
    COMPLETED,
    FAILED,
    exception("internal-error"),
    exception("malformed-payload"),
    exception("worker-shutdown"),
]


@pytest.mark.parametrize(
    ("first", "second"),
    [(a, b) for a in DIFFERENT_REPORTS for b in DIFFERENT_REPORTS if a != b],
    ids=lambda what: "/".join(what),
)
@pytest.mark.parametrize("retries", [0, 5])
def test_a_different_report_of_a_resolved_run_is_a_conflict(
    first: Report, second: Report, retries: int
) -> None:
    record = do_report(running(retries=retries), first, now=T0 + 10 * MINUTE).record
    with pytest.raises(Conflict):
        do_report(record, second, run_id=0, now=T0 + 11 * MINUTE)


@pytest.mark.parametrize("what", ALL_REPORTS, ids=lambda what: "/".join(what))
def test_report_of_a_pending_run_is_a_conflict(what: Report) -> None:
    with pytest.raises(Conflict, match="pending, not running"):
        do_report(pending(), what, now=T0 + MINUTE)


@pytest.mark.parametrize("what", [COMPLETED, FAILED, exception("internal-error")])
def test_report_of_a_run_the_resolvers_resolved_is_a_conflict(what: Report) -> None:
    observed = CLAIMED_AT + CLAIM_TIMEOUT
    expired = expire_claim(running(retries=0), taken_until=observed, now=observed, timing=TIMING)
    canceled = cancel(running(), now=T0 + 5 * MINUTE)
    late = do_claim(pending(), now=DEADLINE - MINUTE).record
    exceeded = exceed_deadline(late, now=DEADLINE)
    for record, reason in [
        (expired.record, "claim-expired"),
        (canceled.record, "canceled"),
        (exceeded.record, "deadline-exceeded"),
    ]:
        with pytest.raises(Conflict, match=f"exception/{reason}, not running"):
            do_report(record, what, run_id=0, now=DEADLINE + MINUTE)


def test_report_of_a_run_after_its_retry_is_a_conflict() -> None:
    record = do_report(running(), exception("worker-shutdown"), now=T0 + 2 * MINUTE).record
    record = do_claim(record, now=T0 + 3 * MINUTE, worker_id="worker-2").record
    with pytest.raises(Conflict, match="not the last run"):
        do_report(record, COMPLETED, run_id=0, now=T0 + 4 * MINUTE)


@pytest.mark.parametrize(("make", "run_id"), [(running, 1), (running, -1), (unscheduled, 0)])
@pytest.mark.parametrize("what", [COMPLETED, exception("worker-shutdown")])
def test_report_of_a_missing_run_is_not_found(
    make: Callable[[], TaskRecord], run_id: int, what: Report
) -> None:
    with pytest.raises(NotFound):
        do_report(make(), what, run_id=run_id, now=T0 + 5 * MINUTE)


@pytest.mark.parametrize("reason", ["claim-expired", "deadline-exceeded", "canceled", "bogus"])
def test_workers_cannot_report_the_resolvers_reasons(reason: str) -> None:
    record = running()
    with pytest.raises(ValueError, match="not a reason a worker may report"):
        report(record, run_id=0, state="exception", reason=reason, now=T0, timing=TIMING)
