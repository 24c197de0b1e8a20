"""The task state machine (docs/protocol.md, "Lifecycle"), as pure functions.

Every transition takes a :class:`~coordinator.domain.records.TaskRecord`, the event's
parameters and ``now`` (epoch milliseconds) and returns an :class:`TransitionResult`, or raises
:class:`~coordinator.domain.errors.NotFound` or :class:`~coordinator.domain.errors.Conflict`.
Nothing here reads a clock, touches the store or talks to Azure: the caller
(:mod:`coordinator.service.transitions`) loads the record, applies a transition, writes the
result with compare-and-set and then carries out the result's effects (putting a hint,
re-examining dependents). Because transitions are pure, a caller that loses a compare-and-set
race simply re-reads and applies the same transition again; the second application sees the
winner's state and answers accordingly (usually a conflict).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.domain.errors import Conflict, InputError, NotFound
from coordinator.domain.records import MAX_RUNS, RESOLVED_STATES, Run, TaskRecord, to_iso
from coordinator.domain.retry import RetryDelay

EXCEPTION_REASONS: frozenset[str] = frozenset(
    {
        "worker-shutdown",
        "malformed-payload",
        "resource-unavailable",
        "internal-error",
        "superseded",
        "intermittent-task",
    }
)
"""Reasons a worker may give to reportException."""

RETRYING_REASONS: Mapping[str, str] = {
    "worker-shutdown": "retry",
    "intermittent-task": "task-retry",
    "claim-expired": "retry",
}
"""Reasons that add a retry run while retries remain, mapped to the new run's reasonCreated."""

RETRY_AFTER_REASON = "intermittent-task"
"""The one reason a worker may give a ``retryAfter`` with: the others never retry, or retry at
once (``worker-shutdown``: the task did nothing wrong)."""


EARLY_CLAIM_TOLERANCE = 1_000
"""How long (ms) before a run becomes visible a claim is already accepted. A hint never
appears early (its delay is rounded up to whole seconds, from after ``now`` was read); this
only absorbs clock differences between replicas, so a worker that saw the hint is never
refused and left to delete it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Hint:
    """A request to put a hint for a pending run into its Azure queue.

    :param visible_at: when workers may first see it (epoch ms); later than now for delayed
        retries.
    """

    task_id: str
    run_id: int
    provisioner_id: str
    worker_type: str
    priority: str
    deadline: int
    visible_at: int


@dataclass(frozen=True, kw_only=True, slots=True)
class TransitionResult:
    """The result of a transition.

    :param record: the new record (the old one when ``changed`` is false).
    :param changed: whether anything must be written; idempotent repeats leave it false.
    :param hint: a hint to put after the write succeeds.
    :param resolved: the task became resolved; its dependents must be re-examined.
    """

    record: TaskRecord
    changed: bool = True
    hint: Hint | None = None
    resolved: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Timing:
    """Durations (milliseconds) the transitions need from configuration.

    :param claim_timeout_ms: how long a claim or reclaim holds a run.
    :param retry_delay_base_ms: the ``c`` of the ``c·2^n`` delay before an automatic retry's
        hint becomes visible; 0 retries at once.
    """

    claim_timeout_ms: int = 1_200_000
    retry_delay_base_ms: int = 0


def claim_timeout_ms(record: TaskRecord, timing: Timing) -> int:
    """How long a claim or reclaim of ``record``'s runs lasts (ms)."""
    return record.claim_timeout_ms or timing.claim_timeout_ms


def unchanged(record: TaskRecord) -> TransitionResult:
    return TransitionResult(record=record, changed=False)


def hint_for(record: TaskRecord) -> Hint:
    """The hint for a record whose last run is pending."""
    run = record.runs[-1]
    return Hint(
        task_id=record.task_id,
        run_id=run.run_id,
        provisioner_id=record.provisioner_id,
        worker_type=record.worker_type,
        priority=record.run_priority(run),
        deadline=record.deadline,
        visible_at=run.visible_at,
    )


def _add_pending_run(
    record: TaskRecord, *, reason: str, now: int, delay_ms: int = 0, **changes: object
) -> TransitionResult:
    run = Run(
        run_id=len(record.runs),
        state="pending",
        reason_created=reason,
        scheduled=now,
        # notBefore holds for every run; a past one means now
        visible_at=max(now + delay_ms, record.not_before or 0),
    )
    new = record.replace(runs=(*record.runs, run), hint_needed=True, **changes)
    return TransitionResult(record=new, hint=hint_for(new))


