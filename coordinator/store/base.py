"""The store interface: every task record the coordinator keeps, behind one abstract class.

Drivers (:mod:`coordinator.store.sqlite`, :mod:`coordinator.store.postgres`) implement it and
pass one contract test suite (``tests/test_store_contract.py``). The contract:

* A record is written whole by :meth:`Store.insert` (version 1) and afterwards only through
  :meth:`Store.compare_and_set`, which succeeds only if the stored version still equals the
  record's ``version`` and then stores ``version + 1``. That is the only concurrency control
  the rest of the coordinator relies on, across any number of replicas.
* The scans (:meth:`expired_claims`, :meth:`past_deadlines`, :meth:`hints_due`,
  :meth:`tasks_to_notify`) are served by indexes on columns derived from the record
  (``TaskRecord.taken_until``, ``open_deadline``, ``hint_due``, ``notify_dependents``), so a
  resolver pass costs the number of rows it acts on, not the number of tasks stored.
* Scans return the oldest first (by the scanned time); :meth:`Store.tasks_to_notify` in no
  particular order.
* Listings page by task id with a ``limit``; no call holds more than one page in memory.
* ``insert`` requires unique dependencies (the API rejects duplicates before).

All times are epoch milliseconds.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from coordinator.domain.listings import Page, RunCounts
from coordinator.domain.records import TaskRecord, TaskState


class Store(abc.ABC):
    """Persistent task records with compare-and-set writes."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and apply any pending schema migrations."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the store may not be used afterwards."""

    @abc.abstractmethod
    async def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied (empty when up to date)."""

    # --- single records -------------------------------------------------------------------

    @abc.abstractmethod
    async def insert(self, record: TaskRecord) -> TaskRecord | None:
        """Store a new task and its dependency edges atomically.

        :returns: the stored record (``version`` 1), or ``None`` if the task id already exists
            (nothing is written then).
        """

    @abc.abstractmethod
    async def get(self, task_id: str) -> TaskRecord | None:
        """The current record, or ``None``."""

    @abc.abstractmethod
    async def insert_many(self, records: Sequence[TaskRecord]) -> set[str]:
        """Insert new records (as :meth:`insert` does) and their edges in one transaction.

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
    async def compare_and_set(self, record: TaskRecord) -> TaskRecord | None:
        """Write the record's mutable status if the stored version is ``record.version``.

        ``notify_dependents`` is stored only if some task depends on this one: resolving a task
        nobody depends on then needs no dependency pass (a dependent created afterwards reads
        its dependencies' states itself).

        :returns: the record as stored (``version + 1``, the flag as stored), or ``None`` if
            the stored version differs or the task no longer exists; the caller re-reads and
            tries again.
        """

    @abc.abstractmethod
    async def confirm_hints(self, hints: Sequence[tuple[str, int]]) -> None:
        """Record that the hints of these ``(task_id, run_id)`` pending runs are in their queues,
        in one write.

        Clears ``hint_due`` of each task only while that run is still its last, without
        touching the version: a concurrent writer that still carries ``hint_needed`` merely
        causes one duplicate hint later, which workers treat as harmless. Unknown tasks are
        ignored.
        """

    # --- resolver scans -------------------------------------------------------------------

    @abc.abstractmethod
    async def expired_claims(self, now: int, limit: int) -> list[tuple[str, int]]:
        """``(task_id, taken_until)`` of running last runs with ``taken_until <= now``."""

    @abc.abstractmethod
    async def past_deadlines(self, now: int, limit: int) -> list[str]:
        """Ids of unresolved tasks whose deadline is ``<= now``."""

    @abc.abstractmethod
    async def hints_due(self, before: int, limit: int) -> list[str]:
        """Ids of tasks whose pending last run's hint, asked for before ``before``, is
        unconfirmed."""

    @abc.abstractmethod
    async def tasks_to_notify(self, limit: int) -> list[str]:
        """Ids of resolved tasks whose dependents have not been re-examined."""

    @abc.abstractmethod
    async def delete_expired(self, now: int, limit: int) -> int:
        """Delete up to ``limit`` tasks with ``expires <= now`` (and their dependency edges);
        return how many were deleted."""

    # --- listings and counts --------------------------------------------------------------

    @abc.abstractmethod
    async def task_group(self, task_group_id: str, *, limit: int, after: str | None) -> Page:
        """Tasks of a task group, ordered by task id, starting after ``after``."""

    @abc.abstractmethod
    async def dependents(self, task_id: str, *, limit: int, after: str | None) -> Page:
        """Tasks that list ``task_id`` among their dependencies, ordered by task id."""

    @abc.abstractmethod
    async def run_counts(self, provisioner_id: str, worker_type: str, *, now: int) -> RunCounts:
        """Exact pending, delayed (not visible at ``now``) and running counts of one queue."""
