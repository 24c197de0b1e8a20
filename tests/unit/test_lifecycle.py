"""Unit tests of the pure task state machine (:mod:`coordinator.domain.lifecycle`) and of the
record helpers it relies on (:mod:`coordinator.domain.records`).

Nothing here reads a clock, touches a store or talks to Azure: every transition gets ``now`` as
plain epoch milliseconds, counted from ``T0``, the moment the task is created.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from coordinator.domain.errors import Conflict, InputError, NotFound
from coordinator.domain.lifecycle import (
    EXCEPTION_REASONS,
    Hint,
    Timing,
    TransitionResult,
    cancel,
    claim,
    create,
    dependencies_satisfied,
    dependents_notified,
    exceed_deadline,
    expire_claim,
    hint_for,
    reclaim,
    report,
    rerun,
    schedule,
    schedule_if_satisfied,
)
from coordinator.domain.records import (
    MAX_RUNS,
    RESOLVED_STATES,
    Run,
    TaskRecord,
    from_iso,
    record_from_definition,
    to_iso,
)
from coordinator.domain.task_queues import PRIORITIES, priority_level
from devharness.tasks import task_definition

# --- constants and factories ---------------------------------------------------------------

TASK_ID = "aZHordi3QEK-aZcLq4tr1Q"
GROUP_ID = "WHAnONzMT4SVTX5DfPvIUg"
DEP_A = "CS9M1E93SjC68oS4pR6c7w"
DEP_B = "I4bHYrNxRtikAVHPbXcMTA"
PROVISIONER = "proj-test"
WORKER_TYPE = "linux-small"

SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

T0 = from_iso("2026-03-01T12:00:00.000Z")
"""When the task is created."""
DEADLINE = T0 + DAY
EXPIRES = DEADLINE + 365 * DAY
CLAIM_TIMEOUT = 20 * MINUTE
TIMING = Timing(claim_timeout_ms=CLAIM_TIMEOUT)

CLAIMED_AT = T0 + MINUTE
"""When :func:`running` claims run 0."""
WORKER_GROUP = "wg-1"
WORKER_ID = "worker-1"

Report = tuple[str, str]
"""A report as (run state, reasonResolved): reportCompleted, reportFailed or reportException."""

COMPLETED: Report = ("completed", "completed")
FAILED: Report = ("failed", "failed")


def exception(reason: str) -> Report:
    return ("exception", reason)


NON_RETRYING_REASONS = sorted(EXCEPTION_REASONS - {"worker-shutdown", "intermittent-task"})
RETRYING: list[tuple[str, str]] = [
    ("worker-shutdown", "retry"),
    ("intermittent-task", "task-retry"),
]
"""Exception reasons a worker may report that retry, with the retry run's reasonCreated."""


def definition(
    *,
    retries: int = 5,
    priority: str = "lowest",
    dependencies: Sequence[str] = (),
    requires: str = "all-completed",
    deadline: int = DEADLINE,
    expires: int = EXPIRES,
    **scheduling: Any,
) -> dict[str, Any]:
    """A minimal normalised task definition (as createTask stores it); ``scheduling`` adds
    fields such as ``notBefore`` or ``retryDelay``."""
    return task_definition(
        T0,
        provisionerId=PROVISIONER,
        workerType=WORKER_TYPE,
        schedulerId="ci",
        taskGroupId=GROUP_ID,
        dependencies=list(dependencies),
        requires=requires,
        priority=priority,
        retries=retries,
        deadline=to_iso(deadline),
        expires=to_iso(expires),
        **scheduling,
    )


def new_task(**fields: Any) -> TaskRecord:
    """A fresh record with no runs, before :func:`create` is applied."""
    return record_from_definition(TASK_ID, definition(**fields))


def unscheduled(**fields: Any) -> TaskRecord:
    """A created task still waiting for its dependency (DEP_A unless ``dependencies`` given)."""
    fields.setdefault("dependencies", [DEP_A])
    return check(create(new_task(**fields), now=T0)).record


def pending(**fields: Any) -> TaskRecord:
    """A task created at ``T0`` without dependencies: run 0 pending."""
    return check(create(new_task(**fields), now=T0)).record


def do_claim(
    record: TaskRecord,
    *,
    now: int,
    run_id: int | None = None,
    worker_group: str = WORKER_GROUP,
    worker_id: str = WORKER_ID,
    timing: Timing = TIMING,
) -> TransitionResult:
    """claimTask of ``run_id`` (default: the last run)."""
    return check(
        claim(
            record,
            run_id=len(record.runs) - 1 if run_id is None else run_id,
            worker_group=worker_group,
            worker_id=worker_id,
            now=now,
            timing=timing,
        )
    )


def do_report(
    record: TaskRecord,
    what: Report,
    *,
    now: int,
    run_id: int | None = None,
    timing: Timing = TIMING,
) -> TransitionResult:
    """reportCompleted / reportFailed / reportException of ``run_id`` (default: the last run)."""
    state, reason = what
    return check(
        report(
            record,
            run_id=len(record.runs) - 1 if run_id is None else run_id,
            state=state,
            reason=reason,
            now=now,
            timing=timing,
        )
    )


def running(**fields: Any) -> TaskRecord:
    """A task whose run 0 was claimed at ``CLAIMED_AT`` by WORKER_GROUP/WORKER_ID."""
    return do_claim(pending(**fields), now=CLAIMED_AT).record


RESOLVED_AT = T0 + 2 * MINUTE
"""When :func:`resolved` reports run 0."""


