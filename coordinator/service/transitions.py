"""The one write path: read a record, apply a pure transition, compare-and-set, then effects.

Every change to a task goes through :meth:`Transitions.apply`. On a lost compare-and-set race
it reads again and re-applies the same transition, so exactly one of any number of concurrent
callers (API requests, resolver loops, other replicas) wins and the rest see the winner's
state. A change to a task whose run a worker holds starts from the record this process last
wrote (:mod:`coordinator.service.held_records`) instead of a read, where it has one; a kept
record only ever leads to a write, which the compare-and-set checks: a transition that refuses
it, or changes nothing in it, is applied again to a fresh read before anyone is answered.

After a successful write the result's effects follow: the hint of a newly pending run is
published, and a newly resolved task's dependents are re-examined. Both effects are also
recorded in the record (``hint_needed``, ``notify_dependents``), so the resolvers finish them
if this process dies first. A completion's index entries (its ``index.*`` routes) are no effect:
they are written by the completing compare-and-set itself, in its transaction, as are a
report's inline artifacts (:attr:`Change.attach`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from coordinator.domain.artifacts import InlineRow
from coordinator.domain.errors import Conflict, DomainError, InputError, NotFound
from coordinator.domain.events import QueueEvent, task_events
from coordinator.domain.index import IndexedTask, completion_entries
from coordinator.domain.lifecycle import TransitionResult
from coordinator.domain.records import Run, TaskRecord, changed_runs
from coordinator.domain.task_queues import TaskQueue
from coordinator.service.background import Background
from coordinator.service.clock import Clock
from coordinator.service.held_records import HeldRecords
from coordinator.service.hints import HintPublisher
from coordinator.service.metrics import ServiceMetrics
from coordinator.store.base import Store
from coordinator.store.contract.dispatch import PickLevels

log = logging.getLogger(__name__)

Transition = Callable[[TaskRecord, int], TransitionResult]
"""A lifecycle transition with its parameters bound: ``(record, now) -> TransitionResult``."""

MAX_CAS_ATTEMPTS = 25

Closing = Callable[[int], Sequence[QueueEvent]]
"""The messages that close a batch of changes, given how many tasks it changed
(task-group-priority-changed and its ``tasksAffected``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """One item of :meth:`Transitions.apply_many`: a transition for a task.

    :param action: what the transition does, for the log line of a change.
    :param attach: the inline artifacts (a report's) written with the record if its write
        wins, made of the record as written and the time; ``None`` for none.
    """

    task_id: str
    transition: Transition
    action: str
    attach: Callable[[TaskRecord, int], Sequence[InlineRow]] | None = None


def _too_fast(task_id: str) -> Conflict:
    return Conflict(
        f"task {task_id} is changing too fast: gave up after {MAX_CAS_ATTEMPTS} attempts"
    )


def log_changes(action: str, changes: Iterable[tuple[str, Iterable[Run]]]) -> None:
    """The INFO lines operators grep for what one request's ``action`` changed (``changes``:
    each task's id and its runs whose state changed, :func:`changed_runs`): a line per state
    and reason, naming a run alone as ``taskId=… runId=…`` and several as
    ``count=… runs=<taskId>/<runId>,…`` (a reclaim changes no state and logs nothing).

    One line per batch rather than per run: at full rate the per-run lines were a tenth of the
    coordinator's CPU.
    """
    if not log.isEnabledFor(logging.INFO):
        return
    groups: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for task_id, changed in changes:
        for run in changed:
            cause = run.reason_resolved or run.reason_created
            groups.setdefault((run.state, cause), []).append((task_id, run.run_id))
    for (state, reason), runs in groups.items():
        if len(runs) == 1:
            ((task_id, run_id),) = runs
            log.info(
                "task %s taskId=%s runId=%d state=%s reason=%s",
                action,
                task_id,
                run_id,
                state,
                reason,
            )
        else:
            log.info(
                "tasks %s count=%d state=%s reason=%s runs=%s",
                action,
                len(runs),
                state,
                reason,
                ",".join(f"{task_id}/{run_id}" for task_id, run_id in runs),
            )


class Transitions:
    """Compare-and-set application of lifecycle transitions, and their effects.

    :param on_resolved: re-examines the dependents of a task that just resolved (started in
        the background; the dependency resolver finishes it after a crash).
    :param metrics: counts the runs each write resolves.
    :param publish_events: write each change's Pulse messages to the store's outbox with it
        (docs/events.md); off, no outbox row is written.
    :param on_runs_changed: told, after each write, the task's runs whose state it changed
        (the watches of running runs, :mod:`coordinator.service.run_watches`).
    """

    def __init__(
        self,
        *,
        store: Store,
        hints: HintPublisher,
        clock: Clock,
        background: Background,
        on_resolved: Callable[[str], Coroutine[Any, Any, object]],
        metrics: ServiceMetrics,
        publish_events: bool = False,
        on_runs_changed: Callable[[str, tuple[Run, ...]], None] | None = None,
    ) -> None:
        self.publish_events = publish_events
        self._on_runs_changed = on_runs_changed
        self._metrics = metrics
        self._store = store
        self._hints = hints
        self._clock = clock
        self._background = background
        self._on_resolved = on_resolved
        self.held = HeldRecords()

    async def apply(
        self,
        task_id: str,
        transition: Transition,
        *,
        action: str,
        read: TaskRecord | None = None,
    ) -> TransitionResult:
        """Apply ``transition`` to the task with compare-and-set, retrying lost races.

        :param action: what the transition does, for the log line of a change.
        :param read: the record as the caller just read it, to start from instead of reading
            again (a stale one only costs a lost compare-and-set and a re-read).
        :returns: the result, its record as now stored (``changed`` false if nothing was
            written).
        :raises NotFound: the task or run does not exist.
        :raises Conflict: the transition is not allowed in the current state.
        """
        kept = None if read is not None else self.held.take((task_id,)).get(task_id)
        for _ in range(MAX_CAS_ATTEMPTS):
            # kept is None when the caller gave its read: at most one of them is set
            from_kept = kept is not None
            record = kept or read or await self._store.get(task_id)
            read = kept = None
            if record is None:
                raise NotFound(f"task {task_id} does not exist")
            try:
                result = self.to_store(transition(record, self._clock()))
            except DomainError:
                if from_kept:
                    continue  # a refusal is decided on a fresh read
                raise
            if not result.changed:
                if from_kept:
                    continue
                return result
            events = task_events(record, result.record) if self.publish_events else ()
            index = self._index_entries(result)
            stored = await self._store.compare_and_set(
                result.record, events=events, resolving=result.resolved, index=index
            )
            if stored is not None:
                result, runs = self.written(record, result, stored, indexed=len(index))
                log_changes(action, [(task_id, runs)])
                await self.effects(result)
                return result
        raise _too_fast(task_id)

    async def apply_many(
        self, changes: Sequence[Change], *, closing: Closing | None = None
    ) -> list[TransitionResult | DomainError]:
        """Apply a transition to each of several tasks as :meth:`apply` does, reading them all
        in one store call and compare-and-setting them all in another; only the items that
        lost a race are read and tried again, so one lost item never fails the others.

        Items naming the same task are applied in successive rounds, each seeing the last.

        :param closing: with publishing on, its messages (given how many tasks the call
            changed) go to the outbox in the transaction of the call's last write (the one
            after which no item is left to try again), or alone after it if that try wrote
            nothing.

        :returns: per change, in order, its result or why it was refused
            (:class:`NotFound`, :class:`Conflict`, or the transition's own domain error).
        """
        results: list[TransitionResult | DomainError | None] = [None] * len(changes)
        rounds: list[list[int]] = []
        seen: collections.Counter[str] = collections.Counter()
        for index, change in enumerate(changes):
            round_number = seen[change.task_id]
            seen[change.task_id] += 1
            if round_number == len(rounds):
                rounds.append([])
            rounds[round_number].append(index)
        changed = 0
        if not rounds and closing is not None and self.publish_events:
            await self._store.append_events(closing(0))
        for number, indexes in enumerate(rounds):
            last = closing if number == len(rounds) - 1 and self.publish_events else None
            changed += await self._apply_round(
                changes, indexes, results, closing=last, changed_before=changed
            )
        return [result for result in results if result is not None]

    async def _apply_round(
        self,
        changes: Sequence[Change],
        indexes: list[int],
        results: list[TransitionResult | DomainError | None],
        *,
        closing: Closing | None = None,
        changed_before: int = 0,
    ) -> int:
        """:meth:`apply_many` for changes of distinct tasks, results written in place; how
        many it wrote. ``closing`` (counting ``changed_before`` too) rides with the write
        that wins every one of its records, which leaves nothing to try again."""
        changed = changed_before
        closed: list[bool] = []

        def close(written: int) -> Sequence[QueueEvent]:
            assert closing is not None
            closed.append(True)
            return closing(changed + written)

        # closing messages ride with the write that leaves nothing to try again, which an item
        # decided again on a fresh read would follow: a batch with them reads every record
        kept = {} if closing is not None else self.held.take(changes[i].task_id for i in indexes)
        for _ in range(MAX_CAS_ATTEMPTS):
            unread = [task_id for i in indexes if (task_id := changes[i].task_id) not in kept]
            records = {**kept, **await self._store.get_many(unread)}
            now = self._clock()
            writes: list[tuple[int, TaskRecord, TransitionResult]] = []
            again: list[int] = []  # decided on a kept record: to decide on a fresh read
            for index in indexes:
                change = changes[index]
                record = records.get(change.task_id)
                if record is None:
                    results[index] = NotFound(f"task {change.task_id} does not exist")
                    continue
                try:
                    result = self.to_store(change.transition(record, now))
                except DomainError as error:
                    if change.task_id in kept:
                        again.append(index)
                    else:
                        results[index] = error
                    continue
                if result.changed:
                    writes.append((index, record, result))
                elif change.task_id in kept:
                    again.append(index)
                else:
                    results[index] = result
            kept = {}
            events: dict[str, list[QueueEvent]] | None = None
            if self.publish_events:
                events = {r.task_id: task_events(r, w.record) for _, r, w in writes}
            indexing = {
                w.record.task_id: entries
                for _, _, w in writes
                if (entries := self._index_entries(w))
            }
            attached = {
                w.record.task_id: attach(w.record, now)
                for i, _, w in writes
                if (attach := changes[i].attach) is not None
            }
            stored = await self._store.compare_and_set_many(
                [w[2].record for w in writes],
                events=events,
                resolving={w.record.task_id for _, _, w in writes if w.resolved},
                closing=None if closing is None else close,
                index=indexing,
                artifacts=attached,
            )
            written: list[TransitionResult] = []
            logged: dict[str, list[tuple[str, tuple[Run, ...]]]] = {}
            indexes = again
            for (index, record, result), after in zip(writes, stored, strict=True):
                if after is None:
                    indexes.append(index)
                    continue
                won, runs = self.written(
                    record, result, after, indexed=len(indexing.get(after.task_id, ()))
                )
                written.append(won)
                results[index] = won
                logged.setdefault(changes[index].action, []).append((after.task_id, runs))
            for action, pairs in logged.items():
                log_changes(action, pairs)
            changed += len(written)
            await asyncio.gather(*(self.effects(o) for o in written if self.has_effects(o)))
            if not indexes:
                break
        else:
            for index in indexes:
                results[index] = _too_fast(changes[index].task_id)
        if closing is not None and not closed:
            await self._store.append_events(closing(changed))
        return changed - changed_before

    async def take_pending(
        self,
        task_queue: TaskQueue,
        transition: Transition,
        *,
        limit: int,
        action: str,
        pick: PickLevels | None = None,
        max_per_key: int | None = None,
    ) -> list[TaskRecord]:
        """Store dispatch: apply ``transition`` (a claim) to up to ``limit`` of the queue's
        claimable runs, the highest priority and then the earliest visible first (or as
        ``pick`` draws the priorities; with ``max_per_key``, the keys in turn within each
        priority, each within the limit), in one store
        transaction that other claimers skip (:meth:`Store.claim_pending
        <coordinator.store.base.Store.claim_pending>`); a run the transition refuses is left.

        :returns: the records written, as stored.
        """
        results: dict[str, tuple[TaskRecord, TransitionResult]] = {}

        def claim(records: Sequence[TaskRecord]) -> list[tuple[TaskRecord, list[QueueEvent]]]:
            now = self._clock()
            writes = []
            for record in records:
                try:
                    result = self.to_store(transition(record, now))
                except DomainError:
                    continue  # resolved by its deadline meanwhile, say: not claimable
                if result.changed:
                    results[record.task_id] = (record, result)
                    events = task_events(record, result.record) if self.publish_events else []
                    writes.append((result.record, events))
            return writes

        stored = await self._store.claim_pending(
            task_queue,
            now=self._clock(),
            limit=limit,
            claim=claim,
            pick=pick,
            max_per_key=max_per_key,
        )
        won = {after.task_id: self.written(*results[after.task_id], after) for after in stored}
        log_changes(action, ((task_id, runs) for task_id, (_, runs) in won.items()))
        written = [result for result, _ in won.values()]
        await asyncio.gather(*(self.effects(o) for o in written if self.has_effects(o)))
        return [result.record for result in written]

    def to_store(self, result: TransitionResult) -> TransitionResult:
        """``result`` as it is to be written: a pending run is marked as needing its hint
        only where hints are put (Azure dispatch), so that under store dispatch the hint
        keeper has nothing to look at."""
        if result.record.hint_needed and not self._hints.enabled:
            return dataclasses.replace(result, record=result.record.replace(hint_needed=False))
        return result

    def _index_entries(self, result: TransitionResult) -> list[IndexedTask]:
        """The index entries a completion writes with it; none (a warning, counted) when its
        ``extra.index`` is not what the indexer takes, as Taskcluster's indexer skips it."""
        record = result.record
        if not result.resolved or record.state != "completed":
            return []
        try:
            return completion_entries(record.task_id, record.definition)
        except InputError as error:
            log.warning(
                "task not indexed (%s) taskId=%s runId=%d",
                error,
                record.task_id,
                len(record.runs) - 1,
            )
            self._metrics.completion_not_indexed()
            return []

    def written(
        self, before: TaskRecord, result: TransitionResult, stored: TaskRecord, *, indexed: int = 0
    ) -> tuple[TransitionResult, tuple[Run, ...]]:
        """The result of a won compare-and-set, counted (with the ``indexed`` entries it
        wrote), and the runs whose state it changed (for the caller's :func:`log_changes`)."""
        self.held.written(stored)
        runs = tuple(changed_runs(before, stored))
        if runs and self._on_runs_changed is not None:
            self._on_runs_changed(stored.task_id, runs)
        self._metrics.runs_resolved(runs)
        self._metrics.runs_claimed(stored, runs)
        if indexed:
            self._metrics.completion_indexed(indexed)
        return dataclasses.replace(result, record=stored), runs

    async def apply_each(self, work: Iterable[tuple[str, Transition]], *, action: str) -> int:
        """Apply transitions to several tasks (resolver passes); returns how many changed.

        A task that vanished or refuses the transition is skipped: another actor got there.
        """
        changed = 0
        for task_id, transition in work:
            try:
                changed += (await self.apply(task_id, transition, action=action)).changed
            except (NotFound, Conflict):
                continue
        return changed

    def has_effects(self, result: TransitionResult) -> bool:
        """Whether :meth:`effects` has anything to do for ``result`` (most claims and reports
        have not, and a batch need not start a coroutine for each of them)."""
        return (result.hint is not None and self._hints.active) or (
            result.resolved and result.record.notify_dependents
        )

    async def effects(self, result: TransitionResult) -> None:
        """Carry out what a stored result asks for."""
        if result.hint is not None:
            await self._hints.publish(result.hint)
        if result.resolved and result.record.notify_dependents:
            self._background.spawn(self._resolve_dependents(result.record.task_id))

    async def _resolve_dependents(self, task_id: str) -> None:
        await self._on_resolved(task_id)
