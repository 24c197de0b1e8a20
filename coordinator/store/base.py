"""The store interface: every task record the coordinator keeps, behind one abstract class.

Drivers (:mod:`coordinator.store.sqlite`, :mod:`coordinator.store.postgres`) implement it and
pass one contract test suite (``tests/integration/test_store_contract.py``). The contract:

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
* A task's artifact rows go with it, however it is deleted (:meth:`delete_expired`,
  :meth:`delete_matching`); their bytes are not the store's (:meth:`artifacts_of_tasks`).

All times are epoch milliseconds.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from coordinator.domain.artifacts import Artifact, ArtifactKey
from coordinator.domain.events import BrokerReply, OutboxEntry, OutboxPass, QueueEvent
from coordinator.domain.hooks import Hook, LastFire
from coordinator.domain.listings import Key, Page, PendingCount, RunCounts
from coordinator.domain.queue_controls import Limits, Pause, QueueControls
from coordinator.domain.records import TaskRecord, TaskState
from coordinator.domain.task_filters import TaskCounts, TaskFilter
from coordinator.domain.task_groups import TaskGroup
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import (
    ProvisionerRecord,
    QuarantineNote,
    TaskQueueRecord,
    TaskQueueSighting,
    WorkerKey,
    WorkerRecord,
    WorkerSighting,
)

ClaimPending = Callable[[Sequence[TaskRecord]], Sequence[tuple[TaskRecord, Sequence[QueueEvent]]]]
"""Store dispatch's claim of the records :meth:`Store.claim_pending` hands over: each one to
write (a record of those, changed) with its outbox events. Pure and synchronous: it runs
inside the store's transaction."""