def _resolve_last_run(
    record: TaskRecord, *, state: str, reason: str, now: int, **changes: object
) -> TaskRecord:
    run = record.runs[-1]
    resolved = Run(
        **{
            **run.to_stored(),
            "state": state,
            "reason_resolved": reason,
            "resolved": now,
        }
    )
    return record.replace(runs=(*record.runs[:-1], resolved), hint_needed=False, **changes)


def _resolve(record: TaskRecord, *, state: str, reason: str, now: int) -> TransitionResult:
    """Resolve the task for good: the last run, or for an unscheduled task a new run 0 created
    already resolved (``reasonCreated: exception``). Its dependents must then look again."""
    if record.runs:
        new = _resolve_last_run(record, state=state, reason=reason, now=now, notify_dependents=True)
    else:
        run = Run(
            run_id=0,
            state="exception",
            reason_created="exception",
            reason_resolved=reason,
            scheduled=now,
            visible_at=now,
            resolved=now,
        )
        new = record.replace(runs=(run,), notify_dependents=True)
    return TransitionResult(record=new, resolved=True)


def _resolve_maybe_retry(
    record: TaskRecord, *, reason: str, now: int, timing: Timing, retry_after_ms: int | None = None
) -> TransitionResult:
    """Resolve the last run as ``exception/<reason>``, retrying if the reason and budget allow.

    :param retry_after_ms: the worker's delay before the retry run becomes visible, instead
        of the task's retry policy (reportException's ``retryAfter``).
    """
    retry_reason = RETRYING_REASONS.get(reason)
    can_retry = (
        retry_reason is not None
        and record.retries_left > 0
        and len(record.runs) < MAX_RUNS
        and now < record.deadline
    )
    if not can_retry or retry_reason is None:
        return _resolve(record, state="exception", reason=reason, now=now)
    definition_retries: int = record.definition["retries"]
    retry = definition_retries - record.retries_left + 1
    if retry_after_ms is not None:
        delay_ms = retry_after_ms
    elif record.retry_delay is None:
        delay_ms = RetryDelay(base=timing.retry_delay_base_ms).before(retry)
    elif reason == "worker-shutdown":
        delay_ms = 0  # the task did nothing wrong: its worker went away
    else:
        delay_ms = record.retry_delay.before(retry)
    resolved = _resolve_last_run(record, state="exception", reason=reason, now=now)
    return _add_pending_run(
        resolved,
        reason=retry_reason,
        now=now,
        delay_ms=delay_ms,
        retries_left=record.retries_left - 1,
    )


def _run(record: TaskRecord, run_id: int) -> Run:
    if not 0 <= run_id < len(record.runs):
        raise NotFound(f"run {run_id} of task {record.task_id} does not exist")
    return record.runs[run_id]


def _require_before_deadline(record: TaskRecord, now: int, action: str) -> None:
    if now >= record.deadline:
        raise Conflict(f"task {record.task_id} can't be {action} past its deadline")


def _require_last(record: TaskRecord, run: Run) -> None:
    if run.run_id != len(record.runs) - 1:
        raise Conflict(
            f"run {run.run_id} of task {record.task_id} is not the last run "
            f"(the last is {len(record.runs) - 1})"
        )


# --- creation and scheduling -------------------------------------------------------------


def create(record: TaskRecord, *, now: int) -> TransitionResult:
    """A new task: run 0 pending at once unless it waits for dependencies."""
    if record.dependencies:
        return TransitionResult(record=record)
    return _add_pending_run(record, reason="scheduled", now=now)


def schedule(record: TaskRecord, *, now: int) -> TransitionResult:
    """scheduleTask: give an unscheduled task its run 0; a no-op for any other state."""
    _require_before_deadline(record, now, "scheduled")
    if record.runs:
        return unchanged(record)
    return _add_pending_run(record, reason="scheduled", now=now)


