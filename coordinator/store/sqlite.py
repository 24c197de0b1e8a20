"""The SQLite store: the embedded default, for a single coordinator (its serve process, and
the event publisher process that one starts with publishing on).

The database is in WAL mode with ``synchronous=FULL``: every commit is fsynced before its
caller hears of it, so a write that returned (a 200 from createTask) survives a power cut, not
only the process being killed. Its one connection is scheduled by
:mod:`coordinator.store.sqlite_group_commit`: the request path's calls run on the event loop
and are group-committed (one fsync for the calls that waited together), the scans on the store
thread. This module holds the statements each call runs. Several coordinators must not share
one file; use the PostgreSQL store for replicas.

A database that stays locked past :data:`BUSY_TIMEOUT_MS` (another process holds its write
lock), or that the disk fails or fills, is an outage: the call raises
:class:`~coordinator.store.errors.StoreUnavailable` and the outage is logged once
(:mod:`coordinator.store.outages`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sqlite3
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from coordinator.domain.artifacts import Artifact, ArtifactKey, InlineRow
from coordinator.domain.concurrency_keys import UNKEYED, Candidate, Key, serve_keys
from coordinator.domain.errors import InputError
from coordinator.domain.events import (
    BrokerReply,
    OutboxEntry,
    OutboxPass,
    QueueEvent,
    group_event,
)
from coordinator.domain.index import IndexedTask
from coordinator.domain.listings import ResolvedCounts, RunCounts
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_filters import TaskFilter
from coordinator.domain.task_groups import TaskGroup
from coordinator.domain.task_queues import PRIORITIES, TaskQueue, priority_level
from coordinator.domain.workers import TaskQueueSighting, WorkerSighting, recent_tasks
from coordinator.store.artifact_rows import (
    artifact_columns,
    artifact_from_row,
    inline_columns,
    key_columns,
)
from coordinator.store.base import ProcessLocks
from coordinator.store.contract.deduplication import KeyedInsert
from coordinator.store.contract.dispatch import ClaimPending, PendingAnnouncement, PickLevels
from coordinator.store.contract.inbox import InboxRow, IngestRows
from coordinator.store.index_rows import indexed_task_columns, namespace_columns
from coordinator.store.outages import OutageWatch
from coordinator.store.outbox_rows import (
    ReplyWrites,
    entry_from_row,
    outbox_rows,
    writes_after_reply,
    written_outbox_rows,
)
from coordinator.store.rows import (
    insert_columns,
    record_from_row,
    status_columns,
    stored_after_cas,
    tag_rows,
    turn_rows,
    turns_from_rows,
)
from coordinator.store.sql_store import SQLStore, deduplication_key_columns, task_group_from_row
from coordinator.store.sqlfiles import migrations, queries
from coordinator.store.sqlite_checkpoints import WalCheckpoints
from coordinator.store.sqlite_group_commit import GroupCommit, Where
from coordinator.store.task_filters import filter_clause
from coordinator.store.worker_rows import (
    counts_from_rows,
    recent_from_json,
    resolved_counts_from_rows,
    task_queue_columns,
    task_queue_sighting_columns,
    worker_columns,
    worker_sighting_columns,
)

T = TypeVar("T")
_Q = queries("sqlite")

BUSY_TIMEOUT_MS = 10_000
"""How long a call waits for another connection's lock before the store counts as unavailable.
Only another process can hold one (this one has a single connection): the coordinator's event
publisher process deleting what the broker confirmed (milliseconds), or, by mistake, another
coordinator. The store thread waits; the event loop never does
(:mod:`coordinator.store.sqlite_group_commit`)."""

_OUTAGES = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_READONLY,
    }
)
"""SQLite's primary result codes that mean the file is not usable now, not that the statement
is wrong: locked, an I/O error, a full disk, a file that cannot be opened or written."""


def _is_outage(error: BaseException) -> bool:
    code = getattr(error, "sqlite_errorcode", None)  # the extended code; its low byte is primary
    return isinstance(error, sqlite3.Error) and code is not None and code & 0xFF in _OUTAGES


SCANS = frozenset(
    {
        "run_counts",
        "pending_by_task_queue",
        "task_group_size",
        "unresolved_in_group",
        "claimed_runs",
        "expired_artifacts",
        "artifacts_of_tasks",
        "all_clients",
        "get_roles",
    }
)
"""The named statements whose cost grows with the tables rather than with what they return
(counts; a group's unresolved tasks, read among all of its tasks; a queue's running runs,
sorted by a time inside their JSON), the artifacts of a batch of tasks being deleted, and
every client or every role (the auth reload after a write), which may be many: run on the
store thread."""


class _KeyReleased(Exception):
    """Rolls back a key claimed for a task that was then not inserted."""


def _insert_all(
    conn: sqlite3.Connection, records: Sequence[TaskRecord], rows: Sequence[dict[str, Any]]
) -> set[str]:
    """Insert records (``rows`` their columns), their groups and their edges in the caller's
    transaction; the ids inserted. Not inserted: an id that exists, a task whose group refuses
    it (sealed, or another schedulerId's). Each group is upserted once per schedulerId, in the
    order the batch first names them, with the latest expiry of those tasks."""
    groups: dict[tuple[str, str], int] = {}
    for record in records:
        key = (record.task_group_id, record.scheduler_id)
        groups[key] = max(groups.get(key, record.expires), record.expires)
    accepted = {
        key
        for key, expires in groups.items()
        if conn.execute(
            _Q["upsert_task_group"],
            {"task_group_id": key[0], "scheduler_id": key[1], "expires": expires},
        ).fetchone()
        is not None
    }
    inserted = [
        record
        for record, columns in zip(records, rows, strict=True)
        if (record.task_group_id, record.scheduler_id) in accepted
        and conn.execute(_Q["insert_task"], columns).rowcount == 1
    ]
    conn.executemany(
        _Q["insert_dependency"],
        [
            {"required_task_id": dep, "dependent_task_id": record.task_id}
            for record in inserted
            for dep in record.dependencies
        ],
    )
    conn.executemany(_Q["insert_tag"], tag_rows(inserted))
    _count_unresolved(
        conn, Counter(r.task_group_id for r in inserted if r.open_deadline is not None)
    )
    return {record.task_id for record in inserted}


def _count_unresolved(conn: sqlite3.Connection, deltas: Mapping[str, int]) -> None:
    """Add ``deltas`` (by group) to the groups' counts of unresolved tasks, in the caller's
    transaction, which wrote the tasks they count."""
    rows = [{"task_group_id": g, "delta": d} for g, d in deltas.items() if d]
    if rows:
        conn.executemany(_Q["count_unresolved"], rows)


def _recount_unresolved(conn: sqlite3.Connection) -> None:
    """Set each group's count of unresolved tasks to what its tasks say where the two differ,
    in the caller's transaction: at start-up, which fills the counts of a store written before
    they were kept and repairs those a release that did not keep them left behind (a
    rollback). Reads the unresolved tasks and the groups counting some, not every task."""
    actual = dict(conn.execute(_Q["unresolved_by_group"]).fetchall())
    stored = dict(conn.execute(_Q["counting_groups"]).fetchall())
    _count_unresolved(
        conn, {group: actual.get(group, 0) - stored.get(group, 0) for group in actual | stored}
    )


def _status_params(record: TaskRecord) -> dict[str, Any]:
    """What :func:`_write_statuses` writes of ``record`` (its group: for the count of its
    unresolved tasks, which a resolution or a rerun changes)."""
    return {
        **status_columns(record),
        "version": record.version,
        "task_group_id": record.task_group_id,
    }


_STATUS_COLUMNS = (
    "retries_left",
    "runs",
    "state",
    "taken_until",
    "open_deadline",
    "hint_due",
    "visible_at",
    "pending_priority",
    "resolved",
    "notify_dependents",
)
"""The status columns :func:`_write_statuses` writes only when their value changes
(``definition`` only when a transition changed it)."""

Written = tuple[int, bool]
"""What a won compare-and-set stored: the version and ``notify_dependents``."""


def _in(name: str, ids: Sequence[str]) -> str:
    """The named statement with its ``{ids}`` a parameter mark per id."""
    return _Q[name].format(ids=",".join("?" * len(ids)))


def _compare_and_set_all(
    conn: sqlite3.Connection, params: Sequence[dict[str, Any]]
) -> list[Written | None]:
    """Write each status of ``params`` (:func:`_status_params` of distinct tasks) whose
    stored version is still the one read, in the caller's transaction; per params, what it
    stored, or ``None`` for a lost race."""
    ids = [p["task_id"] for p in params]
    stored = {row["task_id"]: row for row in conn.execute(_in("stored_statuses", ids), ids)}
    return _write_statuses(conn, params, stored)


def _write_statuses(
    conn: sqlite3.Connection,
    params: Sequence[dict[str, Any]],
    stored: Mapping[str, sqlite3.Row],
) -> list[Written | None]:
    """The writes of :func:`_compare_and_set_all`, given the rows' statuses as read in the
    caller's transaction (``stored``, by task id): one ``executemany`` per combination of
    changed columns. ``notify_dependents`` is kept only for a task that has dependents."""
    notifying = [p["task_id"] for p in params if p["notify_dependents"]]
    with_dependents = (
        {row[0] for row in conn.execute(_in("with_dependents", notifying), notifying)}
        if notifying
        else set()
    )
    updates: dict[str, list[dict[str, Any]]] = {}
    written: list[Written | None] = []
    unresolved: Counter[str] = Counter()
    for p in params:
        row = stored.get(p["task_id"])
        if row is None or row["version"] != p["version"]:
            written.append(None)
            continue
        values = {**p, "notify_dependents": p["task_id"] in with_dependents}
        changed = tuple(column for column in _STATUS_COLUMNS if values[column] != row[column])
        statement = _compare_and_set_statement(changed, definition=p["definition"] is not None)
        updates.setdefault(statement, []).append(values)
        written.append((p["version"] + 1, values["notify_dependents"]))
        if (p["open_deadline"] is None) != (row["open_deadline"] is None):
            unresolved[p["task_group_id"]] += -1 if p["open_deadline"] is None else 1
    for statement, rows in updates.items():
        conn.executemany(statement, rows)
    _count_unresolved(conn, unresolved)
    return written


@functools.lru_cache(maxsize=256)
def _compare_and_set_statement(changed: tuple[str, ...], *, definition: bool) -> str:
    """The ``compare_and_set`` statement for one combination of changed columns."""
    assignments = "".join(f"{column} = :{column}, " for column in changed)
    if definition:
        assignments += "definition = :definition, "
    return _Q["compare_and_set"].format(assignments=assignments)


def _picked_runs(
    conn: sqlite3.Connection, query: Mapping[str, Any], pick: PickLevels
) -> list[sqlite3.Row]:
    """claim_pending's runs as ``pick`` draws them: each level's earliest visible, read one
    level at a time (in process, from the index: no round trip to save)."""
    by_level: dict[int, list[sqlite3.Row]] = {}
    for priority in PRIORITIES:
        level = priority_level(priority)
        rows = conn.execute(_Q["claimable_runs_at_level"], {**query, "level": level}).fetchall()
        if rows:
            by_level[level] = rows
    quotas = pick({level: len(rows) for level, rows in by_level.items()})
    return [row for level, rows in by_level.items() for row in rows[: quotas.get(level, 0)]]


def _keyed_runs(
    conn: sqlite3.Connection,
    query: Mapping[str, Any],
    *,
    max_per_key: int,
    pick: PickLevels | None,
) -> tuple[list[sqlite3.Row], dict[Key, int]]:
    """claim_pending's runs of a queue with ``maxRunningPerKey``, as
    :func:`~coordinator.domain.concurrency_keys.serve_keys` takes them, and the turns of the
    keys served (in process: each key's and level's candidates read from the index, no round
    trip to save)."""
    limit = query["limit"]
    per_key = min(limit, max_per_key)
    running = {row[0]: row[1] for row in conn.execute(_Q["running_by_key"], query)}
    turns = turns_from_rows(conn.execute(_Q["key_turns"], query).fetchall())
    read: dict[str, sqlite3.Row] = {}
    candidates: list[Candidate] = []
    for priority in PRIORITIES:
        at_level = {**query, "level": priority_level(priority)}
        of_key = {**at_level, "limit": per_key}
        found: list[tuple[Key, list[sqlite3.Row]]] = [
            (key, conn.execute(_Q["claimable_runs_of_key"], {**of_key, "key": key}).fetchall())
            for (key,) in conn.execute(_Q["claimable_keys_at_level"], at_level).fetchall()
            if running.get(key, 0) < max_per_key
        ]
        found.append((UNKEYED, conn.execute(_Q["claimable_unkeyed_at_level"], at_level).fetchall()))
        for key, rows in found:
            for row in rows:
                read[row["task_id"]] = row
                candidates.append(Candidate(row["task_id"], row["pending_priority"], key))
    served = serve_keys(
        candidates, running=running, turns=turns, max_per_key=max_per_key, limit=limit, pick=pick
    )
    return [read[candidate.task_id] for candidate in served.chosen], served.turns


def _write_outbox(conn: sqlite3.Connection, rows: list[dict[str, Any]]) -> None:
    """Write these outbox rows (from :func:`outbox_rows`), in the caller's transaction."""
    if rows:
        conn.executemany(_Q["insert_outbox_event"], rows)


def _write_reply(conn: sqlite3.Connection, writes: ReplyWrites) -> None:
    """The outbox writes after a broker's reply, in the caller's transaction."""
    conn.executemany(_Q["park_outbox_event"], writes.parks)
    conn.executemany(_Q["retry_outbox_event"], writes.retries)
    conn.execute(_Q["delete_outbox_events"], {"ids": json.dumps(writes.deleted)})


def _groups_resolved(conn: sqlite3.Connection, group_ids: Iterable[str]) -> None:
    """task-group-resolved of each of these groups that has no unresolved task left, in the
    caller's transaction, after its resolving writes: one writer at a time holds the file, so
    of a group's last resolutions exactly the last one finds none. The group's count of
    unresolved tasks answers it, not its tasks (read from those, the question cost a walk of
    the group's resolved tasks)."""
    for group_id in sorted(set(group_ids)):
        row = conn.execute(_Q["resolved_task_group"], {"task_group_id": group_id}).fetchone()
        if row is not None:
            event = group_event("task-group-resolved", task_group_from_row(row))
            _write_outbox(conn, outbox_rows([event]))


def _write_index(
    conn: sqlite3.Connection,
    written: Iterable[TaskRecord],
    index: Mapping[str, Sequence[IndexedTask]],
) -> None:
    """The index entries of these written records' completions, in the caller's transaction
    (the rank rule judged at each one's ``resolved`` time)."""
    for record in written:
        for entry in index.get(record.task_id, ()):
            columns = indexed_task_columns(entry, now=record.resolved or 0)
            if conn.execute(_Q["upsert_indexed_task"], columns).fetchall():
                conn.executemany(_Q["upsert_index_namespace"], namespace_columns(entry))


def _delete_ids(conn: sqlite3.Connection, ids: list[str]) -> None:
    """Delete these tasks and their dependency edges both ways (their tags go by cascade), in
    the caller's transaction."""
    if ids:
        marks = ",".join("?" * len(ids))
        closing = conn.execute(_Q["unresolved_to_delete"].format(ids=marks), ids)
        _count_unresolved(conn, {group: -count for group, count in closing})
        conn.execute(_Q["delete_tasks"].format(ids=marks), ids)
        conn.execute(_Q["delete_dependencies"].format(ids=marks), ids + ids)


class SQLiteStore(SQLStore):
    """Store on one SQLite file.

    :param path: the database file; its directory is created if missing.
    """

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._commits: GroupCommit | None = None
        self._checkpoints: WalCheckpoints | None = None
        self._outbox_lock = asyncio.Lock()
        self._queue_locks = ProcessLocks()
        self._outages = OutageWatch(store=f"sqlite://{self._path.absolute()}", is_outage=_is_outage)

    def queue_lock(self, task_queue: TaskQueue) -> contextlib.AbstractAsyncContextManager[None]:
        # One process has the database: its own lock is the only one there is.
        return self._queue_locks.hold(task_queue)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn``'s statements on the event loop, group-committed with the calls waiting
        with it; its result once the transaction is committed."""
        return await self._outages.watch(self._submit(fn, Where.LOOP))

    async def _run_scan(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the store thread in a transaction of its own: for what takes longer
        the larger the tables are, which must not hold the event loop."""
        return await self._outages.watch(self._submit(fn, Where.THREAD))

    async def _run_alone(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the store thread outside any transaction: for what must not run in
        one (``executescript``, which commits first)."""
        return await self._submit(fn, Where.BARE)

    def _submit(self, fn: Callable[[sqlite3.Connection], T], where: Where) -> asyncio.Future[T]:
        if self._commits is None:
            raise RuntimeError("SQLiteStore used before open() or after close()")
        return self._commits.submit(fn, where)

    async def open(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: WAL commits are fsynced before the call returns, so a 200 survives a power
            # cut (NORMAL only survives the process dying); group commit pays for the fsyncs.
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            # off by default in SQLite; task_tags rows go with their task (ON DELETE CASCADE)
            conn.execute("PRAGMA foreign_keys=ON")
            # A statement that may need undoing on its own (an insert ON CONFLICT, one with
            # foreign keys to check) keeps a statement journal: a file by default, written on
            # every such insert; in memory it costs a tenth of the insert less. The statements
            # are small, and the sorts and counts of the listings are bounded by their pages.
            conn.execute("PRAGMA temp_store=MEMORY")
            return conn

        loop = asyncio.get_running_loop()
        conn = await loop.run_in_executor(self._executor, connect)
        self._checkpoints = await loop.run_in_executor(self._executor, WalCheckpoints, self._path)
        self._commits = GroupCommit(conn, self._executor, written=self._checkpoints.written)
        await self.migrate()
        await self._run_scan(_recount_unresolved)

    async def close(self) -> None:
        if self._checkpoints is not None:
            # first: the store's connection, closed last, checkpoints all and deletes the WAL
            checkpoints, self._checkpoints = self._checkpoints, None
            await asyncio.to_thread(checkpoints.close)
        if self._commits is not None:
            commits, self._commits = self._commits, None
            await commits.close()
        self._executor.shutdown(wait=True)

    async def migrate(self) -> list[int]:
        def apply(conn: sqlite3.Connection) -> list[int]:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied INTEGER NOT NULL)"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            applied = []
            for migration in migrations("sqlite"):
                if migration.version in done:
                    continue
                # executescript() commits first; wrap the whole file so it applies all-or-nothing
                conn.executescript(
                    "BEGIN IMMEDIATE;\n"
                    + migration.sql
                    + f"\nINSERT INTO schema_migrations VALUES ({migration.version}, "
                    f"'{migration.name}', {int(time.time() * 1000)});\nCOMMIT;"
                )
                applied.append(migration.version)
            return applied

        return await self._run_alone(apply)

    # --- single records -------------------------------------------------------------------

    async def insert(
        self, record: TaskRecord, *, events: Sequence[QueueEvent] = ()
    ) -> TaskRecord | None:
        columns = insert_columns(record)
        outbox = outbox_rows(events)

        def insert(conn: sqlite3.Connection) -> set[str]:
            inserted = _insert_all(conn, [record], [columns])
            if inserted:
                _write_outbox(conn, outbox)
            return inserted

        if not await self._run(insert):
            return None
        return record.replace(version=1)

    async def insert_keyed(
        self,
        record: TaskRecord,
        key: str,
        *,
        holder: str | None,
        events: Sequence[QueueEvent] = (),
    ) -> KeyedInsert:
        columns = deduplication_key_columns(record, key, holder)
        claim = _Q["insert_deduplication_key" if holder is None else "take_over_deduplication_key"]
        task_columns = insert_columns(record)
        outbox = outbox_rows(events)

        def insert(conn: sqlite3.Connection) -> KeyedInsert:
            if conn.execute(claim, columns).fetchone() is None:
                held = conn.execute(_Q["deduplication_key_holder"], columns).fetchone()
                return KeyedInsert(claimed=False, holder=None if held is None else held[0])
            if not _insert_all(conn, [record], [task_columns]):
                # the call's savepoint undoes the key's claim
                raise _KeyReleased
            _write_outbox(conn, outbox)
            return KeyedInsert(claimed=True, stored=record.replace(version=1))

        try:
            return await self._run(insert)
        except _KeyReleased:
            return KeyedInsert(claimed=True)

    async def insert_many(
        self,
        records: Sequence[TaskRecord],
        *,
        events: Mapping[str, Sequence[QueueEvent]] | None = None,
    ) -> set[str]:
        rows = [insert_columns(record) for record in records]

        def insert(conn: sqlite3.Connection) -> set[str]:
            inserted = _insert_all(conn, records, rows)
            if events:
                _write_outbox(conn, written_outbox_rows(records, inserted, events))
            return inserted

        return await self._run(insert)

    async def _fetch_in(self, name: str, task_ids: Sequence[str]) -> list[sqlite3.Row]:
        if not task_ids:
            return []
        statement = _in(name, task_ids)
        run = self._run_scan if name in SCANS else self._run
        return await run(lambda conn: conn.execute(statement, list(task_ids)).fetchall())

    async def compare_and_set(
        self,
        record: TaskRecord,
        *,
        events: Sequence[QueueEvent] = (),
        resolving: bool = False,
        index: Sequence[IndexedTask] = (),
    ) -> TaskRecord | None:
        params = _status_params(record)
        outbox = outbox_rows(events)
        announce = (record.task_group_id,) if resolving and events else ()

        def write(conn: sqlite3.Connection) -> Written | None:
            [written] = _compare_and_set_all(conn, [params])
            if written is not None:
                _write_outbox(conn, outbox)
                _groups_resolved(conn, announce)
                _write_index(conn, [record], {record.task_id: index})
            return written

        written = await self._run(write)
        return None if written is None else stored_after_cas(record, *written)

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
        params = [_status_params(r) for r in records]

        def write(conn: sqlite3.Connection) -> list[Written | None]:
            rows = _compare_and_set_all(conn, params)
            won = [r for r, row in zip(records, rows, strict=True) if row]
            if index:
                _write_index(conn, won, index)
            if artifacts:
                conn.executemany(_Q["insert_inline_artifact"], inline_columns(won, artifacts))
            if events:
                written = {r.task_id for r in won}
                _write_outbox(conn, written_outbox_rows(records, written, events))
                _groups_resolved(
                    conn,
                    (r.task_group_id for r in records if r.task_id in written & set(resolving)),
                )
                if closing is not None and len(written) == len(records):
                    _write_outbox(conn, outbox_rows(closing(len(records))))
            return rows

        rows = await self._run(write) if params else []
        return [
            None if row is None else stored_after_cas(record, *row)
            for record, row in zip(records, rows, strict=True)
        ]

    async def claim_pending(
        self,
        task_queue: TaskQueue,
        *,
        now: int,
        limit: int,
        claim: ClaimPending,
        pick: PickLevels | None = None,
        max_per_key: int | None = None,
    ) -> list[TaskRecord]:
        query = {**task_queue_columns(task_queue), "now": now, "limit": limit}

        def take(conn: sqlite3.Connection) -> list[TaskRecord]:
            turns: dict[Key, int] | None = None
            if max_per_key is not None:
                rows, turns = _keyed_runs(conn, query, max_per_key=max_per_key, pick=pick)
            elif pick is None:
                rows = conn.execute(_Q["claimable_runs"], query).fetchall()
            else:
                rows = _picked_runs(conn, query, pick)
            if not rows:
                return []
            read = {row["task_id"]: row for row in rows}
            writes = claim([record_from_row(row) for row in rows])
            # read in this transaction, and nothing else writes: every version still holds
            params = [_status_params(record) for record, _ in writes]
            stored: list[TaskRecord] = []
            outbox: list[dict[str, Any]] = []
            for (record, events), written in zip(
                writes, _write_statuses(conn, params, read), strict=True
            ):
                if written is not None:
                    stored.append(stored_after_cas(record, *written))
                    outbox.extend(outbox_rows(events))
            _write_outbox(conn, outbox)
            if turns:
                conn.executemany(_Q["set_key_turn"], turn_rows(task_queue, turns, stored))
            return stored

        return await self._run(take)

    async def announce_pending(self, announcements: Sequence[PendingAnnouncement]) -> None:
        pass  # one process per file: its waiters were woken in process

    async def listen_pending(self, on_pending: Callable[[PendingAnnouncement], None]) -> None:
        pass  # nobody else announces on this file

    # No task inbox: a producer cannot share a transaction with the one process on the file.

    async def ingest_inbox(self, limit: int, ingest: IngestRows) -> int:
        return 0

    async def rejected_inbox_rows(self, *, limit: int, after: int | None) -> list[InboxRow]:
        return []

    async def delete_inbox_row(self, row_id: int) -> bool:
        return False

    async def count_rejected_inbox_rows(self) -> int:
        return 0

    async def listen_inbox(self, on_insert: Callable[[], None]) -> None:
        pass

    async def publish_outbox(
        self,
        limit: int,
        publish: Callable[[Sequence[OutboxEntry]], Awaitable[BrokerReply]],
        *,
        now: int,
    ) -> OutboxPass:
        # One publisher per SQLite file (the coordinator's event publisher process, or its
        # loop with COORDINATOR_PULSE_IN_PROCESS): a lock between reading and deleting would
        # only hold group commits up.
        async with self._outbox_lock:
            rows = await self._fetch("outbox_events", limit=limit, now=now)
            if not rows:
                return OutboxPass()
            entries = [entry_from_row(row) for row in rows]
            writes = writes_after_reply(entries, await publish(entries), now=now)
            if writes.needed:
                await self._run(lambda conn: _write_reply(conn, writes))
            return writes.outcome

    async def _seal_announcing(self, task_group_id: str, *, now: int) -> TaskGroup | None:
        def seal(conn: sqlite3.Connection) -> TaskGroup | None:
            params = {"task_group_id": task_group_id, "now": now}
            row = conn.execute(_Q["seal_task_group"], params).fetchone()
            if row is None:
                return None
            group = task_group_from_row(row)
            _write_outbox(conn, outbox_rows([group_event("task-group-sealed", group)]))
            return group

        return await self._run(seal)

    async def append_events(self, events: Sequence[QueueEvent]) -> None:
        rows = outbox_rows(events)
        if rows:
            await self._run(lambda conn: _write_outbox(conn, rows))

    async def confirm_hints(self, hints: Sequence[tuple[str, int]]) -> None:
        params = [{"task_id": task_id, "run_id": run_id} for task_id, run_id in hints]

        if params:
            await self._run(lambda conn: conn.executemany(_Q["confirm_hint"], params))

    async def _fetch(self, name: str, **params: Any) -> list[sqlite3.Row]:
        run = self._run_scan if name in SCANS else self._run
        return await run(lambda conn: conn.execute(_Q[name], params).fetchall())

    async def _fetch_announcing(
        self, name: str, events: Sequence[QueueEvent], **params: Any
    ) -> list[sqlite3.Row]:
        outbox = outbox_rows(events)

        def fetch(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            rows = conn.execute(_Q[name], params).fetchall()
            if rows:
                _write_outbox(conn, outbox)
            return rows

        return await self._run(fetch)

    async def _fetch_then(
        self,
        name: str,
        params: Mapping[str, Any],
        *,
        then: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
        events: Sequence[QueueEvent] = (),
    ) -> list[sqlite3.Row]:
        outbox = outbox_rows(events)

        def fetch(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            rows = conn.execute(_Q[name], params).fetchall()
            if rows:
                for step, many in then:
                    conn.executemany(_Q[step], many)
                _write_outbox(conn, outbox)
            return rows

        return await self._run(fetch)

    async def _fetch_filtered(
        self, name: str, matching: TaskFilter, **params: Any
    ) -> list[sqlite3.Row]:
        clause = filter_clause(matching)
        sql, values = _Q[name].format(filters=clause.sql), {**params, **clause.params}
        return await self._run_scan(lambda conn: conn.execute(sql, values).fetchall())

    async def delete_matching(self, matching: TaskFilter, *, now: int, limit: int) -> int:
        clause = filter_clause(matching)
        sql = _Q["matching_task_ids"].format(filters=clause.sql)
        values = {**clause.params, "now": now, "after": "", "limit": limit}

        def delete(conn: sqlite3.Connection) -> int:
            ids = [row[0] for row in conn.execute(sql, values)]
            _delete_ids(conn, ids)
            return len(ids)

        return await self._run_scan(delete)

    async def shared_secret(self, name: str, *, new: str) -> str:
        def get(conn: sqlite3.Connection) -> str:
            conn.execute(_Q["insert_shared_secret"], {"secret_name": name, "secret": new})
            secret: str = conn.execute(_Q["shared_secret"], {"secret_name": name}).fetchone()[0]
            return secret

        return await self._run(get)

    async def delete_expired(self, now: int, limit: int) -> int:
        def delete(conn: sqlite3.Connection) -> int:
            params = {"now": now, "limit": limit}
            ids = [row[0] for row in conn.execute(_Q["expired_task_ids"], params)]
            _delete_ids(conn, ids)
            conn.execute(_Q["delete_expired_groups"], params)
            conn.execute(_Q["delete_expired_deduplication_keys"], params)
            conn.execute(_Q["delete_expired_key_turns"], params)
            return len(ids)

        return await self._run_scan(delete)

    # --- task queues and workers ----------------------------------------------------------

    async def record_sightings(
        self, task_queues: Sequence[TaskQueueSighting], workers: Sequence[WorkerSighting]
    ) -> None:
        def record(conn: sqlite3.Connection) -> None:
            conn.executemany(
                _Q["upsert_task_queue"], [task_queue_sighting_columns(s) for s in task_queues]
            )
            # The recent tasks are merged here, in the transaction that writes them back:
            # only the serve process writes sightings, so nothing can write in between.
            upserts = []
            for sighting in workers:
                row = conn.execute(
                    _Q["worker_recent_tasks"], worker_columns(sighting.key)
                ).fetchone()
                stored = recent_from_json(row[0]) if row is not None else ()
                merged = recent_tasks(stored, sighting.recent_tasks)
                upserts.append(worker_sighting_columns(sighting, merged))
            conn.executemany(_Q["upsert_worker"], upserts)

        if task_queues or workers:
            await self._run(record)

    async def run_counts_of(
        self, task_queues: Sequence[TaskQueue], *, now: int
    ) -> dict[TaskQueue, RunCounts]:
        if not task_queues:
            return {}
        return counts_from_rows(await self._per_queue("run_counts_of", task_queues, now=now))

    async def _per_queue(
        self, name: str, task_queues: Sequence[TaskQueue], **params: Any
    ) -> list[sqlite3.Row]:
        """Statement ``name`` whose ``{queues}`` are ``task_queues``, as (pN, wN) pairs."""
        for index, task_queue in enumerate(task_queues):
            params[f"p{index}"], params[f"w{index}"] = (
                task_queue.provisioner_id,
                task_queue.worker_type,
            )
        statement = _Q[name].format(
            queues=",".join(f"(:p{index}, :w{index})" for index in range(len(task_queues)))
        )
        return await self._run_scan(lambda conn: conn.execute(statement, params).fetchall())

    # --- resolutions ------------------------------------------------------------------------

    async def resolved_counts_of(
        self, task_queues: Sequence[TaskQueue], *, since: int
    ) -> dict[TaskQueue, ResolvedCounts]:
        if not task_queues:
            return {}
        rows = await self._per_queue("resolved_counts_of", task_queues, since=since)
        return resolved_counts_from_rows(rows)

    # --- artifacts --------------------------------------------------------------------------

    async def insert_artifact(
        self, artifact: Artifact, *, events: Sequence[QueueEvent] = ()
    ) -> Artifact | None:
        columns = artifact_columns(artifact)
        outbox = outbox_rows(events)

        def insert(conn: sqlite3.Connection) -> sqlite3.Row | None:
            if conn.execute(_Q["insert_artifact"], columns).fetchone() is not None:
                _write_outbox(conn, outbox)
                return None
            existing: sqlite3.Row | None = conn.execute(_Q["get_artifact"], columns).fetchone()
            if existing is None:
                raise InputError("Task not found")
            return existing

        existing = await self._run(insert)
        return None if existing is None else artifact_from_row(existing)

    async def replace_artifact(
        self, artifact: Artifact, *, events: Sequence[QueueEvent] = ()
    ) -> None:
        columns = artifact_columns(artifact)
        outbox = outbox_rows(events)

        def replace(conn: sqlite3.Connection) -> None:
            conn.execute(_Q["replace_artifact"], columns).fetchall()
            _write_outbox(conn, outbox)

        await self._run(replace)

    async def delete_artifacts(self, keys: Sequence[ArtifactKey]) -> int:
        params = [key_columns(*key) for key in keys]

        def delete(conn: sqlite3.Connection) -> int:
            return conn.executemany(_Q["delete_artifact"], params).rowcount

        return await self._run_scan(delete) if params else 0