PendingAnnouncement = tuple[TaskQueue, int]
"""A task queue that has a run made pending, and when that run becomes visible (epoch ms)."""


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
    async def compare_and_set(
        self, record: TaskRecord, *, events: Sequence[QueueEvent] = (), resolving: bool = False
    ) -> TaskRecord | None:
        """Write the record's mutable status if the stored version is ``record.version``,
        and then ``events`` in the outbox in the same transaction.

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
    ) -> list[TaskRecord | None]:
        """:meth:`compare_and_set` for records of distinct tasks in one round trip (SQLite:
        one transaction; PostgreSQL: one statement, or one transaction with ``events``). Each
        record wins or loses on its own version: a lost one never holds back the others; the
        ``events`` of the records written (by task id) go to the outbox with them, the
        task-group-resolved of the groups those of ``resolving`` written leave resolved, and
        (with ``events``) if every record was written, after them ``closing(len(records))``.

        :returns: per record, in order, what :meth:`compare_and_set` would have returned.
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

    # --- the event outbox ------------------------------------------------------------------

    @abc.abstractmethod
    async def publish_outbox(
        self,
        limit: int,
        publish: Callable[[Sequence[OutboxEntry]], Awaitable[BrokerReply]],
        *,
        now: int,
    ) -> OutboxPass:
        """Hand up to ``limit`` outbox entries due at ``now``, the oldest first, to
        ``publish``, which says what the broker answered; delete those it confirmed, retry
        those it refused later or park them (:func:`~coordinator.domain.events.after_refusal`:
        into ``queue_event_outbox_parked``), and keep the unanswered. An entry whose key has an
        earlier one waiting out a refusal is not handed out. One caller at a time across
        replicas (others get nothing and return an empty pass), so the order holds.
        """

    @abc.abstractmethod
    async def append_events(self, events: Sequence[QueueEvent]) -> None:
        """Write ``events`` to the outbox in a transaction of their own (the events that
        follow a change rather than being part of it: task-group and artifact messages)."""

    @abc.abstractmethod
    async def outbox_depth(self) -> int:
        """How many events wait in the outbox."""

    # --- store dispatch ---------------------------------------------------------------------

    @abc.abstractmethod
    async def claim_pending(
        self, task_queue: TaskQueue, *, now: int, limit: int, claim: ClaimPending
    ) -> list[TaskRecord]:
        """Hand up to ``limit`` of the queue's claimable runs (the last run pending and
        visible at ``now``, the deadline after it), the highest ``pending_priority`` first,
        then the earliest visible, to ``claim``, and compare-and-set the records it returns,
        with their outbox events, in the same transaction.

        Concurrent callers never get the same run: PostgreSQL locks the rows it hands over
        until the write commits and other callers, on any replica, skip them (``FOR UPDATE
        SKIP LOCKED``); SQLite's one writer runs one call at a time.

        :returns: the records written, as stored, in the order ``claim`` returned them.
        """

    @abc.abstractmethod
    async def announce_pending(self, announcements: Sequence[PendingAnnouncement]) -> None:
        """Tell every coordinator listening on this store (:meth:`listen_pending`), other
        replicas included, that these task queues have runs made pending. SQLite: nothing
        to do, its one process wakes its own waiters."""

    @abc.abstractmethod
    async def listen_pending(self, on_pending: Callable[[PendingAnnouncement], None]) -> None:
        """From now until :meth:`close`, call ``on_pending`` for each announcement that any
        coordinator makes on this store (PostgreSQL: ``LISTEN``, reconnected after an outage);
        SQLite: never."""

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
        """Delete up to ``limit`` tasks with ``expires <= now`` (and their dependency edges
        and artifacts) and up to ``limit`` expired task groups; return how many tasks were
        deleted."""

    @abc.abstractmethod
    async def delete_matching(self, matching: TaskFilter, *, now: int, limit: int) -> int:
        """Delete up to ``limit`` tasks that ``matching`` matches at ``now`` (with their edges,
        tags and artifacts) in one transaction; return how many were deleted. A row that a
        concurrent compare-and-set holds is waited for, so fewer than ``limit`` means none is
        left."""

    @abc.abstractmethod
    async def pending_by_task_queue(self) -> list[PendingCount]:
        """How many pending runs (visible or delayed) each task queue has; queues without
        pending runs are left out."""

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

    # --- listings and counts --------------------------------------------------------------

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

    @abc.abstractmethod
    async def run_counts(self, provisioner_id: str, worker_type: str, *, now: int) -> RunCounts:
        """Exact pending, delayed (not visible at ``now``) and running counts of one queue."""

    # --- the management API ---------------------------------------------------------------

    @abc.abstractmethod
    async def list_tasks(
        self, matching: TaskFilter, *, now: int, limit: int, after: str | None
    ) -> Page[TaskRecord, str]:
        """Tasks ``matching`` matches at ``now``, ordered by task id, after ``after``."""

    @abc.abstractmethod
    async def matching_task_ids(
        self, matching: TaskFilter, *, now: int, limit: int, after: str | None
    ) -> list[str]:
        """Ids of :meth:`list_tasks`, without reading the records."""

    @abc.abstractmethod
    async def count_tasks(self, matching: TaskFilter, *, now: int) -> TaskCounts:
        """How many tasks ``matching`` matches at ``now``, by state."""

    @abc.abstractmethod
    async def shared_secret(self, name: str, *, new: str) -> str:
        """The secret named ``name`` that every replica on this store shares; ``new`` becomes
        it if there is none yet (the first caller's wins)."""

    # --- task queues and workers ----------------------------------------------------------

    @abc.abstractmethod
    async def record_sightings(
        self, task_queues: Sequence[TaskQueueSighting], workers: Sequence[WorkerSighting]
    ) -> None:
        """Create or refresh the task queues and workers seen, in one transaction.

        Each queue and worker appears at most once. A new record starts at its sighting
        (``lastDateActive``; a worker's ``firstClaim`` too, and a ``quarantineUntil``
        :data:`~coordinator.domain.workers.NEVER_QUARANTINED` before it); an existing one
        keeps the later ``lastDateActive`` and ``expires`` of the two, and a worker appends the
        sighting's recent tasks to its own, keeping the last
        :data:`~coordinator.domain.workers.RECENT_TASKS`.
        """

    @abc.abstractmethod
    async def task_queue(self, task_queue: TaskQueue, *, now: int) -> TaskQueueRecord | None:
        """The task queue, or ``None`` if unknown or expired (``expires <= now``)."""

    @abc.abstractmethod
    async def task_queues(
        self, *, now: int, limit: int, after: Key | None, provisioner_id: str | None = None
    ) -> Page[TaskQueueRecord, Key]:
        """Unexpired task queues (of one provisioner, if given), by the key
        ``(provisionerId, workerType)``."""

    @abc.abstractmethod
    async def provisioner(self, provisioner_id: str, *, now: int) -> ProvisionerRecord | None:
        """The provisioner of the unexpired task queues of ``provisioner_id``, or ``None``."""

    @abc.abstractmethod
    async def provisioners(
        self, *, now: int, limit: int, after: Key | None
    ) -> Page[ProvisionerRecord, Key]:
        """Provisioners of the unexpired task queues, by the key ``(provisionerId,)``."""

    @abc.abstractmethod
    async def worker(self, key: WorkerKey) -> WorkerRecord | None:
        """The worker, expired or not; ``None`` if unknown."""

    @abc.abstractmethod
    async def workers(
        self,
        task_queue: TaskQueue,
        *,
        now: int,
        quarantined: bool | None,
        limit: int,
        after: Key | None,
    ) -> Page[WorkerRecord, Key]:
        """The task queue's listed workers (unexpired or quarantined), only the quarantined
        or only the others when ``quarantined`` says, by the key ``(workerGroup, workerId)``."""

    @abc.abstractmethod
    async def quarantine_worker(
        self, key: WorkerKey, *, note: QuarantineNote, expires: int
    ) -> WorkerRecord | None:
        """Quarantine the worker until ``note.quarantine_until`` (a past time lifts it),
        append ``note`` to its details and keep it listed until at least ``expires``; the
        worker as now stored, or ``None`` if unknown (nothing is created)."""

    @abc.abstractmethod
    async def quarantined_workers(self, now: int) -> dict[WorkerKey, int]:
        """``quarantineUntil`` of every worker quarantined at ``now``."""

    @abc.abstractmethod
    async def pending_runs(
        self, task_queue: TaskQueue, *, limit: int, after: Key | None
    ) -> Page[TaskRecord, Key]:
        """Tasks of the queue whose last run is pending, by the key ``(visibleAt, taskId)``:
        the oldest claimable first."""

    @abc.abstractmethod
    async def claimed_runs(
        self, task_queue: TaskQueue, *, limit: int, after: Key | None
    ) -> Page[TaskRecord, Key]:
        """Tasks of the queue whose last run is running, by the key ``(started, taskId)``:
        the oldest claim first."""

    @abc.abstractmethod
    async def run_counts_of(
        self, task_queues: Sequence[TaskQueue], *, now: int
    ) -> dict[TaskQueue, RunCounts]:
        """:meth:`run_counts` of distinct queues in one query; a queue with neither pending
        nor running runs may be absent."""

    @abc.abstractmethod
    async def delete_expired_workers(self, now: int, limit: int) -> int:
        """Delete up to ``limit`` workers expired and not quarantined at ``now``, and up to
        ``limit`` expired task queues; return how many records were deleted."""

    # --- task-queue controls (pause and limits) --------------------------------------------

    @abc.abstractmethod
    async def queue_controls(self) -> list[QueueControls]:
        """Every task queue paused or limited."""

    @abc.abstractmethod
    async def queue_controls_of(self, task_queue: TaskQueue) -> QueueControls:
        """The controls of one task queue (none set: the default)."""

    @abc.abstractmethod
    async def pause_task_queue(self, task_queue: TaskQueue, pause: Pause | None) -> QueueControls:
        """Pause the queue (a queue paused already keeps its ``since`` and takes the new
        reason), or resume it with ``None``; its controls as now stored."""

    @abc.abstractmethod
    async def limit_task_queue(
        self, task_queue: TaskQueue, limits: Limits, *, named: frozenset[str]
    ) -> QueueControls:
        """Set those of the queue's limits whose wire names (``maxRunning``,
        ``maxClaimsPerSecond``) are in ``named`` to their value in ``limits``; its controls as
        now stored."""

    @abc.abstractmethod
    async def set_claims_tat(self, task_queue: TaskQueue, claims_tat_us: int) -> None:
        """Store the queue's rate-limit state (its controls exist)."""

    @abc.abstractmethod
    async def give_back_claims(self, task_queue: TaskQueue, room_us: int) -> None:
        """Move the queue's rate-limit state ``room_us`` back, in one statement (without the
        queue's lock)."""

    @abc.abstractmethod
    def queue_lock(self, task_queue: TaskQueue) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the queue's claim lock: one holder at a time per task queue, across every
        process sharing the store, so that counting its running runs and claiming are one
        step."""

    # --- artifacts --------------------------------------------------------------------------

    @abc.abstractmethod
    async def insert_artifact(
        self, artifact: Artifact, *, events: Sequence[QueueEvent] = ()
    ) -> Artifact | None:
        """Store a new artifact of an existing task, and ``events`` in the outbox in the same
        transaction if it is new.

        :returns: ``None`` when stored; the stored artifact, unchanged, when the run has one
            of that name already.
        :raises InputError: the task does not exist (any more): ``Task not found``, what
            createArtifact answers for an unknown task.
        """

    @abc.abstractmethod
    async def replace_artifact(
        self, artifact: Artifact, *, events: Sequence[QueueEvent] = ()
    ) -> None:
        """Write a repeated createArtifact over the stored artifact of the same key (and
        ``events`` in the outbox in the same transaction): its
        storage type, ``expires`` and details (except that an s3 artifact keeps its upload
        state); contentType, ``created`` and the declared length stay. Nothing happens if
        there is none."""

    @abc.abstractmethod
    async def mark_uploaded(
        self, task_id: str, run_id: int, name: str, details: Mapping[str, Any]
    ) -> bool:
        """Set the details of an s3 artifact (its upload state); whether it did (``False``:
        no such artifact, or not of type s3)."""

    @abc.abstractmethod
    async def get_artifact(self, task_id: str, run_id: int, name: str) -> Artifact | None:
        """The artifact, expired or not; ``None`` if there is none."""

    @abc.abstractmethod
    async def list_artifacts(
        self, task_id: str, run_id: int, *, after: str | None, limit: int
    ) -> Page[Artifact, str]:
        """Every artifact of the run, expired or not, in name order (code point), after the
        name ``after``."""

    @abc.abstractmethod
    async def expired_artifacts(self, now: int, limit: int) -> list[Artifact]:
        """Up to ``limit`` artifacts with ``expires <= now``, the earliest first (as tasks
        expire: an artifact never outlives its task, so this reaches a task's artifacts no
        later than :meth:`delete_expired` the task)."""

    @abc.abstractmethod
    async def delete_artifacts(self, keys: Sequence[ArtifactKey]) -> int:
        """Delete these artifacts in one transaction; how many existed."""

    @abc.abstractmethod
    async def artifacts_of_tasks(self, task_ids: Sequence[str]) -> list[Artifact]:
        """Every artifact of these tasks, by task, run and name: what deleting the tasks
        deletes, whose bytes the caller deletes first."""

    # --- hooks (docs/hooks.md) --------------------------------------------------------------

    @abc.abstractmethod
    async def insert_hook(self, hook: Hook, *, events: Sequence[QueueEvent] = ()) -> bool:
        """Store a new hook (``version`` 1), and ``events`` in the outbox in the same
        transaction; ``False`` (nothing written) if one of that id exists."""

    @abc.abstractmethod
    async def get_hook(self, hook_group_id: str, hook_id: str) -> Hook | None:
        """The hook, or ``None``."""

    @abc.abstractmethod
    async def hooks_in_group(self, hook_group_id: str) -> list[Hook]:
        """Every hook of the group, by hookId."""

    @abc.abstractmethod
    async def hook_groups(self) -> list[str]:
        """Every hookGroupId with at least one hook, in order."""

    @abc.abstractmethod
    async def compare_and_set_hook(
        self, hook: Hook, *, events: Sequence[QueueEvent] = ()
    ) -> Hook | None:
        """Write ``hook`` if the stored version is still ``hook.version``, and ``events`` in
        the outbox in the same transaction; the stored hook (its version one more), or
        ``None`` (nothing written) when it changed meanwhile or is gone."""

    @abc.abstractmethod
    async def delete_hook(
        self, hook_group_id: str, hook_id: str, *, events: Sequence[QueueEvent] = ()
    ) -> bool:
        """Delete the hook and its last fires, and ``events`` in the outbox in the hook's
        delete's transaction; whether it existed (``False``: nothing written)."""

    @abc.abstractmethod
    async def due_hooks(self, now: int, limit: int) -> list[Hook]:
        """Up to ``limit`` hooks whose ``next_due`` is at or before ``now``, the earliest
        first."""

    @abc.abstractmethod
    async def insert_last_fire(self, fire: LastFire) -> bool:
        """Record a fire; ``False`` (nothing written) when the hook already has a fire of that
        taskId."""

    @abc.abstractmethod
    async def expire_last_fires(self, before: int, limit: int) -> int:
        """Delete up to ``limit`` last fires created before ``before``, the oldest first; how
        many."""

    @abc.abstractmethod
    async def last_fires(
        self, hook_group_id: str, hook_id: str, *, limit: int, before: tuple[int, str] | None
    ) -> list[LastFire]:
        """Up to ``limit`` of the hook's fires, the newest first (by ``task_create_time``, then
        taskId), from the one ``before`` is of (``(task_create_time, task_id)``; ``None``:
        the newest)."""


class ProcessLocks:
    """One :class:`asyncio.Lock` per task queue, in this process (a lock a driver shared by
    several processes takes first, so that each process waits on the shared one once)."""

    def __init__(self) -> None:
        self._locks: defaultdict[TaskQueue, asyncio.Lock] = defaultdict(asyncio.Lock)

    @contextlib.asynccontextmanager
    async def hold(self, task_queue: TaskQueue) -> AsyncIterator[None]:
        async with self._locks[task_queue]:
            yield
