"""Unit tests of createTask and scheduleTask in the task state machine
(:mod:`coordinator.domain.lifecycle`): run 0 and its hint, a task left waiting for its
dependencies, scheduling it by hand, and ``notBefore``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.domain.errors import Conflict
from coordinator.domain.lifecycle import create, rerun, schedule, schedule_if_satisfied
from coordinator.domain.records import Run, TaskRecord, to_iso
from coordinator.domain.task_queues import PRIORITIES
from tests.fixtures.lifecycle import (
    COMPLETED,
    DAY,
    DEADLINE,
    DEP_A,
    DEP_B,
    FAILED,
    HOUR,
    MINUTE,
    SECOND,
    T0,
    assert_unchanged,
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
)

# --- create and scheduleTask -----------------------------------------------------------------


def test_create_without_dependencies_adds_pending_run_0_and_asks_for_a_hint() -> None:
    result = check(create(new_task(), now=T0))
    record = result.record
    assert result.changed and not result.resolved
    assert record.runs == (
        Run(run_id=0, state="pending", reason_created="scheduled", scheduled=T0, visible_at=T0),
    )
    assert record.state == "pending"
    assert record.retries_left == 5
    assert record.hint_needed and not record.notify_dependents
    assert record.hint_due == T0
    assert record.taken_until is None
    assert record.open_deadline == DEADLINE
    assert result.hint == expected_hint(record, visible_at=T0)
    assert record.status()["runs"] == [
        {
            "runId": 0,
            "state": "pending",
            "reasonCreated": "scheduled",
            "scheduled": "2026-03-01T12:00:00.000Z",
        }
    ]


@pytest.mark.parametrize("requires", ["all-completed", "all-resolved"])
def test_create_with_dependencies_leaves_the_task_unscheduled(requires: str) -> None:
    fresh = new_task(dependencies=[DEP_A, DEP_B], requires=requires)
    result = check(create(fresh, now=T0))
    record = result.record
    assert result.changed, "a new task must be written even while it waits"
    assert result.hint is None and not result.resolved
    assert record.runs == ()
    assert record.state == "unscheduled"
    assert not record.hint_needed and not record.notify_dependents
    assert record.hint_due is None
    assert record.taken_until is None
    assert record.open_deadline == DEADLINE


@pytest.mark.parametrize("priority", PRIORITIES)
def test_the_hint_carries_the_task_priority(priority: str) -> None:
    result = check(create(new_task(priority=priority), now=T0))
    assert result.hint is not None
    assert result.hint.priority == priority
    assert result.hint == expected_hint(result.record, visible_at=T0)


def test_schedule_gives_an_unscheduled_task_run_0() -> None:
    now = T0 + HOUR
    result = check(schedule(unscheduled(), now=now))
    record = result.record
    assert result.changed and not result.resolved
    assert record.runs == (
        Run(run_id=0, state="pending", reason_created="scheduled", scheduled=now, visible_at=now),
    )
    assert record.hint_needed and record.hint_due == now
    assert result.hint == expected_hint(record, visible_at=now)


def test_schedule_repeated_is_unchanged() -> None:
    scheduled = schedule(unscheduled(), now=T0 + HOUR).record
    assert_unchanged(check(schedule(scheduled, now=T0 + 2 * HOUR)), scheduled)


@pytest.mark.parametrize(
    "make",
    [
        pending,
        running,
        lambda: resolved(COMPLETED),
        lambda: resolved(FAILED),
        lambda: resolved(exception("internal-error")),
    ],
    ids=["pending", "running", "completed", "failed", "exception"],
)
def test_schedule_of_a_scheduled_task_is_unchanged(make: Callable[[], TaskRecord]) -> None:
    record = make()
    assert_unchanged(check(schedule(record, now=T0 + HOUR)), record)


@pytest.mark.parametrize("now", [DEADLINE, DEADLINE + 1, DEADLINE + DAY])
def test_schedule_past_the_deadline_is_a_conflict(now: int) -> None:
    with pytest.raises(Conflict, match="deadline"):
        schedule(unscheduled(), now=now)


def test_schedule_just_before_the_deadline_works() -> None:
    result = check(schedule(unscheduled(), now=DEADLINE - 1))
    assert result.record.state == "pending"


# --- notBefore -------------------------------------------------------------------------------


def test_not_before_makes_run_0_pending_but_not_claimable_until_then() -> None:
    not_before = T0 + HOUR
    result = check(create(new_task(notBefore=to_iso(not_before)), now=T0))
    run = result.record.runs[0]
    assert (run.state, run.scheduled, run.visible_at) == ("pending", T0, not_before)
    assert result.hint == expected_hint(result.record, visible_at=not_before)
    assert result.record.visible_at == not_before

    with pytest.raises(Conflict, match=f"can't be claimed before {to_iso(not_before)}"):
        claim_at(result.record, not_before - 2 * SECOND)
    # the tolerance for clock differences between replicas, and no more
    assert claim_at(result.record, not_before - SECOND).record.state == "running"
    assert claim_at(result.record, not_before).record.runs[0].started == not_before


def test_a_past_not_before_means_now() -> None:
    record = check(create(new_task(notBefore=to_iso(T0 - DAY)), now=T0)).record
    assert record.runs[0].visible_at == T0
    assert claim_at(record, T0).record.state == "running"


def test_not_before_holds_for_runs_scheduled_by_dependencies_and_reruns() -> None:
    not_before = T0 + HOUR
    waiting = unscheduled(notBefore=to_iso(not_before))
    scheduled = check(
        schedule_if_satisfied(waiting, dependency_states={DEP_A: "completed"}, now=T0 + MINUTE)
    ).record
    assert scheduled.runs[0].visible_at == not_before
    forced = check(schedule(waiting, now=T0 + MINUTE)).record
    assert forced.runs[0].visible_at == not_before
    done = do_report(do_claim(forced, now=not_before).record, FAILED, now=not_before + 1).record
    assert check(rerun(done, now=not_before + 2)).record.runs[1].visible_at == not_before + 2
