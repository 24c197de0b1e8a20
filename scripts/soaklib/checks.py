"""The soak's invariants, checked from what the store, the journals and the queues say.

Pure functions over plain data, so every rule can be read (and tested) on its own:

``lost``
    a task whose createTask was answered 200 is unknown to the coordinator.
``unresolved``
    a task is not ``completed``, ``failed`` or ``exception`` after the drain. This is also
    what a hint lost by a SIGKILLed Azurite and never put again would show as: its run stays
    ``pending`` (the coordinator's reconciler must put it again; the drain waits for it).
``completed-twice``
    a task has more than one ``completed`` run: each task ends completed exactly once.
``double-run``
    one run (taskId, runId) was executed by two worker incarnations, or twice by one: a run
    is held by exactly one worker, and a killed worker's run is retried as a *new* run.
``foreign-run``
    a worker executed a run that the store says some other worker (or nobody) claimed.
``overlap``
    two executions of one task overlapped in time: an earlier run's handler was still going
    (its end record, or, for a SIGKILLed worker, the moment the process was seen dead) when
    a later run's handler started. The SDK stops a handler once its claim can no longer be
    renewed, which is before the coordinator can expire the claim, so this never happens in
    a correct system; it is the "held by two workers at once" of the task as a whole.
``completed-unrun``
    a run is ``completed`` but its worker's journal has no finished (``ok``) execution of it.
``no-retry``
    a run resolved ``exception/claim-expired`` (or ``worker-shutdown``) while retries
    remained is not followed by a ``retry`` run; or a ``retry`` run follows anything else,
    exceeds the budget, or ``retriesLeft`` disagrees with the runs.
``hint-left``
    once every task was resolved and the workers had ``settle`` seconds to clear stale
    hints, a soak queue still holds a visible message that does not name a pending run
    (every run then is resolved, so: any visible message, garbage included). Invisible
    messages are not counted: they are hints a worker fetched (Azure hides them for the poll
    visibility timeout, 300 s) and did not delete because its claim failed with a network
    error or 5xx (the coordinator was down; the worker protocol says keep them) or because it
    was killed in between. Nobody can read or remove them before they reappear; when they do, the
    claim is refused and the worker deletes them. Their number is reported as ``in flight``.
    Hints a SIGKILLed Azurite lost are in no queue at all, so they are neither left nor in
    flight; deletions it lost bring hints of claimed runs back, which the workers fetch,
    fail to claim and delete during the settle like any other stale hint.
``worker-crash``
    a worker process exited without being told to.
``slot-overlap``
    two incarnations of one worker slot were alive at once: one was started before the one
    it replaced was seen reaped (an orphan nobody would signal).
``stuck-process``
    a child (worker or coordinator) did not exit within its wait after SIGTERM and had to
    be SIGKILLed.
``process-left``
    a process the soak started was still running when the soak ended (it outlived
    SIGKILL).
``event-missing``
    (``--everything``) a task's Pulse messages, received through the real broker, lack one of
    ``task-defined``, ``task-pending``, ``task-running`` (when a run started) and the
    exchange of the state it ended in.
``hook-missed`` / ``hook-fired-twice``
    (``--everything``) a due time of the hook in the chaos phase has no task, or several.
    A due time while the store was down (a PostgreSQL restart, and a few seconds after) is
    excused and counted: a hook due several times while nobody could fire it fires the
    earliest of them once and schedules from then on.
``retries-not-honoured``
    (``--everything``) a function task did not end as its ``retries`` and failures say:
    ``recovers`` completed after its failing attempts, every run before that one retried;
    ``gives-up`` failed on its last allowed run, ``retries`` + 1.
``artifact-unreadable``
    (``--everything``) a completed run's artifact or run log could not be read back, or
    did not say what the run wrote (a run log its worker logged it gave up uploading is
    counted, not a violation: the worker reports the run all the same).
``memory-growth``
    with ``--max-rss-growth``, the longest-lived coordinator or a worker grew by more than
    that share of its RSS between its warm-up and the end of the load (checked by the soak
    itself, from :mod:`devharness.rss`'s samples).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from soaklib.hints import LeftHint
from soaklib.journal import Execution
from soaklib.processes import Incarnation

RESOLVED = frozenset({"completed", "failed", "exception"})
RETRIED_REASONS = {
    "claim-expired": "retry",
    "worker-shutdown": "retry",
    "intermittent-task": "task-retry",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Violation:
    kind: str
    detail: str


@dataclass(kw_only=True)
class Findings:
    violations: list[Violation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, detail: str) -> None:
        self.violations.append(Violation(kind=kind, detail=detail))

    def count(self, name: str, by: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + by


def check_tasks(
    created: Iterable[str],
    statuses: Mapping[str, dict[str, Any] | None],
    *,
    retries: int,
    retries_of: Mapping[str, int] | None = None,
) -> Findings:
    """``lost``, ``unresolved``, ``completed-twice`` and ``no-retry``; counts runs, states
    and reasons. ``retries_of`` holds the tasks whose ``retries`` is not ``retries``."""
    found = Findings()
    retries_of = retries_of or {}
    for task_id in created:
        status = statuses.get(task_id)
        if status is None:
            found.add("lost", f"task {task_id} was created but the coordinator does not know it")
            continue
        state = status["state"]
        found.count(f"state {state}")
        if state not in RESOLVED:
            found.add("unresolved", f"task {task_id} is {state} after the drain")
        runs: list[dict[str, Any]] = status["runs"]
        found.count("runs", len(runs))
        completed = [index for index, run in enumerate(runs) if run.get("state") == "completed"]
        if len(completed) > 1:
            found.add("completed-twice", f"task {task_id} runs {completed} are all completed")
        budget = retries_of.get(task_id, retries)
        _check_retries(found, task_id, runs, status.get("retriesLeft"), budget)
    return found


def _check_retries(
    found: Findings, task_id: str, runs: list[dict[str, Any]], left: Any, retries: int
) -> None:
    used = 0
    for index, run in enumerate(runs):
        created = run.get("reasonCreated")
        resolved = run.get("reasonResolved")
        if resolved is not None:
            found.count(f"resolved {resolved}")
        if index > 0 and created in ("retry", "task-retry"):
            found.count("retries")
            used += 1
            before = runs[index - 1]
            wanted = RETRIED_REASONS.get(str(before.get("reasonResolved")))
            if before.get("state") != "exception" or wanted != created:
                found.add(
                    "no-retry",
                    f"task {task_id} run {index} is a {created} run after "
                    f"{before.get('state')}/{before.get('reasonResolved')}",
                )
            if used > retries:
                found.add("no-retry", f"task {task_id} run {index} exceeds {retries} retries")
        if run.get("state") == "exception" and resolved in RETRIED_REASONS:
            remaining = retries - used
            following = runs[index + 1] if index + 1 < len(runs) else None
            if remaining > 0 and (
                following is None or following.get("reasonCreated") != RETRIED_REASONS[resolved]
            ):
                found.add(
                    "no-retry",
                    f"task {task_id} run {index} ended {resolved} with {remaining} retries left "
                    f"but is followed by "
                    f"{following.get('reasonCreated') if following else 'nothing'}",
                )
    if left != retries - used:
        found.add(
            "no-retry",
            f"task {task_id} retriesLeft={left} but {retries} - {used} retry runs "
            f"= {retries - used}",
        )


def _death(incarnations: Mapping[str, Incarnation], worker: str, fallback: float) -> float:
    incarnation = incarnations.get(worker)
    if incarnation is None or incarnation.ended is None:
        return fallback
    return incarnation.ended


def check_executions(
    executions: list[Execution],
    statuses: Mapping[str, dict[str, Any] | None],
    incarnations: Iterable[Incarnation],
    *,
    now: float,
) -> Findings:
    """``double-run``, ``foreign-run``, ``overlap`` and ``completed-unrun``."""
    found = Findings()
    by_id = {incarnation.worker_id: incarnation for incarnation in incarnations}
    by_run: dict[tuple[str, int], list[Execution]] = defaultdict(list)
    by_task: dict[str, list[Execution]] = defaultdict(list)
    for execution in executions:
        by_run[(execution.task_id, execution.run_id)].append(execution)
        by_task[execution.task_id].append(execution)
        found.count("executions")
        if execution.end is None:
            found.count("executions killed")
        elif execution.how == "cancelled":
            found.count("executions cancelled")

    for (task_id, run_id), runs in by_run.items():
        if len(runs) > 1:
            workers = sorted({execution.worker for execution in runs})
            found.add(
                "double-run",
                f"task {task_id} run {run_id} was executed {len(runs)} times by "
                f"{', '.join(workers)}",
            )
        status = statuses.get(task_id)
        stored = status["runs"] if status is not None else []
        holder = stored[run_id].get("workerId") if run_id < len(stored) else None
        for execution in runs:
            if execution.worker != holder:
                found.add(
                    "foreign-run",
                    f"{execution.worker} executed task {task_id} run {run_id}, "
                    f"which the store gives to {holder}",
                )

    for task_id, runs in by_task.items():
        ordered = sorted(runs, key=lambda execution: execution.start)
        for index, first in enumerate(ordered):
            first_end = first.end if first.end is not None else _death(by_id, first.worker, now)
            for second in ordered[index + 1 :]:
                if second.start >= first_end:
                    break
                if second.run_id != first.run_id:  # the same run twice is a double-run
                    found.add(
                        "overlap",
                        f"task {task_id}: run {first.run_id} on {first.worker} was still "
                        f"running {first_end - second.start:.3f} s after run "
                        f"{second.run_id} started on {second.worker}",
                    )

    for task_id, status in statuses.items():
        if status is None:
            continue
        for run_id, run in enumerate(status["runs"]):
            if run.get("state") != "completed":
                continue
            if not any(
                execution.worker == run.get("workerId") and execution.how == "ok"
                for execution in by_run.get((task_id, run_id), [])
            ):
                found.add(
                    "completed-unrun",
                    f"task {task_id} run {run_id} is completed by {run.get('workerId')}, "
                    "whose journal has no finished execution of it",
                )
    return found


def check_hints(
    left: Iterable[LeftHint], statuses: Mapping[str, dict[str, Any] | None]
) -> Findings:
    """``hint-left``: every visible message must name a run that is still pending."""
    found = Findings()
    for hint in left:
        found.count("hints left")
        if hint.task_id is None or hint.run_id is None:
            found.add("hint-left", f"garbage message {hint.message_id} left in {hint.queue}")
            continue
        status = statuses.get(hint.task_id)
        runs = status["runs"] if status is not None else []
        state = runs[hint.run_id].get("state") if hint.run_id < len(runs) else "missing"
        if state != "pending":
            found.add(
                "hint-left",
                f"hint for task {hint.task_id} run {hint.run_id} ({state}) left in "
                f"{hint.queue}, dequeued {hint.dequeue_count} times",
            )
    return found


def check_workers(incarnations: Iterable[Incarnation]) -> Findings:
    """``worker-crash``, ``slot-overlap``, ``stuck-process`` and ``process-left``; counts
    kills and starts."""
    found = Findings()
    by_slot: dict[int, list[Incarnation]] = defaultdict(list)
    for incarnation in incarnations:
        by_slot[incarnation.slot].append(incarnation)
        found.count("worker starts")
        if incarnation.end.startswith("exited"):
            found.add(
                "worker-crash",
                f"{incarnation.worker_id} {incarnation.end} unasked (log: {incarnation.log})",
            )
        elif incarnation.end in ("sigkill", "sigterm"):
            found.count(f"worker {incarnation.end}")
        if incarnation.forced:
            found.add(
                "stuck-process",
                f"{incarnation.worker_id} outlived its SIGTERM ({incarnation.end}) and was "
                "SIGKILLed",
            )
        if incarnation.ended is None:
            found.add("process-left", f"{incarnation.worker_id} was still running at the end")
    for slot, started in by_slot.items():
        ordered = sorted(started, key=lambda incarnation: incarnation.started)
        for earlier, later in itertools.pairwise(ordered):
            if earlier.ended is None or earlier.ended > later.started:
                found.add(
                    "slot-overlap",
                    f"slot {slot}: {later.worker_id} started while {earlier.worker_id} "
                    f"({earlier.end or 'never signalled'}) was still alive",
                )
    return found


RESOLVED_EXCHANGE = {
    "completed": "task-completed",
    "failed": "task-failed",
    "exception": "task-exception",
}


def check_events(
    statuses: Mapping[str, dict[str, Any] | None], seen: Mapping[str, set[str]]
) -> Findings:
    """``event-missing``: each task's messages came through ``task-defined`` and
    ``task-pending``, ``task-running`` if one of its runs started, and the exchange of its
    final state."""
    found = Findings()
    for task_id, status in statuses.items():
        if status is None:
            continue
        wanted = expected_events(status)
        missing = sorted(wanted - seen.get(task_id, set()))
        found.count("tasks with events", 1 if task_id in seen else 0)
        if missing:
            found.add(
                "event-missing",
                f"task {task_id} ({status['state']}): no message on {', '.join(missing)}",
            )
    return found


def expected_events(status: Mapping[str, Any]) -> set[str]:
    """The exchanges a task with this status must have published on."""
    wanted = {"task-defined", "task-pending"}
    if any(run.get("started") for run in status["runs"]):
        wanted.add("task-running")
    if status["state"] in RESOLVED_EXCHANGE:
        wanted.add(RESOLVED_EXCHANGE[status["state"]])
    return wanted


def check_hook_fires(
    fired: Mapping[str, float],
    due: Iterable[float],
    outages: Iterable[tuple[float, float]],
) -> Findings:
    """``hook-missed`` and ``hook-fired-twice``.

    :param fired: taskId -> ``created`` (epoch seconds) of every task the hook created: the
        due time it was fired for.
    :param due: the due times to check (epoch seconds).
    :param outages: ``(from, to)`` epoch times when the store could not be reached; a due time
        within one may be skipped.
    """
    found = Findings()
    by_due: defaultdict[float, list[str]] = defaultdict(list)
    for task_id, created in fired.items():
        by_due[round(created, 3)].append(task_id)
    windows = list(outages)
    for moment in due:
        tasks = by_due.get(round(moment, 3), [])
        found.count("hook due times")
        if len(tasks) > 1:
            found.add(
                "hook-fired-twice",
                f"due time {moment:.0f} fired {len(tasks)} tasks: {', '.join(sorted(tasks))}",
            )
        elif tasks:
            found.count("hook fires")
        elif any(start <= moment <= end for start, end in windows):
            found.count("hook due times skipped (store down)")
        else:
            found.add("hook-missed", f"due time {moment:.0f} fired no task")
    return found


def check_functions(
    kinds: Mapping[str, str],
    statuses: Mapping[str, dict[str, Any] | None],
    *,
    failures: int,
    retries: Mapping[str, int],
) -> Findings:
    """``retries-not-honoured`` for the function tasks.

    :param kinds: taskId -> ``recovers`` (fails its first ``failures`` attempts, then
        succeeds) or ``gives-up`` (fails every attempt).
    :param retries: each kind's ``retries``.
    """
    found = Findings()
    for task_id, kind in kinds.items():
        status = statuses.get(task_id)
        if status is None:
            continue  # lost: check_tasks says so
        runs: list[dict[str, Any]] = status["runs"]
        found.count(f"function {kind}")
        problem = (
            _recovers_problem(runs, failures, retries[kind])
            if kind == "recovers"
            else _gives_up_problem(runs, retries[kind])
        )
        if problem:
            found.add("retries-not-honoured", f"{kind} task {task_id}: {problem}")
        elif kind == "recovers" and len(runs) == failures + 1:
            found.count("function recovers in failures + 1 runs")
        elif kind == "gives-up" and runs[-1].get("state") == "failed":
            found.count("function gives-up failed on its last run")
    return found


def _retried(run: Mapping[str, Any]) -> bool:
    return run.get("state") == "exception" and run.get("reasonResolved") in RETRIED_REASONS


def _recovers_problem(runs: list[dict[str, Any]], failures: int, retries: int) -> str:
    """Why a ``recovers`` task's runs are wrong, or ``""``."""
    shape = [f"{run.get('state')}/{run.get('reasonResolved')}" for run in runs]
    if not runs or runs[-1].get("state") != "completed":
        return f"did not complete: {shape}"
    if len(runs) <= failures:
        return f"completed before its {failures} failing attempts: {shape}"
    if len(runs) > retries + 1:
        return f"{len(runs)} runs for {retries} retries: {shape}"
    if not all(_retried(run) for run in runs[:-1]):
        return f"a run before the completed one was not retried: {shape}"
    if any(run.get("reasonResolved") == "intermittent-task" for run in runs[failures:]):
        return f"an attempt after the first {failures} failed: {shape}"
    return ""


def _gives_up_problem(runs: list[dict[str, Any]], retries: int) -> str:
    """Why a ``gives-up`` task's runs are wrong, or ``""``."""
    shape = [f"{run.get('state')}/{run.get('reasonResolved')}" for run in runs]
    if len(runs) != retries + 1:
        return f"{len(runs)} runs, not retries + 1 = {retries + 1}: {shape}"
    if not all(_retried(run) for run in runs[:-1]):
        return f"a run before the last was not retried: {shape}"
    if runs[-1].get("state") == "completed":
        return f"completed although every attempt fails: {shape}"
    if runs[-1].get("state") == "exception" and not _retried(runs[-1]):
        return f"its last run ended {shape[-1]}: {shape}"
    return ""


def merge(*parts: Findings) -> Findings:
    merged = Findings()
    for part in parts:
        merged.violations += part.violations
        for name, value in part.counts.items():
            merged.count(name, value)
    return merged
