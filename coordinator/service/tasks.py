"""TaskService: every task operation the API handlers and the resolvers perform.

It composes the write path (:mod:`coordinator.service.transitions`), hint publishing
(:mod:`coordinator.service.hints`) and dependencies (:mod:`coordinator.service.dependencies`)
over one store, and is the only way the layers above reach the store: reads, listings, counts
and the resolvers' scans included. Failures are domain errors
(:mod:`coordinator.domain.errors`), never HTTP ones.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coordinator.domain import definitions, lifecycle
from coordinator.domain.artifacts import InlineArtifact, InlineRow, stored_inline
from coordinator.domain.errors import Conflict, DomainError, InputError, NotFound
from coordinator.domain.events import QueueEvent, group_event, running_event, task_events
from coordinator.domain.lifecycle import Timing, TransitionResult
from coordinator.domain.listings import Page, PendingCount, RunCounts
from coordinator.domain.progress import RunProgress, checked_progress
from coordinator.domain.records import Run, TaskRecord, record_from_definition, to_iso
from coordinator.domain.task_groups import TaskGroup
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.background import Background
from coordinator.service.clock import Clock, wall_clock
from coordinator.service.dependencies import Dependencies
from coordinator.service.gather import bounded
from coordinator.service.hints import HintPublisher, HintSink
from coordinator.service.metrics import ServiceMetrics
from coordinator.service.run_watches import RunWatches
from coordinator.service.transitions import Change, Transition, Transitions, log_changes
from coordinator.store.base import Store
from coordinator.store.contract.dispatch import PendingAnnouncement, PickLevels

if TYPE_CHECKING:
    from coordinator.service.claim_work import Taker

log = logging.getLogger(__name__)

Permit = Callable[[TaskRecord, int], None]
"""A batch caller's right to act on run ``runId`` of a task as stored: raises
:class:`~coordinator.domain.errors.Forbidden` (or another domain error) when it may not."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunReport:
    """How a worker resolves one run: reportCompleted, reportFailed or reportException.

    :param resolution: ``completed``, ``failed`` or ``exception`` (the wire field ``resolution``).
    :param reason: the reasonResolved: ``completed``, ``failed`` or the exception reason.
    :param retry_after_ms: reportException's ``retryAfter`` (intermittent-task only): the
        retry run becomes visible after it instead of after the task's retry delay.
    :param artifacts: small artifacts of the run (its log) stored with the report, so they
        exist exactly when it is accepted (resolveRuns only).
    """

    task_id: str
    run_id: int
    resolution: str
    reason: str
    retry_after_ms: int | None = None
    artifacts: Sequence[InlineArtifact] = ()


GROUP_PAGE = 200
"""How many of a group's tasks cancelTaskGroup and changeTaskGroupPriority read at a time."""

BATCH_EFFECTS_AT_ONCE = 64
"""How many of a createTasks batch's hint puts are in flight at once."""

KEY_CLAIM_ATTEMPTS = 8
"""How often a create retries claiming a deduplication key that moved under it (each retry
means another create or the expiry sweep won a race on that key)."""