def dependencies_satisfied(record: TaskRecord, dependency_states: Mapping[str, str | None]) -> bool:
    """Whether the dependencies allow the task to run.

    :param dependency_states: task state of each dependency; ``None`` for one that no longer
        exists (it can never satisfy anything).
    """
    wanted = {"completed"} if record.requires == "all-completed" else RESOLVED_STATES
    return all(dependency_states.get(dep) in wanted for dep in record.dependencies)


def schedule_if_satisfied(
    record: TaskRecord, *, dependency_states: Mapping[str, str | None], now: int
) -> TransitionResult:
    """Dependency resolution: schedule an unscheduled task whose dependencies are satisfied.

    A task that is already scheduled, past its deadline, or still waiting is left unchanged;
    a dependency that resolved the wrong way leaves it waiting until the deadline resolver
    acts.
    """
    if record.runs or now >= record.deadline:
        return unchanged(record)
    if not dependencies_satisfied(record, dependency_states):
        return unchanged(record)
    return _add_pending_run(record, reason="scheduled", now=now)


def rerun(record: TaskRecord, *, now: int) -> TransitionResult:
    """rerunTask: a new ``rerun`` run for a resolved task, with the retry budget restored."""
    _require_before_deadline(record, now, "rerun")
    state = record.state
    if state in ("pending", "running"):
        return unchanged(record)
    if state == "unscheduled":
        raise Conflict(f"task {record.task_id} is unscheduled: use scheduleTask, not rerunTask")
    if len(record.runs) >= MAX_RUNS:
        raise Conflict(f"task {record.task_id} already has the maximum of {MAX_RUNS} runs")
    retries: int = record.definition["retries"]
    return _add_pending_run(record, reason="rerun", now=now, retries_left=retries)


def cancel(record: TaskRecord, *, now: int) -> TransitionResult:
    """cancelTask: resolve the task as ``exception/canceled``; a no-op once resolved."""
    _require_before_deadline(record, now, "canceled")
    if record.is_resolved:
        return unchanged(record)
    return _resolve(record, state="exception", reason="canceled", now=now)


def change_priority(record: TaskRecord, *, priority: str, now: int) -> TransitionResult:
    """changeTaskPriority: the task's priority from now on, for its definition, its scopes and
    its runs' queues. A pending run's hint is put again on the new priority's queue (the old
    one goes stale, which is harmless); a running run keeps its claim."""
    _require_before_deadline(record, now, "reprioritized")
    if record.is_resolved:
        raise Conflict(f"task {record.task_id} is already resolved and cannot be reprioritized")
    if priority == record.priority:
        return unchanged(record)
    new = record.replace(
        priority=priority,
        definition={**record.definition, "priority": priority},
        definition_changed=True,
    )
    if record.state != "pending" or hint_for(new).priority == hint_for(record).priority:
        return TransitionResult(record=new)
    new = new.replace(hint_needed=True)
    return TransitionResult(record=new, hint=hint_for(new))


# --- worker actions ------------------------------------------------------------------------


def claim(
    record: TaskRecord,
    *,
    run_id: int,
    worker_group: str,
    worker_id: str,
    now: int,
    timing: Timing,
) -> TransitionResult:
    """claimTask: the worker takes the pending last run until ``now + claim_timeout_ms``.

    The same worker repeating a claim of the run it holds gets the same answer again.
    """
    run = _run(record, run_id)
    _require_before_deadline(record, now, "claimed")
    _require_last(record, run)
    if run.state == "running":
        if run.worker_group == worker_group and run.worker_id == worker_id:
            return unchanged(record)
        raise Conflict(
            f"run {run_id} of task {record.task_id} is already claimed by "
            f"{run.worker_group}/{run.worker_id}"
        )
    if run.state != "pending":
        raise Conflict(f"run {run_id} of task {record.task_id} is {run.state}, not pending")
    if now + EARLY_CLAIM_TOLERANCE < run.visible_at:
        raise Conflict(
            f"run {run_id} of task {record.task_id} can't be claimed before "
            f"{to_iso(run.visible_at)}"
        )
    claimed = Run(
        **{
            **run.to_stored(),
            "state": "running",
            "worker_group": worker_group,
            "worker_id": worker_id,
            "started": now,
            "taken_until": now + claim_timeout_ms(record, timing),
        }
    )
    return TransitionResult(
        record=record.replace(runs=(*record.runs[:-1], claimed), hint_needed=False)
    )


