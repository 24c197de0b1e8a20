"""The task service: applies lifecycle transitions to stored records and carries out their effects.

Every change to a task goes through :meth:`TaskService.apply`: read the record, apply a pure
transition from :mod:`coordinator.lifecycle`, write it back with compare-and-set, and on a lost
race read again and re-apply, so exactly one of any number of concurrent callers (API requests,
resolver loops, other replicas) wins and the rest see the winner's state. After a successful
write the outcome's effects follow: the hint for a newly pending run is put into Azure (and
confirmed in the store), and a newly resolved task's dependents are re-examined. Both effects
are also recorded in the record itself (``hint_needed``, ``notify_dependents``), so the
resolvers finish them if this process dies first or Azure is unreachable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from coordinator import definitions, lifecycle
from coordinator.errors import InputError, RequestConflict, ResourceNotFound
from coordinator.lifecycle import Conflict, Hint, NotFound, Outcome, Timing
from coordinator.records import TaskRecord, record_from_definition
from coordinator.store.base import Store

log = logging.getLogger(__name__)

Transition = Callable[[TaskRecord, int], Outcome]
"""A lifecycle transition with its parameters bound: ``(record, now) -> Outcome``."""

MAX_CAS_ATTEMPTS = 25
DEPENDENTS_PAGE = 200


def wall_clock() -> int:
    """Now, in epoch milliseconds (freezegun-friendly: it reads ``time.time``)."""
    return int(time.time() * 1000)


class HintSink(Protocol):
    """Where hints go: :class:`coordinator.queues.QueueService` in production."""

    async def put_hint(self, hint: Hint, *, now: int) -> bool: ...


class TaskService:
    """Task operations shared by the API handlers and the resolvers.

    :param store: the task store (the truth).
    :param hints: where hints are put; ``None`` when running without Azure.
    :param timing: claim timeout and retry delay for the transitions.
    :param max_deadline: how far in the future a deadline may be (ms).
    :param clock: epoch-milliseconds clock; tests inject their own.
    """

    def __init__(
        self,
        *,
        store: Store,
        hints: HintSink | None,
        timing: Timing,
        max_deadline: int,
        clock: Callable[[], int] = wall_clock,
    ) -> None:
        self.store = store
        self.hints = hints
        self.timing = timing
        self.max_deadline = max_deadline
        self.clock = clock
        self._background: set[asyncio.Task[None]] = set()
        self._confirmations: list[tuple[tuple[str, int], asyncio.Future[None]]] = []
        self._confirming = False
        self.hint_listeners: list[Callable[[Hint], None]] = []
        """Called after each hint put succeeds (claimWork's wake-up)."""

    # --- the one write path ---------------------------------------------------------------

    async def apply(
        self, task_id: str, transition: Transition, *, read: TaskRecord | None = None
    ) -> Outcome:
        """Apply ``transition`` to the task with compare-and-set, retrying lost races.

        :param read: the record as the caller just read it, to start from instead of reading
            again (a stale one only costs a lost compare-and-set and a re-read).
        :returns: the outcome, its record as now stored (``changed`` false if nothing was
            written).
        :raises ResourceNotFound: the task or run does not exist.
        :raises RequestConflict: the transition is not allowed in the current state.
        """
        for _ in range(MAX_CAS_ATTEMPTS):
            record, read = read or await self.store.get(task_id), None
            if record is None:
                raise ResourceNotFound(f"task {task_id} does not exist")
            try:
                outcome = transition(record, self.clock())
            except NotFound as error:
                raise ResourceNotFound(str(error)) from None
            except Conflict as error:
                raise RequestConflict(str(error)) from None
            if not outcome.changed:
                return outcome
            stored = await self.store.compare_and_set(outcome.record)
            if stored is not None:
                outcome = dataclasses.replace(outcome, record=stored)
                await self._effects(outcome)
                return outcome
        raise RequestConflict(
            f"task {task_id} is changing too fast: gave up after {MAX_CAS_ATTEMPTS} attempts"
        )

    async def apply_each(self, work: Iterable[tuple[str, Transition]]) -> int:
        """Apply transitions to several tasks (resolver passes); returns how many changed.

        A task that vanished or refuses the transition is skipped: another actor got there.
        """
        changed = 0
        for task_id, transition in work:
            try:
                changed += (await self.apply(task_id, transition)).changed
            except (ResourceNotFound, RequestConflict):
                continue
        return changed

    async def _effects(self, outcome: Outcome) -> None:
        if outcome.hint is not None:
            await self.put_hint(outcome.hint)
        if outcome.resolved and outcome.record.notify_dependents:
            self._spawn(self.resolve_dependents(outcome.record.task_id))

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Wait for background effects started so far (shutdown, tests)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    # --- hints ----------------------------------------------------------------------------

    async def put_hint(self, hint: Hint) -> bool:
        """Put a hint and confirm it in the store; on failure leave it to the hint keeper."""
        if self.hints is None:
            return False
        try:
            put = await self.hints.put_hint(hint, now=self.clock())
        except Exception as error:
            log.warning(
                "hint not put, hint keeper will retry taskId=%s runId=%s error=%r",
                hint.task_id,
                hint.run_id,
                error,
            )
            return False
        # Not put means past the deadline: no hint will ever be needed, so settle it too.
        await self._confirm(hint.task_id, hint.run_id)
        if put:
            for listener in self.hint_listeners:
                listener(hint)
        return put

    async def _confirm(self, task_id: str, run_id: int) -> None:
        """Confirm a hint in the store, group-committed: the confirmations that arrive while
        one write is in flight share the next write, so concurrent creates pay one store
        round trip between them instead of one each."""
        done = asyncio.get_running_loop().create_future()
        self._confirmations.append(((task_id, run_id), done))
        if not self._confirming:
            self._confirming = True
            self._spawn(self._write_confirmations())
        await done

    async def _write_confirmations(self) -> None:
        try:
            while self._confirmations:
                batch, self._confirmations = self._confirmations, []
                try:
                    await self.store.confirm_hints([hint for hint, _ in batch])
                except Exception as error:
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(error)
                else:
                    for _, done in batch:
                        if not done.done():
                            done.set_result(None)
        finally:
            self._confirming = False

    # --- dependencies ---------------------------------------------------------------------

    async def schedule_if_satisfied(self, record: TaskRecord) -> Outcome:
        """Schedule an unscheduled task whose dependencies are satisfied.

        :param record: the task as the caller just read (or stored) it.
        """
        states: Mapping[str, str | None] = await self.store.states(record.dependencies)
        return await self.apply(
            record.task_id,
            lambda r, now: lifecycle.schedule_if_satisfied(r, dependency_states=states, now=now),
            read=record,
        )

    async def resolve_dependents(self, task_id: str) -> int:
        """Re-examine every dependent of a resolved task; returns how many were scheduled."""
        resolved = await self.store.get(task_id)
        if resolved is None:
            return 0
        scheduled = 0
        after: str | None = None
        while True:
            page = await self.store.dependents(task_id, limit=DEPENDENTS_PAGE, after=after)
            for dependent in page.records:
                if dependent.runs:
                    continue
                try:
                    if (await self.schedule_if_satisfied(dependent)).changed:
                        scheduled += 1
                except (ResourceNotFound, RequestConflict):
                    continue  # expired meanwhile, or someone else got there first
            if page.next_after is None:
                break
            after = page.next_after
        await self.apply_each(
            [
                (
                    task_id,
                    lambda r, now: lifecycle.dependents_notified(
                        r, examined_version=resolved.version
                    ),
                )
            ]
        )
        return scheduled

    # --- API operations -------------------------------------------------------------------

    async def create_task(self, task_id: str, body: Mapping[str, Any]) -> TaskRecord:
        """createTask: validate, store and (without dependencies) schedule a new task.

        Idempotent: the same definition again returns the current record; a different one is
        a conflict.
        """
        now = self.clock()
        definition = definitions.normalise(task_id, body, now=now, max_deadline=self.max_deadline)
        record = record_from_definition(task_id, definition)
        if record.dependencies:
            await self._check_dependencies(record)
        outcome = lifecycle.create(record, now=now)
        stored = await self.store.insert(outcome.record)
        if stored is None:
            existing = await self.store.get(task_id)
            if existing is not None and definitions.definitions_match(
                existing.definition, definition
            ):
                return existing
            raise RequestConflict(
                f"task {task_id} already exists with a different definition; "
                "taskIds must be unique: generate a new slugid"
            )
        await self._effects(outcome)
        if stored.dependencies:
            # The edges are stored before the dependencies' states are read, so a dependency
            # resolving concurrently either sees this task among its dependents or is seen
            # resolved here: the task cannot be missed.
            scheduled = await self.schedule_if_satisfied(stored)
            return scheduled.record
        return stored

    async def _check_dependencies(self, record: TaskRecord) -> None:
        found = await self.store.get_many(record.dependencies)
        missing = [dep for dep in record.dependencies if dep not in found]
        if missing:
            raise InputError(f"dependencies do not exist: {', '.join(missing)}")
        early = [dep for dep, rec in found.items() if rec.expires < record.deadline]
        if early:
            raise InputError(
                "dependencies expire before this task's deadline: " + ", ".join(sorted(early))
            )

    async def get(self, task_id: str) -> TaskRecord:
        record = await self.store.get(task_id)
        if record is None:
            raise ResourceNotFound(f"task {task_id} does not exist")
        return record

    async def _from_read(self, record: TaskRecord, step: Callable[..., Outcome]) -> TaskRecord:
        """Apply a ``step(record, now=...)`` transition, starting from the caller's read."""
        outcome = await self.apply(record.task_id, lambda r, now: step(r, now=now), read=record)
        return outcome.record

    async def schedule(self, record: TaskRecord) -> TaskRecord:
        """scheduleTask."""
        return await self._from_read(record, lifecycle.schedule)

    async def rerun(self, record: TaskRecord) -> TaskRecord:
        """rerunTask."""
        return await self._from_read(record, lifecycle.rerun)

    async def cancel(self, record: TaskRecord) -> TaskRecord:
        """cancelTask."""
        return await self._from_read(record, lifecycle.cancel)

    async def claim(
        self,
        task_id: str,
        run_id: int,
        *,
        worker_group: str,
        worker_id: str,
        read: TaskRecord | None = None,
    ) -> TaskRecord:
        outcome = await self.apply(
            task_id,
            lambda r, now: lifecycle.claim(
                r,
                run_id=run_id,
                worker_group=worker_group,
                worker_id=worker_id,
                now=now,
                timing=self.timing,
            ),
            read=read,
        )
        return outcome.record

    async def reclaim(self, task_id: str, run_id: int) -> TaskRecord:
        outcome = await self.apply(
            task_id,
            lambda r, now: lifecycle.reclaim(r, run_id=run_id, now=now, timing=self.timing),
        )
        return outcome.record

    async def report(self, task_id: str, run_id: int, *, state: str, reason: str) -> TaskRecord:
        outcome = await self.apply(
            task_id,
            lambda r, now: lifecycle.report(
                r, run_id=run_id, state=state, reason=reason, now=now, timing=self.timing
            ),
        )
        return outcome.record