class TaskService:
    """Task operations shared by the API handlers and the resolvers.

    :param store: the task store (the truth).
    :param hints: where hints are put; ``None`` when running without Azure.
    :param timing: claim timeout and retry delay for the transitions.
    :param max_deadline_ms: how far in the future a deadline may be (ms).
    :param clock: epoch-milliseconds clock; tests inject their own.
    :param metrics: the observer of runs resolved and hints put (the app's registry).
    :param publish_events: write the Pulse messages of every change to the store's outbox
        (docs/events.md).
    """

    def __init__(
        self,
        *,
        store: Store,
        hints: HintSink | None,
        timing: Timing,
        max_deadline_ms: int,
        clock: Clock = wall_clock,
        metrics: ServiceMetrics | None = None,
        publish_events: bool = False,
    ) -> None:
        self._store = store
        self.metrics = metrics if metrics is not None else ServiceMetrics()
        self.timing = timing
        self.claim_timeouts: dict[str, Timing] = {}
        """The timing of the task queues (by taskQueueId) whose default claim timeout differs
        from the coordinator's: :class:`~coordinator.service.queue_controls.QueueControlService`
        keeps it, from the same copy of the controls its claim gate reads."""
        self.max_deadline_ms = max_deadline_ms
        self.clock = clock
        self._background = Background()
        self.hints = HintPublisher(
            store=store,
            sink=hints,
            clock=clock,
            background=self._background,
            metrics=self.metrics,
        )
        self.run_watches = RunWatches(read=store.runs_of)
        self.transitions = Transitions(
            store=store,
            on_runs_changed=self.run_watches.runs_changed,
            hints=self.hints,
            clock=clock,
            background=self._background,
            on_resolved=lambda task_id: self.dependencies.resolve_dependents(task_id),
            metrics=self.metrics,
            publish_events=publish_events,
        )
        self.dependencies = Dependencies(store=store, transitions=self.transitions)
        self.hand_over: Callable[[TaskQueue, int], list[Taker]] | None = None
        """Under store dispatch, the claimWork calls waiting on a task queue that createTasks
        claims new runs for in its own write
        (:meth:`~coordinator.service.claim_work.ClaimWork.hand_over`)."""

    async def drain(self) -> None:
        """Write the hint confirmations waiting for their delay, and wait for background
        effects started so far (shutdown, tests)."""
        await self.hints.flush()
        await self._background.drain()

    async def apply(
        self,
        task_id: str,
        transition: Transition,
        *,
        action: str,
        read: TaskRecord | None = None,
    ) -> TransitionResult:
        """:meth:`Transitions.apply <coordinator.service.transitions.Transitions.apply>`."""
        return await self.transitions.apply(task_id, transition, action=action, read=read)

    async def apply_each(self, work: Iterable[tuple[str, Transition]], *, action: str) -> int:
        """Apply transitions to several tasks (resolver passes); returns how many changed."""
        return await self.transitions.apply_each(work, action=action)

    # --- reads ----------------------------------------------------------------------------

    async def get(self, task_id: str) -> TaskRecord:
        """:raises NotFound: no such task."""
        record = await self._store.get(task_id)
        if record is None:
            raise NotFound(f"task {task_id} does not exist")
        return record

    async def task_group(
        self, task_group_id: str, *, limit: int, after: str | None
    ) -> Page[TaskRecord, str]:
        return await self._store.task_group(task_group_id, limit=limit, after=after)

    async def dependents(
        self, task_id: str, *, limit: int, after: str | None
    ) -> Page[TaskRecord, str]:
        """:raises NotFound: no such task."""
        await self.get(task_id)
        return await self._store.dependents(task_id, limit=limit, after=after)

    async def check_store(self) -> None:
        """Raise whatever the store raises unless it answers a read."""
        await self._store.get("-")

    async def get_many(self, task_ids: Sequence[str]) -> dict[str, TaskRecord]:
        """The tasks that exist among ``task_ids``."""
        return await self._store.get_many(task_ids)

    async def get_task_group(self, task_group_id: str) -> TaskGroup:
        """:raises NotFound: no task ever joined the group (or all expired)."""
        group = await self._store.get_task_group(task_group_id)
        if group is None:
            raise NotFound(f"task group {task_group_id} does not exist")
        return group

    async def run_counts(self, provisioner_id: str, worker_type: str) -> RunCounts:
        return await self._store.run_counts(provisioner_id, worker_type, now=self.clock())

    async def progress(self, task_id: str) -> list[RunProgress]:
        """The last progress report of each of the task's runs that sent one.

        :raises NotFound: no such task."""
        await self.get(task_id)
        return await self._store.run_progress(task_id)

    # --- workers --------------------------------------------------------------------------

    async def report_progress(
        self, task_id: str, run_id: int, *, fraction: object, message: object
    ) -> RunProgress:
        """reportProgress: keep how far the running run ``run_id`` is.

        :raises InputError: a fraction outside 0 to 1, or a message too long.
        :raises NotFound: no such task or run.
        :raises Conflict: the run is not running.
        """
        fraction, message = checked_progress(fraction, message)
        record = await self.get(task_id)
        if not 0 <= run_id < len(record.runs):
            raise NotFound(f"task {task_id} has no run {run_id}")
        progress = RunProgress(
            task_id=task_id,
            run_id=run_id,
            fraction=fraction,
            message=message,
            updated=self.clock(),
        )
        state = record.runs[run_id].state
        if state != "running":
            raise Conflict(f"run {run_id} of task {task_id} is not running (it is {state})")
        if not await self._store.set_run_progress(progress):
            raise Conflict(f"run {run_id} of task {task_id} is not running (it just ended)")
        return progress

    # --- producers ------------------------------------------------------------------------

    async def create_task(
        self, task_id: str, body: Mapping[str, Any], *, traceparent: str | None = None
    ) -> TaskRecord:
        """createTask: validate, store and (without dependencies) schedule a new task.

        Idempotent: the same definition again returns the current record; a different one is
        a conflict. With a deduplicationKey held by another task (unresolved, or resolved
        less than its deduplicationTtl ago), nothing is created and that task's record is
        returned.

        :param traceparent: the span that creates the task, stored with it (not part of the
            definition, so a retried create under another span is still the same task).

        :raises InputError: the definition is not acceptable.
        :raises Conflict: the taskId exists with a different definition.
        """
        now = self.clock()
        definition = definitions.normalise(
            task_id, body, now=now, max_deadline_ms=self.max_deadline_ms
        )
        record = record_from_definition(task_id, definition, traceparent=traceparent)
        return await self._create(record, now=now)

    async def _create(self, record: TaskRecord, *, now: int) -> TaskRecord:
        """Check, store and schedule one new task: :meth:`create_task` after normalising."""
        if record.dependencies:
            await self.dependencies.check(record)
        created = self.transitions.to_store(lifecycle.create(record, now=now))
        key = definitions.deduplication_key(record.definition)
        # a keyed task's key is taken in a write of its own: no waiting call is handed it
        handed = {}
        if key is None:
            handed = self._claimed_for_waiting_calls({record.task_id: created}, now=now)
        written = handed[record.task_id][0] if handed else created
        stored = None
        try:
            events = self._creation_events(created.record, written.record)
            if key is None:
                stored = await self._store.insert(written.record, events=events)
            else:
                stored, answer = await self._insert_keyed(created.record, key, events=events)
                if answer is not None:
                    return answer
        finally:
            inserted = set() if stored is None else {record.task_id}
            self._give(handed, {record.task_id: created}, inserted)
        if stored is None:
            result = await self._not_inserted(record, await self._store.get(record.task_id))
            if isinstance(result, Conflict):
                raise result
            return result
        log_changes("created", [(stored.task_id, created.record.runs)])
        if handed:
            log_changes("claimed", [(stored.task_id, stored.runs)])
        await self.transitions.effects(written)
        if stored.dependencies:
            # The edges are stored before the dependencies' states are read, so a dependency
            # resolving concurrently either sees this task among its dependents or is seen
            # resolved here: the task cannot be missed.
            scheduled = await self.dependencies.schedule_if_satisfied(stored)
            return scheduled.record
        return stored

    async def create_tasks(
        self, items: Sequence[tuple[str, Mapping[str, Any]]], *, traceparent: str | None = None
    ) -> list[TaskRecord | DomainError]:
        """createTasks: each item as :meth:`create_task` would, all new records written in one
        store transaction, their hints put concurrently; but those with a deduplicationKey
        each in its own, after the others.

        :param items: ``(taskId, body)`` pairs; a taskId may repeat with the same definition.
        :param traceparent: the span that creates them, stored with each.
        :returns: per item, in order, the task's record or why it was refused (an
            :class:`InputError`, or a :class:`Conflict` with an existing different task).
        :raises InputError: the batch repeats a taskId with different definitions; nothing
            is written.
        """
        now = self.clock()
        results: list[TaskRecord | DomainError | None] = [None] * len(items)
        slots: dict[str, list[int]] = {}
        records: dict[str, TaskRecord] = {}
        for index, (task_id, body) in enumerate(items):
            try:
                definition = definitions.normalise(
                    task_id, body, now=now, max_deadline_ms=self.max_deadline_ms
                )
            except InputError as error:
                results[index] = error
                continue
            if task_id in records:
                if not definitions.definitions_match(records[task_id].definition, definition):
                    raise InputError(
                        f"tasks[{index}]: taskId {task_id} appears earlier in the batch with "
                        "a different definition"
                    )
                slots[task_id].append(index)
                continue
            records[task_id] = record_from_definition(task_id, definition, traceparent=traceparent)
            slots[task_id] = [index]
        keyed = {t: r for t, r in records.items() if definitions.deduplication_key(r.definition)}
        answers = await self._insert_batch(
            {t: r for t, r in records.items() if t not in keyed}, now=now
        )
        # after the batch, so a keyed task may depend on the batch's other tasks; one at a
        # time, so two of them with one key deduplicate to the first
        for task_id, record in keyed.items():
            try:
                answers[task_id] = await self._create(record, now=now)
            except (InputError, Conflict) as error:
                answers[task_id] = error
        for task_id, answer in answers.items():
            for index in slots[task_id]:
                results[index] = answer
        return [result for result in results if result is not None]

    async def _insert_keyed(
        self, record: TaskRecord, key: str, *, events: Sequence[QueueEvent]
    ) -> tuple[TaskRecord | None, TaskRecord | None]:
        """Insert ``record`` claiming its deduplication key: ``(stored, None)`` as
        :meth:`Store.insert <coordinator.store.contract.tasks.TaskStore.insert>` answers, or
        ``(None, holder)`` when another task still holds the key (createTask's answer).

        The key is taken over from a holder that no longer holds it by compare-and-set on that
        holder, so of concurrent creates exactly one takes it and the others read the winner.
        """
        holder: str | None = None
        for _ in range(KEY_CLAIM_ATTEMPTS):
            outcome = await self._store.insert_keyed(record, key, holder=holder, events=events)
            if outcome.claimed:
                return outcome.stored, None
            if outcome.holder is None or outcome.holder == record.task_id:
                # a free key, or this very task's: createTask's idempotency decides
                holder = None
                if outcome.holder == record.task_id:
                    return None, None
                continue
            found = await self._store.get_many([outcome.holder, record.task_id])
            if record.task_id in found:
                return None, None
            existing = found.get(outcome.holder)
            if existing is not None and definitions.holds_key(existing, now=self.clock()):
                log.info(
                    "task deduplicated taskId=%s existingTaskId=%s taskQueueId=%s",
                    record.task_id,
                    existing.task_id,
                    record.task_queue_id,
                )
                return None, existing
            holder = outcome.holder
        raise Conflict(
            f"deduplicationKey {key!r} changed hands {KEY_CLAIM_ATTEMPTS} times while task "
            f"{record.task_id} was being created; try again"
        )

    async def _not_inserted(
        self, record: TaskRecord, existing: TaskRecord | None
    ) -> TaskRecord | Conflict:
        """Why the store did not insert ``record``: the same task exists (createTask's
        idempotent answer), or a conflict: another definition under its id, or a group that
        refuses it."""
        if existing is not None:
            if definitions.definitions_match(existing.definition, record.definition):
                return existing
            return Conflict(
                f"task {record.task_id} already exists with a different definition; taskIds "
                "must be unique: generate a new slugid"
            )
        group = await self._store.get_task_group(record.task_group_id)
        if group is not None and group.sealed is not None:
            return Conflict(
                f"task group {group.task_group_id} is sealed since {to_iso(group.sealed)}: "
                "no task may join it"
            )
        if group is not None and group.scheduler_id != record.scheduler_id:
            return Conflict(
                f"task group {group.task_group_id} belongs to schedulerId {group.scheduler_id}, "
                f"not {record.scheduler_id}"
            )
        # the group changed again in between (a task of it expired and the group with it)
        return Conflict(f"task {record.task_id} could not be created; try again")

    async def _insert_batch(
        self, records: dict[str, TaskRecord], *, now: int
    ) -> dict[str, TaskRecord | DomainError]:
        """Check dependencies, write the new records in one transaction and carry out their
        effects; what each taskId of ``records`` ends as."""
        done: dict[str, TaskRecord | DomainError] = {}
        outside = {dep for r in records.values() for dep in r.dependencies if dep not in records}
        known = {**await self._store.get_many(sorted(outside)), **records}
        for task_id, record in list(records.items()):
            try:
                definitions.check_dependencies(record, known)
            except InputError as error:
                done[task_id] = error
                del records[task_id]
        created = {
            task_id: self.transitions.to_store(lifecycle.create(r, now=now))
            for task_id, r in records.items()
        }
        handed = self._claimed_for_waiting_calls(created, now=now)
        written = {**created, **{task_id: result for task_id, (result, _) in handed.items()}}
        inserted: set[str] = set()
        try:
            events = None
            if self.transitions.publish_events:
                events = {
                    task_id: self._creation_events(created[task_id].record, result.record)
                    for task_id, result in written.items()
                }
            inserted = await self._store.insert_many(
                [o.record for o in written.values()], events=events
            )
        finally:
            self._give(handed, created, inserted)
        existing = await self._store.get_many([t for t in created if t not in inserted])
        for task_id in created.keys() - inserted:
            done[task_id] = await self._not_inserted(records[task_id], existing.get(task_id))
        stored = {
            task_id: dataclasses.replace(
                written[task_id], record=written[task_id].record.replace(version=1)
            )
            for task_id in inserted
        }
        log_changes("created", [(task_id, created[task_id].record.runs) for task_id in stored])
        log_changes(
            "claimed",
            [
                (task_id, result.record.runs)
                for task_id, result in stored.items()
                if task_id in handed
            ],
        )
        await bounded(
            (
                self.transitions.effects(result)
                for result in stored.values()
                if self.transitions.has_effects(result)
            ),
            at_once=BATCH_EFFECTS_AT_ONCE,
        )
        for task_id, result in stored.items():
            record = result.record
            if record.dependencies:
                record = (await self.dependencies.schedule_if_satisfied(record)).record
            done[task_id] = record
        return done

    def _claimed_for_waiting_calls(
        self, created: Mapping[str, TransitionResult], *, now: int
    ) -> dict[str, tuple[TransitionResult, Taker]]:
        """The new runs pending now that claimWork calls waiting on their queues take
        (:attr:`hand_over`), each claimed for its call, highest priority first: a run a
        worker waits for is claimed in the write that creates it, neither announced nor
        claimed by a write of its own."""
        if self.hand_over is None:
            return {}
        pending: dict[TaskQueue, list[TaskRecord]] = {}
        for result in created.values():
            record = result.record
            if record.visible_at is not None and record.visible_at <= now:
                task_queue = TaskQueue(record.provisioner_id, record.worker_type)
                pending.setdefault(task_queue, []).append(record)
        handed: dict[str, tuple[TransitionResult, Taker]] = {}
        takers: list[Taker] = []
        try:
            for task_queue, waiting in pending.items():
                queue_takers = self.hand_over(task_queue, len(waiting))
                takers += queue_takers
                waiting.sort(key=lambda record: -(record.pending_priority or 0))
                runs = iter(waiting)
                for taker in queue_takers:
                    claim = self._claiming(
                        0, worker_group=taker.worker_group, worker_id=taker.worker_id
                    )
                    for _, record in zip(range(taker.count), runs, strict=False):
                        result = self.transitions.to_store(claim(record, now))
                        handed[record.task_id] = (result, taker)
        except BaseException:
            for taker in takers:  # taken out of the wait: each must be answered
                taker.give([])
            raise
        return handed

    def _creation_events(self, created: TaskRecord, written: TaskRecord) -> list[QueueEvent]:
        """The messages of a new task as it is written: its creation's, then its claim's
        when it is claimed in the same write."""
        if not self.transitions.publish_events:
            return []
        events = task_events(None, created)
        if written is not created:
            events += task_events(created, written)
        return events

    def _give(
        self,
        handed: Mapping[str, tuple[TransitionResult, Taker]],
        created: Mapping[str, TransitionResult],
        inserted: set[str],
    ) -> None:
        """Answer each waiting call that was handed runs with those the write stored
        (counted as claims); one handed none asks the store again."""
        claims: dict[Taker, list[TaskRecord]] = {taker: [] for _, taker in handed.values()}
        try:
            for task_id, (result, taker) in handed.items():
                if task_id in inserted:
                    stored = result.record.replace(version=1)
                    claims[taker].append(stored)
                    self.transitions.written(created[task_id].record, result, stored)
        finally:  # every call taken out of the wait is answered, whatever happens here
            for taker, given in claims.items():
                taker.give(given)

    async def _from_read(
        self, record: TaskRecord, step: Callable[..., TransitionResult], action: str
    ) -> TaskRecord:
        """Apply a ``step(record, now=...)`` transition, starting from the caller's read."""
        result = await self.apply(
            record.task_id, lambda r, now: step(r, now=now), action=action, read=record
        )
        return result.record

    async def schedule(self, record: TaskRecord) -> TaskRecord:
        """scheduleTask."""
        return await self._from_read(record, lifecycle.schedule, "scheduled")

    async def rerun(self, record: TaskRecord) -> TaskRecord:
        """rerunTask."""
        return await self._from_read(record, lifecycle.rerun, "rerun")

    async def cancel(self, record: TaskRecord) -> TaskRecord:
        """cancelTask."""
        return await self._from_read(record, lifecycle.cancel, "canceled")

    async def change_priority(self, record: TaskRecord, priority: str) -> TaskRecord:
        """changeTaskPriority."""
        result = await self.apply(
            record.task_id,
            lambda r, now: lifecycle.change_priority(r, priority=priority, now=now),
            action="priority-changed",
            read=record,
        )
        return result.record

    # --- task groups ----------------------------------------------------------------------

    async def seal_task_group(self, task_group_id: str) -> TaskGroup:
        """sealTaskGroup: from now on no task may join the group (idempotent).

        :raises NotFound: no such group.
        """
        group = await self._store.seal_task_group(
            task_group_id, now=self.clock(), announce=self.transitions.publish_events
        )
        if group is None:
            raise NotFound(f"task group {task_group_id} does not exist")
        return group

    async def cancel_task_group(self, group: TaskGroup) -> list[str]:
        """cancelTaskGroup: cancel every unresolved task of a sealed group; the ids this call
        cancelled. Tasks past their deadline are left to the deadline resolver.

        :raises Conflict: the group is not sealed (so tasks could still join it).
        """
        if group.sealed is None:
            raise Conflict(
                f"task group {group.task_group_id} is not sealed: seal it first, so that no "
                "task joins it while it is being cancelled"
            )
        return await self._each_unresolved(
            group.task_group_id, lambda r, now: lifecycle.cancel(r, now=now), "canceled"
        )

    async def change_task_group_priority(self, group: TaskGroup, priority: str) -> list[str]:
        """changeTaskGroupPriority: every unresolved task of the group; the ids changed."""
        changed: list[str] = []

        def closing(count: int) -> list[QueueEvent]:
            # tasksAffected counts the earlier pages' tasks and those of the last write
            summary = {"newPriority": priority, "tasksAffected": len(changed) + count}
            return [group_event("task-group-priority-changed", group, **summary)]

        def transition(record: TaskRecord, now: int) -> TransitionResult:
            return lifecycle.change_priority(record, priority=priority, now=now)

        after: str | None = None
        while True:
            # a page at a time, each one compare-and-set of its tasks (Taskcluster changes
            # them in bounded batches too); the summary rides with the last page's write
            page = await self._store.unresolved_in_group(
                group.task_group_id, limit=GROUP_PAGE, after=after
            )
            last = len(page) < GROUP_PAGE
            results = await self.transitions.apply_many(
                [Change(task_id=t, transition=transition, action="priority-changed") for t in page],
                closing=closing if last else None,
            )
            changed += [
                task_id
                for task_id, result in zip(page, results, strict=True)
                if isinstance(result, TransitionResult) and result.changed
            ]
            if last:
                return changed
            after = page[-1]

    async def task_group_size(self, task_group_id: str) -> int:
        return await self._store.task_group_size(task_group_id)

    async def _each_unresolved(
        self, task_group_id: str, transition: Transition, action: str
    ) -> list[str]:
        """Apply ``transition`` to the group's unresolved tasks, a page at a time (each one
        its own compare-and-set, so concurrent claims and replicas are safe); the ids it
        changed. A task that refuses (past its deadline, resolved meanwhile) is skipped."""
        changed: list[str] = []
        after: str | None = None
        while True:
            page = await self._store.unresolved_in_group(
                task_group_id, limit=GROUP_PAGE, after=after
            )
            for task_id in page:
                try:
                    if (await self.apply(task_id, transition, action=action)).changed:
                        changed.append(task_id)
                except (NotFound, Conflict):
                    continue
            if len(page) < GROUP_PAGE:
                return changed
            after = page[-1]

    # --- workers --------------------------------------------------------------------------

    def _claiming(self, run_id: int, *, worker_group: str, worker_id: str) -> Transition:
        return lambda r, now: lifecycle.claim(
            r,
            run_id=run_id,
            worker_group=worker_group,
            worker_id=worker_id,
            now=now,
            timing=self._timing_of(r),
        )

    def _reclaiming(self, run_id: int) -> Transition:
        return lambda r, now: lifecycle.reclaim(
            r, run_id=run_id, now=now, timing=self._timing_of(r)
        )

    def _timing_of(self, record: TaskRecord) -> Timing:
        """The timing of a claim of the task: its queue's default claim timeout, if any."""
        if not self.claim_timeouts:  # no queue has one: no lookup
            return self.timing
        return self.claim_timeouts.get(record.task_queue_id, self.timing)

    def _reporting(self, report: RunReport) -> Transition:
        return lambda r, now: lifecycle.report(
            r,
            run_id=report.run_id,
            state=report.resolution,
            reason=report.reason,
            now=now,
            timing=self.timing,
            retry_after_ms=report.retry_after_ms,
        )

    async def claim(
        self,
        task_id: str,
        run_id: int,
        *,
        worker_group: str,
        worker_id: str,
        read: TaskRecord | None = None,
        permit: Permit | None = None,
    ) -> TaskRecord:
        """claimTask; ``permit`` may refuse the claim on the task as read (each read, should
        a lost race read it again)."""
        transition = self._claiming(run_id, worker_group=worker_group, worker_id=worker_id)
        if permit is not None:
            transition = _permitted(permit, run_id, transition)
        result = await self.apply(task_id, transition, action="claimed", read=read)
        if not result.changed and self.transitions.publish_events:
            # the same worker's claim again: Taskcluster publishes task-running again too
            await self._store.append_events([running_event(result.record, run_id)])
        return result.record

    async def claim_pending(
        self,
        task_queue: TaskQueue,
        *,
        worker_group: str,
        worker_id: str,
        limit: int,
        pick: PickLevels | None = None,
        max_per_key: int | None = None,
    ) -> list[TaskRecord]:
        """Store dispatch's claim: up to ``limit`` of the queue's claimable runs for the
        worker, the highest priority and then the earliest visible first, or as many of each
        priority as ``pick`` draws; with ``max_per_key`` (the caller holds the queue's claim
        lock), the concurrency keys in turn within each priority, at most ``max_per_key`` runs
        of a key running; ``[]`` when none."""

        def claiming(record: TaskRecord, now: int) -> TransitionResult:
            run_id = len(record.runs) - 1
            return self._claiming(run_id, worker_group=worker_group, worker_id=worker_id)(
                record, now
            )

        return await self.transitions.take_pending(
            task_queue, claiming, limit=limit, action="claimed", pick=pick, max_per_key=max_per_key
        )

    async def announce_pending(self, announcements: Sequence[PendingAnnouncement]) -> None:
        """Tell the coordinators sharing the store (replicas) that these task queues have runs
        made pending (store dispatch's wake-up across replicas)."""
        await self._store.announce_pending(announcements)

    async def listen_pending(self, on_pending: Callable[[PendingAnnouncement], None]) -> None:
        """Hear every coordinator's :meth:`announce_pending` on this store from now on."""
        await self._store.listen_pending(on_pending)

    async def reclaim(self, task_id: str, run_id: int) -> TaskRecord:
        result = await self.apply(task_id, self._reclaiming(run_id), action="reclaimed")
        return result.record

    async def report(
        self,
        task_id: str,
        run_id: int,
        *,
        resolution: str,
        reason: str,
        retry_after_ms: int | None = None,
    ) -> TaskRecord:
        report = RunReport(
            task_id=task_id,
            run_id=run_id,
            resolution=resolution,
            reason=reason,
            retry_after_ms=retry_after_ms,
        )
        result = await self.apply(task_id, self._reporting(report), action=f"reported-{resolution}")
        return result.record

    async def claim_runs(
        self,
        runs: Sequence[tuple[str, int]],
        *,
        worker_group: str,
        worker_id: str,
        permit: Permit,
    ) -> list[TaskRecord | DomainError]:
        """claimRuns: :meth:`claim` for up to a batch of ``(taskId, runId)`` at once, one store
        read and one compare-and-set per round for all of them.

        :returns: per run, in order, the record claimed or why not.
        """
        return await self._each_run(
            [
                (
                    task_id,
                    run_id,
                    self._claiming(run_id, worker_group=worker_group, worker_id=worker_id),
                    "claimed",
                )
                for task_id, run_id in runs
            ],
            permit,
        )

    async def reclaim_runs(
        self, runs: Sequence[tuple[str, int]], *, permit: Permit
    ) -> list[TaskRecord | DomainError]:
        """reclaimRuns: :meth:`reclaim` for a batch of ``(taskId, runId)``, as claimRuns."""
        return await self._each_run(
            [(task_id, run_id, self._reclaiming(run_id), "reclaimed") for task_id, run_id in runs],
            permit,
        )

    async def resolve_runs(
        self, reports: Sequence[RunReport], *, permit: Permit
    ) -> list[TaskRecord | DomainError]:
        """resolveRuns: :meth:`report` for a batch of reports, as claimRuns, each report's
        artifacts written with it."""
        return await self._each_run(
            [
                (r.task_id, r.run_id, self._reporting(r), f"reported-{r.resolution}")
                for r in reports
            ],
            permit,
            attach=[_attaching(r) for r in reports],
        )

    async def _each_run(
        self,
        items: Sequence[tuple[str, int, Transition, str]],
        permit: Permit,
        *,
        attach: Sequence[Callable[[TaskRecord, int], Sequence[InlineRow]] | None] | None = None,
    ) -> list[TaskRecord | DomainError]:
        """Apply each item's transition to its run, once ``permit`` allows it on the task as
        read (checked again on every re-read, so a lost race cannot skip it); ``attach``, per
        item, its :attr:`Change.attach <coordinator.service.transitions.Change.attach>`."""

        results = await self.transitions.apply_many(
            [
                Change(
                    task_id=task_id,
                    transition=_permitted(permit, run_id, transition),
                    action=action,
                    attach=None if attach is None else attach[index],
                )
                for index, (task_id, run_id, transition, action) in enumerate(items)
            ]
        )
        return [o.record if isinstance(o, TransitionResult) else o for o in results]

    async def watch_runs(
        self,
        runs: Sequence[tuple[str, int]],
        *,
        permit: Permit,
        timeout_s: float,
        disconnected: Callable[[], bool],
    ) -> list[tuple[str, int, Run | DomainError]]:
        """watchRuns: wait up to ``timeout_s`` for any of ``runs`` to be no longer running
        (:mod:`coordinator.service.run_watches`).

        :param permit: the caller's right to watch a run, as reclaimRuns checks it.
        :param disconnected: true once the client went away; the wait then ends.
        :returns: in request order, each run no longer running (as stored) or refused (why:
            :class:`NotFound`, or what ``permit`` raised); none when all of them still run
            at the end of the wait.
        """
        async with self.run_watches.watching(runs, disconnected=disconnected) as watch:
            records = await self._store.get_many(list(dict.fromkeys(t for t, _ in runs)))
            refused: dict[tuple[str, int], DomainError] = {}
            for task_id, run_id in runs:
                record = records.get(task_id)
                try:
                    if record is None:
                        raise NotFound(f"task {task_id} does not exist")
                    if not 0 <= run_id < len(record.runs):
                        raise NotFound(f"task {task_id} has no run {run_id}")
                    permit(record, run_id)
                except DomainError as error:
                    refused[(task_id, run_id)] = error
                    continue
                run = record.runs[run_id]
                if run.state != "running":
                    watch.stop((task_id, run_id), run)
            stopped = await watch.stopped(0.0 if refused else timeout_s)
        answered: dict[tuple[str, int], Run | DomainError] = {**stopped, **refused}
        return [(t, r, answered[(t, r)]) for t, r in runs if (t, r) in answered]

    # --- resolvers ------------------------------------------------------------------------

    async def expired_claims(self, limit: int) -> list[tuple[str, int]]:
        """``(taskId, takenUntil)`` of running runs whose claim expired, oldest first."""
        return await self._store.expired_claims(self.clock(), limit)

    async def past_deadlines(self, before: int, limit: int) -> list[str]:
        """Unresolved tasks whose deadline is before ``before``."""
        return await self._store.past_deadlines(before, limit)

    async def tasks_to_notify(self, limit: int) -> list[str]:
        """Resolved tasks whose dependents still need re-examining."""
        return await self._store.tasks_to_notify(limit)

    async def resolve_dependents(self, task_id: str) -> int:
        return await self.dependencies.resolve_dependents(task_id)

    async def hints_due(self, before: int, limit: int) -> list[str]:
        """Tasks whose last run's hint was due before ``before`` and is still unconfirmed."""
        return await self._store.hints_due(before, limit)

    async def pending_by_task_queue(self) -> list[PendingCount]:
        """How many pending runs each task queue has (as many hints should be in Azure)."""
        return await self._store.pending_by_task_queue()

    async def oldest_pending(self, task_queue: TaskQueue, *, limit: int) -> list[TaskRecord]:
        """Up to ``limit`` tasks of the queue whose last run is pending, the earliest
        claimable first."""
        return (await self._store.pending_runs(task_queue, limit=limit, after=None)).items


def _attaching(report: RunReport) -> Callable[[TaskRecord, int], Sequence[InlineRow]] | None:
    """What writing ``report`` stores beside it: its artifacts, in its run."""
    if not report.artifacts:
        return None
    return lambda record, now: [
        stored_inline(record, report.run_id, inline, now=now) for inline in report.artifacts
    ]


def _permitted(permit: Permit, run_id: int, transition: Transition) -> Transition:
    """``transition``, once ``permit`` allows it on the task as read."""

    def apply(record: TaskRecord, now: int) -> TransitionResult:
        permit(record, run_id)
        return transition(record, now)

    return apply
