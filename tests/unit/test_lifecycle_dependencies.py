"""Unit tests of dependencies in the task state machine (:mod:`coordinator.domain.lifecycle`):
when they are satisfied, the run 0 they schedule, and the flag that asks for a resolved task's
dependents to be examined."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.domain.lifecycle import (
    dependencies_satisfied,
    dependents_notified,
    exceed_deadline,
    schedule_if_satisfied,
)
from coordinator.domain.records import Run, TaskRecord
from tests.fixtures.lifecycle import (
    COMPLETED,
    DEADLINE,
    DEP_A,
    DEP_B,
    HOUR,
    T0,
    assert_unchanged,
    check,
    expected_hint,
    pending,
    resolved,
    running,
    unscheduled,
)

# --- dependencies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requires", "states", "satisfied"),
    [
        ("all-completed", {DEP_A: "completed", DEP_B: "completed"}, True),
        ("all-completed", {DEP_A: "completed", DEP_B: "failed"}, False),
        ("all-completed", {DEP_A: "completed", DEP_B: "exception"}, False),
        ("all-completed", {DEP_A: "completed", DEP_B: "running"}, False),
        ("all-completed", {DEP_A: "completed", DEP_B: "pending"}, False),
        ("all-completed", {DEP_A: "completed", DEP_B: "unscheduled"}, False),
        ("all-completed", {DEP_A: "completed", DEP_B: None}, False),
        ("all-completed", {DEP_A: "completed"}, False),
        ("all-resolved", {DEP_A: "completed", DEP_B: "completed"}, True),
        ("all-resolved", {DEP_A: "failed", DEP_B: "exception"}, True),
        ("all-resolved", {DEP_A: "completed", DEP_B: "failed"}, True),
        ("all-resolved", {DEP_A: "completed", DEP_B: "running"}, False),
        ("all-resolved", {DEP_A: "completed", DEP_B: "pending"}, False),
        ("all-resolved", {DEP_A: "failed", DEP_B: "unscheduled"}, False),
        ("all-resolved", {DEP_A: "completed", DEP_B: None}, False),
        ("all-resolved", {DEP_A: "completed"}, False),
    ],
)
def test_dependencies_satisfied(
    requires: str, states: dict[str, str | None], satisfied: bool
) -> None:
    record = unscheduled(dependencies=[DEP_A, DEP_B], requires=requires)
    assert dependencies_satisfied(record, states) is satisfied


@pytest.mark.parametrize(
    ("requires", "states"),
    [
        ("all-completed", {DEP_A: "completed", DEP_B: "completed"}),
        ("all-resolved", {DEP_A: "completed", DEP_B: "completed"}),
        ("all-resolved", {DEP_A: "failed", DEP_B: "exception"}),
    ],
)
def test_satisfied_dependencies_schedule_run_0(
    requires: str, states: dict[str, str | None]
) -> None:
    now = T0 + HOUR
    record = unscheduled(dependencies=[DEP_A, DEP_B], requires=requires, priority="very-high")
    result = check(schedule_if_satisfied(record, dependency_states=states, now=now))
    new = result.record
    assert result.changed and not result.resolved
    assert new.runs == (
        Run(run_id=0, state="pending", reason_created="scheduled", scheduled=now, visible_at=now),
    )
    assert new.hint_needed and new.hint_due == now
    assert not new.notify_dependents
    assert result.hint == expected_hint(new, visible_at=now)
    assert result.hint.priority == "very-high"


@pytest.mark.parametrize(
    ("requires", "states"),
    [
        # a dependency that failed leaves an all-completed dependent waiting (until its deadline)
        ("all-completed", {DEP_A: "completed", DEP_B: "failed"}),
        ("all-completed", {DEP_A: "exception", DEP_B: "completed"}),
        # still running
        ("all-completed", {DEP_A: "completed", DEP_B: "running"}),
        ("all-resolved", {DEP_A: "failed", DEP_B: "pending"}),
        # a dependency that no longer exists never satisfies anything
        ("all-completed", {DEP_A: "completed", DEP_B: None}),
        ("all-resolved", {DEP_A: "completed", DEP_B: None}),
        ("all-resolved", {DEP_A: "completed"}),
    ],
)
def test_unsatisfied_dependencies_leave_the_task_waiting(
    requires: str, states: dict[str, str | None]
) -> None:
    record = unscheduled(dependencies=[DEP_A, DEP_B], requires=requires)
    assert_unchanged(
        check(schedule_if_satisfied(record, dependency_states=states, now=T0 + HOUR)), record
    )


def test_a_failed_dependency_leaves_an_all_completed_task_unscheduled_until_its_deadline() -> None:
    record = unscheduled(dependencies=[DEP_A])
    states: dict[str, str | None] = {DEP_A: "failed"}
    for now in (T0 + HOUR, DEADLINE - 1):
        assert_unchanged(
            check(schedule_if_satisfied(record, dependency_states=states, now=now)), record
        )
        assert_unchanged(check(exceed_deadline(record, now=now)), record)
    result = check(exceed_deadline(record, now=DEADLINE))
    assert result.resolved
    assert result.record.state == "exception"
    assert result.record.runs[0].reason_created == "exception"
    assert result.record.runs[0].reason_resolved == "deadline-exceeded"


@pytest.mark.parametrize(
    "make", [pending, running, lambda: resolved(COMPLETED)], ids=["pending", "running", "completed"]
)
def test_dependency_resolution_leaves_a_scheduled_task_alone(
    make: Callable[[], TaskRecord],
) -> None:
    record = make()
    result = check(
        schedule_if_satisfied(record, dependency_states={DEP_A: "completed"}, now=T0 + HOUR)
    )
    assert_unchanged(result, record)


def test_dependency_resolution_past_the_deadline_does_nothing() -> None:
    record = unscheduled()
    result = check(
        schedule_if_satisfied(record, dependency_states={DEP_A: "completed"}, now=DEADLINE)
    )
    assert_unchanged(result, record)


# --- dependents notified ---------------------------------------------------------------------


def test_dependents_notified_clears_the_flag() -> None:
    record = resolved(COMPLETED)
    assert record.notify_dependents
    result = check(dependents_notified(record, examined_version=record.version))
    assert result.changed and result.hint is None and not result.resolved
    assert not result.record.notify_dependents
    assert result.record.runs == record.runs
    again = dependents_notified(result.record, examined_version=result.record.version)
    assert_unchanged(check(again), result.record)


def test_dependents_notified_keeps_the_flag_of_a_newer_resolution() -> None:
    """The dependents were examined against version v; the task has changed since (e.g.
    rerun and resolved again), so that resolution's flag must survive."""
    record = resolved(COMPLETED).replace(version=7)
    assert_unchanged(check(dependents_notified(record, examined_version=6)), record)


@pytest.mark.parametrize("make", [unscheduled, pending, running])
def test_dependents_notified_of_an_unresolved_task_is_unchanged(
    make: Callable[[], TaskRecord],
) -> None:
    record = make()
    assert_unchanged(check(dependents_notified(record, examined_version=record.version)), record)