def resolved(what: Report, **fields: Any) -> TaskRecord:
    """A task whose run 0 was claimed at ``CLAIMED_AT`` and reported at ``RESOLVED_AT``, with no
    retries left, so even a retrying reason resolves the task for good."""
    fields.setdefault("retries", 0)
    return do_report(running(**fields), what, now=RESOLVED_AT).record


def with_runs(count: int, **fields: Any) -> tuple[TaskRecord, int]:
    """A task with ``count`` runs, all failed but the last, which is running; built by
    failing and rerunning. Returns the record and the time of the last claim."""
    record = running(**fields)
    now = CLAIMED_AT
    while len(record.runs) < count:
        now += SECOND
        record = do_report(record, FAILED, now=now).record
        now += SECOND
        record = check(rerun(record, now=now)).record
        now += SECOND
        record = do_claim(record, now=now).record
    assert len(record.runs) == count
    return record, now


def check(result: TransitionResult) -> TransitionResult:
    """Assert the invariants every record must keep after any transition; return the result."""
    record = result.record
    runs = record.runs
    assert [run.run_id for run in runs] == list(range(len(runs)))
    assert len(runs) <= MAX_RUNS
    for run in runs[:-1]:
        assert run.state in RESOLVED_STATES, "only the last run may be pending or running"
    for run in runs:
        if run.state in RESOLVED_STATES:
            assert run.reason_resolved is not None and run.resolved is not None
        else:
            assert run.reason_resolved is None and run.resolved is None
        if run.state == "pending":
            assert run.worker_id is None and run.started is None and run.taken_until is None
        if run.state == "running":
            assert run.worker_group and run.worker_id
            assert run.started is not None and run.taken_until is not None
    assert record.state == (runs[-1].state if runs else "unscheduled")
    if record.hint_needed:
        assert record.state == "pending"
    if result.hint is not None:
        assert result.hint == hint_for(record)
    if result.resolved:
        assert record.is_resolved and record.notify_dependents
    if not result.changed:
        assert result.hint is None and not result.resolved
    status = record.status()
    assert status["state"] == record.state
    assert [run["runId"] for run in status["runs"]] == list(range(len(runs)))
    return result


def assert_unchanged(result: TransitionResult, before: TaskRecord) -> None:
    """An idempotent repeat: nothing to write, nothing to do, the same record back."""
    assert result.record is before
    assert not result.changed
    assert result.hint is None
    assert not result.resolved


def expected_hint(record: TaskRecord, *, visible_at: int) -> Hint:
    """The hint for the last run of ``record``, spelled out field by field."""
    return Hint(
        task_id=TASK_ID,
        run_id=len(record.runs) - 1,
        provisioner_id=PROVISIONER,
        worker_type=WORKER_TYPE,
        priority=record.priority,
        deadline=DEADLINE,
        visible_at=visible_at,
    )


# --- records: times ---------------------------------------------------------------------


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


# --- records: the record and its derived properties ----------------------------------------


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


# --- create and scheduleTask ---------------------------------------------------------------


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


# --- reclaimTask ---------------------------------------------------------------------------


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


# --- reportCompleted / reportFailed / reportException --------------------------------------


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


# --- reportException retries ---------------------------------------------------------------


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


# --- retry delay ---------------------------------------------------------------------------


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


# --- claim expiry --------------------------------------------------------------------------


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


# --- deadline ------------------------------------------------------------------------------


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


# --- rerunTask -----------------------------------------------------------------------------


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


# --- cancelTask ----------------------------------------------------------------------------


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


# --- hints and flags across transitions ----------------------------------------------------


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


@pytest.mark.parametrize("reason", ["claim-expired", "deadline-exceeded", "canceled", "bogus"])
def test_workers_cannot_report_the_resolvers_reasons(reason: str) -> None:
    record = running()
    with pytest.raises(ValueError, match="not a reason a worker may report"):
        report(record, run_id=0, state="exception", reason=reason, now=T0, timing=TIMING)


# --- scheduling beyond Taskcluster: notBefore, retryDelay, retryPriority, claimTimeout -----


def claim_at(record: TaskRecord, now: int, timing: Timing = TIMING) -> TransitionResult:
    """claimTask of the last run, unchecked (it may raise)."""
    return claim(
        record,
        run_id=len(record.runs) - 1,
        worker_group=WORKER_GROUP,
        worker_id=WORKER_ID,
        now=now,
        timing=timing,
    )


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


@pytest.mark.parametrize(("reason", "reason_created"), RETRYING)
def test_a_delayed_retry_is_refused_until_it_is_due(reason: str, reason_created: str) -> None:
    timing = Timing(claim_timeout_ms=CLAIM_TIMEOUT, retry_delay_base_ms=MINUTE)
    record = do_report(running(), exception(reason), now=CLAIMED_AT + SECOND, timing=timing).record
    due = CLAIMED_AT + SECOND + MINUTE
    assert (record.runs[1].reason_created, record.runs[1].visible_at) == (reason_created, due)
    with pytest.raises(Conflict, match="can't be claimed before"):
        claim_at(record, due - 2 * SECOND, timing)
    assert claim_at(record, due, timing).record.runs[1].state == "running"


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


@pytest.mark.parametrize(
    "text",
    ["0732-01-23T01:09:09.611Z", "0001-01-01T00:00:00.000Z", "1969-12-31T23:59:59.999Z"],
)
def test_times_before_1000_and_1970_round_trip_as_rfc_3339(text: str) -> None:
    assert to_iso(from_iso(text)) == text
