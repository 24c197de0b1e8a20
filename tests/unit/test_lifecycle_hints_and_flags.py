"""Unit tests of the hints and flags across the task state machine's transitions
(:mod:`coordinator.domain.lifecycle`): every transition that makes a run pending asks for its
hint, and a whole life keeps the derived properties in step."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.domain.lifecycle import (
    Hint,
    TransitionResult,
    cancel,
    create,
    dependents_notified,
    expire_claim,
    hint_for,
    reclaim,
    rerun,
    schedule,
    schedule_if_satisfied,
)
from tests.fixtures.lifecycle import (
    CLAIM_TIMEOUT,
    CLAIMED_AT,
    COMPLETED,
    DEADLINE,
    DEP_A,
    FAILED,
    HOUR,
    MINUTE,
    PROVISIONER,
    T0,
    TASK_ID,
    TIMING,
    WORKER_TYPE,
    check,
    do_claim,
    do_report,
    exception,
    new_task,
    resolved,
    running,
    unscheduled,
)


def _created() -> tuple[TransitionResult, int]:
    return create(new_task(priority="high"), now=T0), T0


def _scheduled() -> tuple[TransitionResult, int]:
    now = T0 + MINUTE
    return schedule(unscheduled(priority="high"), now=now), now


def _dependencies_resolved() -> tuple[TransitionResult, int]:
    now = T0 + MINUTE
    record = unscheduled(priority="high")
    return schedule_if_satisfied(record, dependency_states={DEP_A: "completed"}, now=now), now


def _rerun() -> tuple[TransitionResult, int]:
    now = T0 + HOUR
    return rerun(resolved(FAILED, priority="high"), now=now), now


def _worker_shutdown() -> tuple[TransitionResult, int]:
    now = T0 + HOUR
    return do_report(running(priority="high"), exception("worker-shutdown"), now=now), now


def _intermittent_task() -> tuple[TransitionResult, int]:
    now = T0 + HOUR
    return do_report(running(priority="high"), exception("intermittent-task"), now=now), now


def _claim_expired() -> tuple[TransitionResult, int]:
    record = running(priority="high")
    now = CLAIMED_AT + CLAIM_TIMEOUT
    return expire_claim(record, taken_until=now, now=now, timing=TIMING), now


@pytest.mark.parametrize(
    "transition",
    [
        _created,
        _scheduled,
        _dependencies_resolved,
        _rerun,
        _worker_shutdown,
        _intermittent_task,
        _claim_expired,
    ],
)
def test_every_transition_that_makes_a_run_pending_asks_for_its_hint(
    transition: Callable[[], tuple[TransitionResult, int]],
) -> None:
    result, now = transition()
    record = check(result).record
    assert result.changed and not result.resolved
    assert record.state == "pending"
    assert record.hint_needed and record.hint_due == now
    assert result.hint == Hint(
        task_id=TASK_ID,
        run_id=len(record.runs) - 1,
        provisioner_id=PROVISIONER,
        worker_type=WORKER_TYPE,
        priority="high",
        deadline=DEADLINE,
        visible_at=now,
    )


def test_hint_for_describes_the_last_run() -> None:
    record = do_report(running(priority="medium"), exception("worker-shutdown"), now=T0 + HOUR)
    assert hint_for(record.record) == Hint(
        task_id=TASK_ID,
        run_id=1,
        provisioner_id=PROVISIONER,
        worker_type=WORKER_TYPE,
        priority="medium",
        deadline=DEADLINE,
        visible_at=T0 + HOUR,
    )


def test_a_whole_life_keeps_the_derived_properties_in_step() -> None:
    """create (waiting) → scheduled → claimed → reclaimed → worker-shutdown (retry) → claimed
    → completed → dependents notified → rerun → canceled."""
    record = unscheduled(retries=1)
    assert (record.state, record.hint_due, record.taken_until, record.open_deadline) == (
        "unscheduled",
        None,
        None,
        DEADLINE,
    )

    record = check(
        schedule_if_satisfied(record, dependency_states={DEP_A: "completed"}, now=T0 + 1)
    ).record
    assert (record.state, record.hint_due, record.taken_until) == ("pending", T0 + 1, None)

    record = do_claim(record, now=T0 + 2).record
    assert (record.state, record.hint_due, record.taken_until) == (
        "running",
        None,
        T0 + 2 + CLAIM_TIMEOUT,
    )

    record = check(reclaim(record, run_id=0, now=T0 + 3, timing=TIMING)).record
    assert record.taken_until == T0 + 3 + CLAIM_TIMEOUT

    record = do_report(record, exception("worker-shutdown"), now=T0 + 4).record
    assert (record.state, record.hint_due, record.taken_until) == ("pending", T0 + 4, None)
    assert (record.retries_left, record.notify_dependents) == (0, False)

    record = do_claim(record, now=T0 + 5, worker_id="worker-2").record
    result = do_report(record, COMPLETED, now=T0 + 6)
    record = result.record
    assert result.resolved
    assert (record.state, record.hint_due, record.taken_until, record.open_deadline) == (
        "completed",
        None,
        None,
        None,
    )
    assert record.notify_dependents

    record = check(dependents_notified(record, examined_version=record.version)).record
    assert not record.notify_dependents

    record = check(rerun(record, now=T0 + 7)).record
    assert (record.state, record.hint_due, record.retries_left) == ("pending", T0 + 7, 1)
    assert record.open_deadline == DEADLINE

    result = check(cancel(record, now=T0 + 8))
    record = result.record
    assert result.resolved and record.notify_dependents and not record.hint_needed
    assert [
        (run["state"], run["reasonCreated"], run.get("reasonResolved"))
        for run in record.status()["runs"]
    ] == [
        ("exception", "scheduled", "worker-shutdown"),
        ("completed", "retry", "completed"),
        ("exception", "rerun", "canceled"),
    ]
    assert record.status()["runs"][1]["workerId"] == "worker-2"
