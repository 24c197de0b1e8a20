"""The tasks part of the store contract: task records and their runs, written with
compare-and-set, the resolvers' scans, expiry, and task groups.

* A record is written whole by :meth:`TaskStore.insert` (version 1) and afterwards only through
  :meth:`TaskStore.compare_and_set`, which succeeds only if the stored version still equals the
  record's ``version`` and then stores ``version + 1``. That is the only concurrency control
  the rest of the coordinator relies on, across any number of replicas.
* The scans (:meth:`~TaskStore.expired_claims`, :meth:`~TaskStore.past_deadlines`,
  :meth:`~coordinator.store.contract.dispatch.DispatchStore.hints_due`,
  :meth:`~TaskStore.tasks_to_notify`) are served by indexes on columns derived from the record
  (``TaskRecord.taken_until``, ``open_deadline``, ``hint_due``, ``notify_dependents``), so a
  resolver pass costs the number of rows it acts on, not the number of tasks stored.
* Scans return the oldest first (by the scanned time); :meth:`~TaskStore.tasks_to_notify` in no
  particular order.
* ``insert`` requires unique dependencies (the API rejects duplicates before).
* A task's artifact rows go with it, however it is deleted (:meth:`~TaskStore.delete_expired`,
  :meth:`~coordinator.store.contract.management.ManagementStore.delete_matching`); their bytes
  are not the store's
  (:meth:`~coordinator.store.contract.artifacts.ArtifactStore.artifacts_of_tasks`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping, Sequence

from coordinator.domain.artifacts import InlineRow
from coordinator.domain.events import QueueEvent
from coordinator.domain.index import IndexedTask
from coordinator.domain.listings import Page
from coordinator.domain.records import Run, TaskRecord, TaskState
from coordinator.domain.task_groups import TaskGroup


class TaskStore(abc.ABC):
    """Persistent task records with compare-and-set writes."""

    # --- single records -------------------------------------------------------------------

    @abc.abstractmethod
    async def insert(
        self, record: TaskRecord, *, events: Sequence[QueueEvent] = ()
    ) -> TaskRecord | None:
        """Store a new task, its dependency edges and its group (created, or its expiry
        raised) atomically, and ``events`` in the outbox in the same transaction if the task
        is inserted.

        :returns: the stored record (``version`` 1), or ``None`` if the task id already exists
            or its group refuses it: sealed, or of another schedulerId (nothing is written).
        """

    @abc.abstractmethod
    async def get(self, task_id: str) -> TaskRecord | None:
        """The current record, or ``None``."""

    @abc.abstractmethod
    async def insert_many(
        self,
        records: Sequence[TaskRecord],
        *,
        events: Mapping[str, Sequence[QueueEvent]] | None = None,
    ) -> set[str]:
        """Insert new records (as :meth:`insert` does) and their edges in one transaction,
        with the ``events`` of each task inserted (by task id) in the outbox.

        :param records: distinct task ids.
        :returns: the ids inserted; an id that exists already is left as it is.
        """

    @abc.abstractmethod
    async def get_many(self, task_ids: Sequence[str]) -> dict[str, TaskRecord]:
        """The records that exist among ``task_ids`` (missing ids are simply absent)."""

    @abc.abstractmethod
    async def states(self, task_ids: Sequence[str]) -> dict[str, TaskState]:
        """Task state of each existing task among ``task_ids``; cheaper than :meth:`get_many`."""

    @abc.abstractmethod
    async def runs_of(self, runs: Sequence[tuple[str, int]]) -> dict[tuple[str, int], Run]:
        """Each named ``(taskId, runId)`` run as stored (a run of a missing task, or past its
        task's last run, is absent): one read of the runs alone, whatever their number, for
        the watches of running runs (:mod:`coordinator.service.run_watches`)."""

    @abc.abstractmethod
    async def compare_and_set(
        self,
        record: TaskRecord,
        *,
        events: Sequence[QueueEvent] = (),
        resolving: bool = False,
        index: Sequence[IndexedTask] = (),
    ) -> TaskRecord | None:
        """Write the record's mutable status if the stored version is ``record.version``,
        and then ``events`` in the outbox in the same transaction.

        ``index`` (a completion's entries, :func:`~coordinator.domain.index.
        completion_entries`): each is stored in the same transaction as
        :meth:`~coordinator.store.contract.index.IndexStore.insert_indexed_task` stores it,
        the rank rule judged at the record's ``resolved`` time.

        ``resolving`` (with ``events``): the write resolves the task; if it leaves the task's
        group without an unresolved task, the group's task-group-resolved goes to the outbox
        too, after the task's own events, in the same transaction. Of concurrent resolutions
        of a group's last tasks exactly one writes it.

        ``notify_dependents`` is stored only if some task depends on this one: resolving a task
        nobody depends on then needs no dependency pass (a dependent created afterwards reads
        its dependencies' states itself).

        :returns: the record as stored (``version + 1``, the flag as stored), or ``None`` if
            the stored version differs or the task no longer exists; the caller re-reads and
            tries again.
        """

    @abc.abstractmethod
    async def compare_and_set_many(
        self,
        records: Sequence[TaskRecord],
        *,
        events: Mapping[str, Sequence[QueueEvent]] | None = None,
        resolving: Collection[str] = (),
        closing: Callable[[int], Sequence[QueueEvent]] | None = None,
        index: Mapping[str, Sequence[IndexedTask]] | None = None,
        artifacts: Mapping[str, Sequence[InlineRow]] | None = None,
    ) -> list[TaskRecord | None]:
        """:meth:`compare_and_set` for records of distinct tasks in one round trip (SQLite:
        one transaction; PostgreSQL: one statement, or one transaction with ``events``,
        ``index`` or ``artifacts``). Each record wins or loses on its own version: a lost one
        never holds back the others; the ``events``, ``index`` entries and ``artifacts`` (a
        report's inline artifacts, inserted unless the run has the name already) of the
        records written (by task id) are written with them, the
        task-group-resolved of the groups those of ``resolving`` written leave resolved, and
        (with ``events``) if every record was written, after them ``closing(len(records))``.

        :returns: per record, in order, what :meth:`compare_and_set` would have returned.
        """

    # --- resolver scans and expiry --------------------------------------------------------

    @abc.abstractmethod
    async def expired_claims(self, now: int, limit: int) -> list[tuple[str, int]]:
        """``(task_id, taken_until)`` of running last runs with ``taken_until <= now``."""

    @abc.abstractmethod
    async def past_deadlines(self, now: int, limit: int) -> list[str]:
        """Ids of unresolved tasks whose deadline is ``<= now``."""

    @abc.abstractmethod
    async def tasks_to_notify(self, limit: int) -> list[str]:
        """Ids of resolved tasks whose dependents have not been re-examined."""

    @abc.abstractmethod
    async def delete_expired(self, now: int, limit: int) -> int:
        """Delete up to ``limit`` tasks with ``expires <= now`` (and their dependency edges
        and artifacts) and up to ``limit`` expired task groups, deduplication keys and
        concurrency keys' turns; return how many tasks were deleted."""

    # --- task groups ----------------------------------------------------------------------

    @abc.abstractmethod
    async def get_task_group(self, task_group_id: str) -> TaskGroup | None:
        """The group, created by the insert of its first task; ``None`` if unknown."""

    @abc.abstractmethod
    async def seal_task_group(
        self, task_group_id: str, *, now: int, announce: bool = False
    ) -> TaskGroup | None:
        """Seal the group at ``now`` unless sealed already; the group as now stored, ``None``
        if unknown. From then on :meth:`insert` refuses tasks of the group. ``announce``:
        its task-group-sealed (every call, as Taskcluster's) goes to the outbox in the same
        transaction."""

    @abc.abstractmethod
    async def task_group_size(self, task_group_id: str) -> int:
        """How many tasks the group has."""

    @abc.abstractmethod
    async def unresolved_in_group(
        self, task_group_id: str, *, limit: int, after: str | None
    ) -> list[str]:
        """Ids of up to ``limit`` unresolved tasks of the group after ``after``, in id order."""

    @abc.abstractmethod
    async def task_group(
        self, task_group_id: str, *, limit: int, after: str | None
    ) -> Page[TaskRecord, str]:
        """Tasks of a task group, ordered by task id, starting after ``after``."""

    @abc.abstractmethod
    async def dependents(
        self, task_id: str, *, limit: int, after: str | None
    ) -> Page[TaskRecord, str]:
        """Tasks that list ``task_id`` among their dependencies, ordered by task id."""