def reclaim(record: TaskRecord, *, run_id: int, now: int, timing: Timing) -> TransitionResult:
    """reclaimTask: extend the claim to ``now + claim_timeout_ms`` (never shortening it)."""
    run = _run(record, run_id)
    _require_before_deadline(record, now, "reclaimed")
    _require_last(record, run)
    if run.state != "running":
        raise Conflict(f"run {run_id} of task {record.task_id} is {run.state}, not running")
    taken_until = max(run.taken_until or 0, now + claim_timeout_ms(record, timing))
    return TransitionResult(
        record=record.with_last_run(Run(**{**run.to_stored(), "taken_until": taken_until}))
    )


def report(
    record: TaskRecord,
    *,
    run_id: int,
    state: str,
    reason: str,
    now: int,
    timing: Timing,
    retry_after_ms: int | None = None,
) -> TransitionResult:
    """reportCompleted, reportFailed and reportException.

    :param state: ``completed``, ``failed`` or ``exception``.
    :param reason: the reasonResolved: ``completed``, ``failed`` or an exception reason.
    :param retry_after_ms: reportException's ``retryAfter``: for ``intermittent-task`` only,
        from 0 to the time left until the deadline; the retry run (if any) becomes visible
        that long after ``now``, instead of after the task's retry delay.

    Repeating the report that resolved the run answers the same again; any other report of a
    run that is not the running last run is a conflict.
    """
    if state == "exception" and reason not in EXCEPTION_REASONS:
        # The API's schema admits only these; claim-expired and the like are the resolvers'.
        raise ValueError(f"{reason!r} is not a reason a worker may report")
    if retry_after_ms is not None and reason != RETRY_AFTER_REASON:
        raise InputError(
            f"retryAfter is only for reason {RETRY_AFTER_REASON}, not for {reason}: "
            "other reports never retry, or retry at once (worker-shutdown)"
        )
    run = _run(record, run_id)
    if run.state == state and run.reason_resolved == reason:
        return unchanged(record)
    if retry_after_ms is not None and not 0 <= retry_after_ms <= record.deadline - now:
        raise InputError(
            f"retryAfter must be from 0 to the {max(0, record.deadline - now) // 1000} s left "
            f"until task {record.task_id}'s deadline, not {retry_after_ms / 1000:g}"
        )
    _require_last(record, run)
    if run.state != "running":
        raise Conflict(
            f"run {run_id} of task {record.task_id} is {run.state}"
            + (f"/{run.reason_resolved}" if run.reason_resolved else "")
            + f", not running: can't report it {state}"
        )
    if state == "exception":
        return _resolve_maybe_retry(
            record, reason=reason, now=now, timing=timing, retry_after_ms=retry_after_ms
        )
    return _resolve(record, state=state, reason=reason, now=now)


# --- resolvers -----------------------------------------------------------------------------


def expire_claim(
    record: TaskRecord, *, taken_until: int, now: int, timing: Timing
) -> TransitionResult:
    """Claim expiry: resolve the running last run as ``exception/claim-expired``.

    :param taken_until: the takenUntil the resolver observed; a reclaim since then moved it,
        and the reclaim wins. Past the deadline the deadline resolver acts instead.
    """
    run = record.last_run
    if (
        run is None
        or run.state != "running"
        or run.taken_until != taken_until
        or taken_until > now
        or now >= record.deadline
    ):
        return unchanged(record)
    return _resolve_maybe_retry(record, reason="claim-expired", now=now, timing=timing)


def exceed_deadline(record: TaskRecord, *, now: int) -> TransitionResult:
    """Deadline: every unresolved task past its deadline ends ``exception/deadline-exceeded``."""
    if now < record.deadline or record.is_resolved:
        return unchanged(record)
    return _resolve(record, state="exception", reason="deadline-exceeded", now=now)


def dependents_notified(record: TaskRecord, *, examined_version: int) -> TransitionResult:
    """The dependency resolver has re-examined this task's dependents.

    :param examined_version: the version of the record whose resolution the dependents were
        checked against; if the task changed since (say rerun and resolved again), the flag
        belongs to that newer resolution and stays for the next pass.
    """
    if not record.notify_dependents or record.version != examined_version:
        return unchanged(record)
    return TransitionResult(record=record.replace(notify_dependents=False))
