"""Unit tests of claims in the task state machine (:mod:`coordinator.domain.lifecycle`):
claimTask, reclaimTask, a task's own ``claimTimeout``, and the claim resolver's expiry of a
claim no one renewed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.domain.errors import Conflict, NotFound
from coordinator.domain.lifecycle import Timing, cancel, exceed_deadline, expire_claim, reclaim
from coordinator.domain.records import Run, TaskRecord
from tests.fixtures.lifecycle import (
    CLAIM_TIMEOUT,
    CLAIMED_AT,
    COMPLETED,
    DAY,
    DEADLINE,
    FAILED,
    HOUR,
    MINUTE,
    SECOND,
    T0,
    TASK_ID,
    TIMING,
    WORKER_GROUP,
    WORKER_ID,
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
)

# --- claimTask -------------------------------------------------------------------------------


def test_claim_takes_the_pending_run() -> None:
    record = pending()
    result = do_claim(record, now=CLAIMED_AT)
    new = result.record
    assert result.changed and result.hint is None and not result.resolved
    assert new.runs == (
        Run(
            run_id=0,
            state="running",
            reason_created="scheduled",
            scheduled=T0,
            visible_at=T0,
            worker_group=WORKER_GROUP,
            worker_id=WORKER_ID,
            started=CLAIMED_AT,
            taken_until=CLAIMED_AT + CLAIM_TIMEOUT,
        ),
    )
    assert new.state == "running"
    assert new.retries_left == record.retries_left
    assert not new.hint_needed and new.hint_due is None
    assert not new.notify_dependents
    assert new.taken_until == CLAIMED_AT + CLAIM_TIMEOUT
    assert new.open_deadline == DEADLINE
    assert new.status()["runs"][0] == {
        "runId": 0,
        "state": "running",
        "reasonCreated": "scheduled",
        "scheduled": "2026-03-01T12:00:00.000Z",
        "workerGroup": WORKER_GROUP,
        "workerId": WORKER_ID,
        "takenUntil": "2026-03-01T12:21:00.000Z",
        "started": "2026-03-01T12:01:00.000Z",
    }


def test_claim_uses_the_configured_claim_timeout() -> None:
    result = do_claim(pending(), now=CLAIMED_AT, timing=Timing(claim_timeout_ms=30 * SECOND))
    assert result.record.taken_until == CLAIMED_AT + 30 * SECOND


@pytest.mark.parametrize("later", [0, SECOND, 10 * MINUTE])
def test_claim_repeated_by_the_same_worker_is_unchanged(later: int) -> None:
    record = running()
    result = do_claim(record, now=CLAIMED_AT + later)
    assert_unchanged(result, record)
    assert result.record.taken_until == CLAIMED_AT + CLAIM_TIMEOUT


@pytest.mark.parametrize(
    ("worker_group", "worker_id"),
    [("wg-2", WORKER_ID), (WORKER_GROUP, "worker-2"), ("wg-2", "worker-2")],
)
def test_claim_by_another_worker_is_a_conflict(worker_group: str, worker_id: str) -> None:
    with pytest.raises(Conflict, match="already claimed by wg-1/worker-1"):
        do_claim(running(), now=CLAIMED_AT + SECOND, worker_group=worker_group, worker_id=worker_id)


def test_claim_race_the_loser_sees_a_conflict_on_re_reading() -> None:
    """Both claims apply to the record they read; the store lets one write win, and the other
    worker's claim re-applied to the winner's record is a conflict."""
    record = pending()
    winner = do_claim(record, now=CLAIMED_AT, worker_id="worker-a").record
    do_claim(record, now=CLAIMED_AT, worker_id="worker-b")  # pure: fine on the stale record
    with pytest.raises(Conflict):
        do_claim(winner, now=CLAIMED_AT, worker_id="worker-b")


def test_claim_of_a_run_that_is_not_the_last_is_a_conflict() -> None:
    record = do_report(running(), exception("worker-shutdown"), now=T0 + 2 * MINUTE).record
    assert record.state == "pending" and len(record.runs) == 2
    with pytest.raises(Conflict, match="not the last run"):
        do_claim(record, run_id=0, now=T0 + 3 * MINUTE)


@pytest.mark.parametrize(
    "what",
    [COMPLETED, FAILED, exception("malformed-payload"), exception("worker-shutdown")],
    ids=lambda what: "/".join(what),
)
@pytest.mark.parametrize("same_worker", [True, False])
def test_claim_of_a_resolved_run_is_a_conflict(what: Report, same_worker: bool) -> None:
    record = resolved(what)
    with pytest.raises(Conflict, match="not pending"):
        do_claim(record, now=T0 + HOUR, worker_id=WORKER_ID if same_worker else "worker-2")


def test_claim_of_a_canceled_unscheduled_task_is_a_conflict() -> None:
    record = cancel(unscheduled(), now=T0 + HOUR).record
    with pytest.raises(Conflict, match="exception, not pending"):
        do_claim(record, run_id=0, now=T0 + 2 * HOUR)


@pytest.mark.parametrize(
    ("make", "run_id"),
    [(pending, 1), (pending, 7), (pending, -1), (unscheduled, 0), (running, 1)],
    ids=["next", "far", "negative", "unscheduled", "after-running"],
)
def test_claim_of_a_missing_run_is_not_found(make: Callable[[], TaskRecord], run_id: int) -> None:
    with pytest.raises(NotFound, match=f"run {run_id} of task {TASK_ID} does not exist"):
        do_claim(make(), run_id=run_id, now=T0 + HOUR)


@pytest.mark.parametrize("now", [DEADLINE, DEADLINE + 1, DEADLINE + DAY])
def test_claim_past_the_deadline_is_a_conflict(now: int) -> None:
    with pytest.raises(Conflict, match="deadline"):
        do_claim(pending(), now=now)


def test_claim_past_the_deadline_by_the_holder_is_a_conflict() -> None:
    with pytest.raises(Conflict, match="deadline"):
        do_claim(running(), now=DEADLINE)


def test_claim_just_before_the_deadline_works() -> None:
    result = do_claim(pending(), now=DEADLINE - 1)
    assert result.record.state == "running"
    assert result.record.taken_until == DEADLINE - 1 + CLAIM_TIMEOUT


# --- reclaimTask -----------------------------------------------------------------------------


def test_reclaim_extends_the_claim() -> None:
    record = running()
    now = CLAIMED_AT + 15 * MINUTE
    result = check(reclaim(record, run_id=0, now=now, timing=TIMING))
    new = result.record
    assert result.changed and result.hint is None and not result.resolved
    assert new.runs[0] == Run(**{**record.runs[0].to_stored(), "taken_until": now + CLAIM_TIMEOUT})
    assert new.taken_until == now + CLAIM_TIMEOUT
    assert new.runs[0].started == CLAIMED_AT
    assert new.state == "running"
    assert not new.hint_needed and not new.notify_dependents
    assert new.retries_left == record.retries_left


def test_reclaim_may_be_repeated() -> None:
    record = running()
    for minutes in (10, 20, 30, 40):
        now = CLAIMED_AT + minutes * MINUTE
        record = check(reclaim(record, run_id=0, now=now, timing=TIMING)).record
        assert record.taken_until == now + CLAIM_TIMEOUT


@pytest.mark.parametrize(
    ("timeout", "now", "expected"),
    [
        # a shorter claim timeout (reconfigured) does not shorten the claim
        (MINUTE, CLAIMED_AT + MINUTE, CLAIMED_AT + CLAIM_TIMEOUT),
        # reclaiming at once with the same timeout leaves the same takenUntil
        (CLAIM_TIMEOUT, CLAIMED_AT, CLAIMED_AT + CLAIM_TIMEOUT),
        # a reclaim that arrives out of order (an older request) does not shorten it either
        (CLAIM_TIMEOUT, CLAIMED_AT - MINUTE, CLAIMED_AT + CLAIM_TIMEOUT),
        (MINUTE, CLAIMED_AT + CLAIM_TIMEOUT, CLAIMED_AT + CLAIM_TIMEOUT + MINUTE),
    ],
)
def test_reclaim_never_shortens_the_claim(timeout: int, now: int, expected: int) -> None:
    result = check(reclaim(running(), run_id=0, now=now, timing=Timing(claim_timeout_ms=timeout)))
    assert result.record.taken_until == expected


def test_reclaim_after_takenUntil_before_the_claim_resolver_ran_still_works() -> None:
    record = running()
    now = CLAIMED_AT + CLAIM_TIMEOUT + MINUTE
    result = check(reclaim(record, run_id=0, now=now, timing=TIMING))
    assert result.record.taken_until == now + CLAIM_TIMEOUT


@pytest.mark.parametrize(
    "what",
    [COMPLETED, FAILED, exception("internal-error"), exception("claim-expired")],
    ids=lambda what: "/".join(what),
)
def test_reclaim_of_a_resolved_run_is_a_conflict(what: Report) -> None:
    if what == exception("claim-expired"):
        record = running(retries=0)
        observed = CLAIMED_AT + CLAIM_TIMEOUT
        record = expire_claim(record, taken_until=observed, now=observed, timing=TIMING).record
    else:
        record = resolved(what)
    with pytest.raises(Conflict, match="not running"):
        reclaim(record, run_id=0, now=T0 + 5 * MINUTE, timing=TIMING)


def test_reclaim_of_a_pending_run_is_a_conflict() -> None:
    with pytest.raises(Conflict, match="pending, not running"):
        reclaim(pending(), run_id=0, now=T0 + MINUTE, timing=TIMING)


def test_reclaim_of_a_retried_run_is_a_conflict() -> None:
    record = do_report(running(), exception("worker-shutdown"), now=T0 + 2 * MINUTE).record
    record = do_claim(record, now=T0 + 3 * MINUTE, worker_id="worker-2").record
    with pytest.raises(Conflict, match="not the last run"):
        reclaim(record, run_id=0, now=T0 + 4 * MINUTE, timing=TIMING)


@pytest.mark.parametrize(("make", "run_id"), [(running, 1), (running, -1), (unscheduled, 0)])
def test_reclaim_of_a_missing_run_is_not_found(make: Callable[[], TaskRecord], run_id: int) -> None:
    with pytest.raises(NotFound):
        reclaim(make(), run_id=run_id, now=T0 + 5 * MINUTE, timing=TIMING)


@pytest.mark.parametrize("now", [DEADLINE, DEADLINE + HOUR])
def test_reclaim_past_the_deadline_is_a_conflict(now: int) -> None:
    record = do_claim(pending(), now=DEADLINE - MINUTE).record
    with pytest.raises(Conflict, match="deadline"):
        reclaim(record, run_id=0, now=now, timing=TIMING)


def test_claim_timeout_of_the_task_replaces_the_coordinators() -> None:
    record = do_claim(pending(claimTimeout=30), now=CLAIMED_AT).record
    assert record.runs[0].taken_until == CLAIMED_AT + 30 * SECOND
    renewed = check(reclaim(record, run_id=0, now=CLAIMED_AT + 20 * SECOND, timing=TIMING))
    assert renewed.record.runs[0].taken_until == CLAIMED_AT + 50 * SECOND
    expired = check(
        expire_claim(
            renewed.record,
            taken_until=CLAIMED_AT + 50 * SECOND,
            now=CLAIMED_AT + 50 * SECOND,
            timing=TIMING,
        )
    )
    assert [(r.state, r.reason_created) for r in expired.record.runs] == [
        ("exception", "scheduled"),
        ("pending", "retry"),
    ]


# --- claim expiry ----------------------------------------------------------------------------


def test_claim_expiry_resolves_the_run_and_adds_a_retry_run() -> None:
    record = running(retries=2)
    observed = CLAIMED_AT + CLAIM_TIMEOUT
    now = observed + 30 * SECOND
    result = check(expire_claim(record, taken_until=observed, now=now, timing=TIMING))
    new = result.record
    assert result.changed and not result.resolved
    assert new.runs[0] == Run(
        **{
            **record.runs[0].to_stored(),
            "state": "exception",
            "reason_resolved": "claim-expired",
            "resolved": now,
        }
    )
    assert new.runs[1] == Run(
        run_id=1, state="pending", reason_created="retry", scheduled=now, visible_at=now
    )
    assert new.retries_left == 1
    assert new.state == "pending"
    assert new.taken_until is None
    assert new.hint_needed and new.hint_due == now
    assert not new.notify_dependents
    assert result.hint == expected_hint(new, visible_at=now)


def test_claim_expiry_acts_exactly_at_takenUntil() -> None:
    record = running()
    observed = CLAIMED_AT + CLAIM_TIMEOUT
    assert_unchanged(
        check(expire_claim(record, taken_until=observed, now=observed - 1, timing=TIMING)), record
    )
    result = check(expire_claim(record, taken_until=observed, now=observed, timing=TIMING))
    assert result.record.runs[0].reason_resolved == "claim-expired"


def test_claim_expiry_loses_to_a_reclaim_in_between() -> None:
    record = running()
    observed = record.taken_until
    assert observed is not None
    reclaimed = check(reclaim(record, run_id=0, now=observed - MINUTE, timing=TIMING)).record
    result = check(expire_claim(reclaimed, taken_until=observed, now=observed + 1, timing=TIMING))
    assert_unchanged(result, reclaimed)
    assert reclaimed.taken_until == observed - MINUTE + CLAIM_TIMEOUT


@pytest.mark.parametrize("observed", [CLAIMED_AT, CLAIMED_AT + CLAIM_TIMEOUT - 1, 0])
def test_claim_expiry_with_a_takenUntil_that_was_never_there_does_nothing(
    observed: int,
) -> None:
    record = running()
    now = CLAIMED_AT + CLAIM_TIMEOUT + HOUR
    assert_unchanged(
        check(expire_claim(record, taken_until=observed, now=now, timing=TIMING)), record
    )


def test_claim_expiry_retries_then_exhausts() -> None:
    retries = 2
    record = running(retries=retries)
    expiry = CLAIMED_AT + CLAIM_TIMEOUT
    for attempt in range(retries):
        result = check(expire_claim(record, taken_until=expiry, now=expiry, timing=TIMING))
        assert not result.resolved and result.hint is not None
        assert result.record.retries_left == retries - 1 - attempt
        assert result.record.runs[-1].reason_created == "retry"
        # the resolver re-applying the same expiry (after losing a race) changes nothing
        assert_unchanged(
            check(expire_claim(result.record, taken_until=expiry, now=expiry, timing=TIMING)),
            result.record,
        )
        record = do_claim(result.record, now=expiry + MINUTE).record
        expiry = expiry + MINUTE + CLAIM_TIMEOUT

    result = check(expire_claim(record, taken_until=expiry, now=expiry, timing=TIMING))
    final = result.record
    assert result.changed and result.resolved and result.hint is None
    assert final.state == "exception"
    assert len(final.runs) == retries + 1
    assert [run.reason_resolved for run in final.runs] == ["claim-expired"] * 3
    assert [run.reason_created for run in final.runs] == ["scheduled", "retry", "retry"]
    assert final.retries_left == 0
    assert final.notify_dependents and not final.hint_needed
    assert final.open_deadline is None and final.taken_until is None


def test_claim_expiry_past_the_deadline_is_left_to_the_deadline_resolver() -> None:
    claimed_at = DEADLINE - MINUTE
    record = do_claim(pending(), now=claimed_at).record
    observed = claimed_at + CLAIM_TIMEOUT
    assert observed > DEADLINE
    assert_unchanged(
        check(expire_claim(record, taken_until=observed, now=observed, timing=TIMING)), record
    )
    result = check(exceed_deadline(record, now=observed))
    assert result.resolved
    assert result.record.runs[-1].reason_resolved == "deadline-exceeded"
    assert len(result.record.runs) == 1


@pytest.mark.parametrize(
    "make",
    [
        unscheduled,
        pending,
        lambda: resolved(COMPLETED),
        lambda: resolved(exception("internal-error")),
    ],
    ids=["unscheduled", "pending", "completed", "exception"],
)
def test_claim_expiry_of_a_task_that_is_not_running_does_nothing(
    make: Callable[[], TaskRecord],
) -> None:
    record = make()
    now = CLAIMED_AT + CLAIM_TIMEOUT
    assert_unchanged(check(expire_claim(record, taken_until=now, now=now, timing=TIMING)), record)
