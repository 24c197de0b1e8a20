"""The SQLite store: the embedded default, for a single coordinator process.

One ``sqlite3`` connection lives on one dedicated thread; every store call runs there as a
single synchronous function, so a multi-statement transaction can never interleave with
another coroutine's statements, and the event loop never blocks on the file. The database is
in WAL mode with ``synchronous=FULL``: every commit is fsynced before its caller hears of it,
so a write that returned (a 200 from createTask) survives a power cut, not only the process
being killed.

An fsync per call would cost throughput (docs/performance.md), so calls are group-committed:
when several are waiting for the store thread, they run in one transaction, each in its own
SAVEPOINT (a call that raises rolls back only itself and gets its own error), and every
caller gets its result once the one COMMIT has returned. A call that finds nothing else
waiting runs alone, as it would without batching. Several processes must not share one file;
use the PostgreSQL store for replicas.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from coordinator.domain.listings import RunCounts
from coordinator.domain.records import TaskRecord, TaskState
from coordinator.domain.task_filters import TaskFilter
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.workers import TaskQueueSighting, WorkerSighting, recent_tasks
from coordinator.store.rows import (
    insert_columns,
    record_from_row,
    status_columns,
    stored_after_cas,
    tag_rows,
)
from coordinator.store.sql_store import SQLStore
from coordinator.store.sqlfiles import migrations, queries
from coordinator.store.task_filters import filter_clause
from coordinator.store.worker_rows import (
    counts_from_rows,
    queue_sighting_columns,
    recent_from_json,
    worker_columns,
    worker_sighting_columns,
)

T = TypeVar("T")
_Q = queries("sqlite")

# A group commit holds its callers until the COMMIT, so it stops taking more calls at either
# bound; what is left waits for the next transaction, right after.
GROUP_MAX_CALLS = 256
GROUP_MAX_SECONDS = 0.005


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """Make the body atomic: BEGIN IMMEDIATE (take the write lock up front, so no upgrade
    deadlock) ... COMMIT when run alone, a SAVEPOINT inside a group commit's transaction."""
    if conn.in_transaction:
        with _savepoint(conn, "body"):
            yield
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextlib.contextmanager
def _savepoint(conn: sqlite3.Connection, name: str) -> Iterator[None]:
    """SAVEPOINT ... RELEASE, undoing the body's writes if it raises. An error that ended the
    whole transaction (SQLite rolls back on some, e.g. a full disk) leaves nothing to undo."""
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


@dataclasses.dataclass
class _Call(Generic[T]):
    """One store call waiting for the store thread, and the future its caller awaits."""

    fn: Callable[[sqlite3.Connection], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop
    outcome: tuple[T | None, BaseException | None] = (None, None)

    def run(self, conn: sqlite3.Connection, *, in_savepoint: bool) -> None:
        """Run the call and keep its outcome, result or error; in a savepoint, an error also
        undoes the call's writes."""
        try:
            with _savepoint(conn, "call") if in_savepoint else contextlib.nullcontext():
                self.outcome = (self.fn(conn), None)
        except Exception as error:  # handed to the caller, who raises it
            self.outcome = (None, error)

    def settle(self) -> None:
        """Hand the outcome to the caller (from the store thread)."""
        self.loop.call_soon_threadsafe(self._set)

    def _set(self) -> None:
        if self.future.done():  # the caller was cancelled
            return
        result, error = self.outcome
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(cast(T, result))


def _insert_one(conn: sqlite3.Connection, record: TaskRecord, columns: dict[str, Any]) -> bool:
    """Insert a record, its group and its edges in the caller's transaction; false when the
    id exists or the group refuses the task (sealed, or another schedulerId's)."""
    if conn.execute(_Q["upsert_task_group"], columns).fetchone() is None:
        return False
    if conn.execute(_Q["insert_task"], columns).rowcount == 0:
        return False
    conn.executemany(
        _Q["insert_dependency"],
        [
            {"required_task_id": dep, "dependent_task_id": record.task_id}
            for dep in record.dependencies
        ],
    )
    conn.executemany(_Q["insert_tag"], tag_rows([record]))
    return True


_STATUS_COLUMNS = (
    "retries_left",
    "runs",
    "state",
    "taken_until",
    "open_deadline",
    "hint_due",
    "visible_at",
    "resolved",
)
"""The status columns :func:`_compare_and_set` writes only when their value changes
(``definition`` and ``notify_dependents`` have their own rules)."""


def _compare_and_set(conn: sqlite3.Connection, params: dict[str, Any]) -> sqlite3.Row | None:
    """Write the status ``params`` (``status_columns`` and the version read) if the stored
    version is still the one read, in the caller's transaction, naming only the columns that
    change; the ``RETURNING version, notify_dependents`` row, or ``None`` for a lost race."""
    stored = conn.execute(_Q["stored_status"], params).fetchone()
    if stored is None or stored["version"] != params["version"]:
        return None
    changed = tuple(column for column in _STATUS_COLUMNS if params[column] != stored[column])
    definition = params["definition"] is not None
    # set, it needs the dependency check; cleared, it only needs writing if it was set
    notify = bool(params["notify_dependents"]) or bool(stored["notify_dependents"])
    row: sqlite3.Row | None = conn.execute(
        _compare_and_set_statement(changed, definition=definition, notify=notify), params
    ).fetchone()
    return row


@functools.lru_cache(maxsize=256)
def _compare_and_set_statement(changed: tuple[str, ...], *, definition: bool, notify: bool) -> str:
    """The ``compare_and_set`` statement for one combination of changed columns."""
    assignments = "".join(f"{column} = :{column}, " for column in changed)
    if definition:
        assignments += "definition = :definition, "
    if notify:
        assignments += _Q["notify_dependents"] + " "
    return _Q["compare_and_set"].format(assignments=assignments)


def _delete_ids(conn: sqlite3.Connection, ids: list[str]) -> None:
    """Delete these tasks and their dependency edges both ways (their tags go by cascade), in
    the caller's transaction."""
    if ids:
        marks = ",".join("?" * len(ids))
        conn.execute(_Q["delete_tasks"].format(ids=marks), ids)
        conn.execute(_Q["delete_dependencies"].format(ids=marks), ids + ids)


class SQLiteStore(SQLStore):
    """Store on one SQLite file.

    :param path: the database file; its directory is created if missing.
    """

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        self._conn: sqlite3.Connection | None = None
        # Appended on the event loop, taken on the store thread (deque ends are thread-safe).
        self._waiting: collections.deque[_Call[Any]] = collections.deque()

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the store thread, group-committed with whatever else is waiting."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("SQLiteStore used before open() or after close()")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        call = _Call(fn, future, loop)
        self._waiting.append(call)
        # One drain per call, submitted after the call is queued: a drain that runs finds it,
        # unless an earlier drain already took it (and then finds nothing, at no cost).
        self._executor.submit(self._drain, conn)
        return await future

    async def _run_alone(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the store thread outside any group commit: for what must not run in
        a transaction (``executescript``, which commits first; closing)."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("SQLiteStore used before open() or after close()")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, conn)

    def _drain(self, conn: sqlite3.Connection) -> None:
        """Run the calls waiting now (on the store thread): alone if there is one, otherwise
        as group commits of at most :data:`GROUP_MAX_CALLS`."""
        calls: list[_Call[Any]] = []
        while self._waiting and len(calls) < GROUP_MAX_CALLS:
            call = self._waiting.popleft()
            if not call.future.done():  # a cancelled caller's call is not run
                calls.append(call)
        if len(calls) == 1:
            calls[0].run(conn, in_savepoint=False)
            calls[0].settle()
            return
        while calls:
            calls = self._group_commit(conn, calls)

    def _group_commit(self, conn: sqlite3.Connection, calls: list[_Call[Any]]) -> list[_Call[Any]]:
        """Run calls in one transaction and settle those it committed (or the one that failed);
        return the rest, to run in the next one. The first call is always settled."""
        started = time.monotonic()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            for call in calls:
                call.outcome = (None, error)
                call.settle()
            return []
        done: list[_Call[Any]] = []
        for index, call in enumerate(calls):
            call.run(conn, in_savepoint=True)
            if not conn.in_transaction:
                # Its error rolled back the whole transaction: it alone failed; the calls
                # before it lost their writes and run again in the next transaction.
                call.settle()
                return done + calls[index + 1 :]
            done.append(call)
            if time.monotonic() - started > GROUP_MAX_SECONDS:
                break
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as error:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the callers get the COMMIT's error
                    conn.execute("ROLLBACK")
            for call in done:
                call.outcome = (None, error)
        for call in done:
            call.settle()
        return calls[len(done) :]

    async def open(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: WAL commits are fsynced before the call returns, so a 200 survives a power
            # cut (NORMAL only survives the process dying); group commit pays for the fsyncs.
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA busy_timeout=10000")
            # off by default in SQLite; task_tags rows go with their task (ON DELETE CASCADE)
            conn.execute("PRAGMA foreign_keys=ON")
            return conn

        loop = asyncio.get_running_loop()
        self._conn = await loop.run_in_executor(self._executor, connect)
        await self.migrate()

    async def close(self) -> None:
        if self._conn is not None:
            await self._run_alone(lambda conn: conn.close())
            self._conn = None
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

    async def insert(self, record: TaskRecord) -> TaskRecord | None:
        columns = insert_columns(record)

        def insert(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                return _insert_one(conn, record, columns)

        if not await self._run(insert):
            return None
        return record.replace(version=1)

    async def insert_many(self, records: Sequence[TaskRecord]) -> set[str]:
        rows = [insert_columns(record) for record in records]

        def insert(conn: sqlite3.Connection) -> set[str]:
            with _transaction(conn):
                return {
                    record.task_id
                    for record, columns in zip(records, rows, strict=True)
                    if _insert_one(conn, record, columns)
                }

        return await self._run(insert)

    async def get_many(self, task_ids: Sequence[str]) -> dict[str, TaskRecord]:
        rows = await self._select_in("get_many", task_ids)
        return {row["task_id"]: record_from_row(row) for row in rows}

    async def states(self, task_ids: Sequence[str]) -> dict[str, TaskState]:
        rows = await self._select_in("states", task_ids)
        return {row["task_id"]: cast(TaskState, row["state"]) for row in rows}

    async def _select_in(self, name: str, ids: Sequence[str]) -> list[sqlite3.Row]:
        if not ids:
            return []
        statement = _Q[name].format(ids=",".join("?" * len(ids)))
        return await self._run(lambda conn: conn.execute(statement, list(ids)).fetchall())

    async def compare_and_set(self, record: TaskRecord) -> TaskRecord | None:
        params = {**status_columns(record), "version": record.version}

        def write(conn: sqlite3.Connection) -> Any:
            with _transaction(conn):
                return _compare_and_set(conn, params)

        row = await self._run(write)
        return None if row is None else stored_after_cas(record, row)

    async def compare_and_set_many(self, records: Sequence[TaskRecord]) -> list[TaskRecord | None]:
        params = [{**status_columns(r), "version": r.version} for r in records]

        def write(conn: sqlite3.Connection) -> list[Any]:
            with _transaction(conn):
                return [_compare_and_set(conn, p) for p in params]

        rows = await self._run(write) if params else []
        return [
            None if row is None else stored_after_cas(record, row)
            for record, row in zip(records, rows, strict=True)
        ]

    async def confirm_hints(self, hints: Sequence[tuple[str, int]]) -> None:
        params = [{"task_id": task_id, "run_id": run_id} for task_id, run_id in hints]

        def confirm(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.executemany(_Q["confirm_hint"], params)

        if params:
            await self._run(confirm)

    async def _fetch(self, name: str, **params: Any) -> list[sqlite3.Row]:
        return await self._run(lambda conn: conn.execute(_Q[name], params).fetchall())

    async def _fetch_filtered(
        self, name: str, matching: TaskFilter, **params: Any
    ) -> list[sqlite3.Row]:
        clause = filter_clause(matching)
        sql, values = _Q[name].format(filters=clause.sql), {**params, **clause.params}
        return await self._run(lambda conn: conn.execute(sql, values).fetchall())

    async def delete_matching(self, matching: TaskFilter, *, now: int, limit: int) -> int:
        clause = filter_clause(matching)
        sql = _Q["matching_task_ids"].format(filters=clause.sql)
        values = {**clause.params, "now": now, "after": "", "limit": limit}

        def delete(conn: sqlite3.Connection) -> int:
            with _transaction(conn):
                ids = [row[0] for row in conn.execute(sql, values)]
                _delete_ids(conn, ids)
                return len(ids)

        return await self._run(delete)

    async def shared_secret(self, name: str, *, new: str) -> str:
        def get(conn: sqlite3.Connection) -> str:
            with _transaction(conn):
                conn.execute(_Q["insert_shared_secret"], {"secret_name": name, "secret": new})
                secret: str = conn.execute(_Q["shared_secret"], {"secret_name": name}).fetchone()[0]
                return secret

        return await self._run(get)

    async def delete_expired(self, now: int, limit: int) -> int:
        def delete(conn: sqlite3.Connection) -> int:
            with _transaction(conn):
                params = {"now": now, "limit": limit}
                ids = [row[0] for row in conn.execute(_Q["expired_task_ids"], params)]
                _delete_ids(conn, ids)
                conn.execute(_Q["delete_expired_groups"], params)
                return len(ids)

        return await self._run(delete)

    # --- task queues and workers ----------------------------------------------------------

    async def record_sightings(
        self, queues: Sequence[TaskQueueSighting], workers: Sequence[WorkerSighting]
    ) -> None:
        def record(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.executemany(
                    _Q["upsert_task_queue"], [queue_sighting_columns(s) for s in queues]
                )
                # The recent tasks are merged here, in the transaction that writes them back:
                # one process owns the file, so nothing can write in between.
                upserts = []
                for sighting in workers:
                    row = conn.execute(
                        _Q["worker_recent_tasks"], worker_columns(sighting.key)
                    ).fetchone()
                    stored = recent_from_json(row[0]) if row is not None else ()
                    merged = recent_tasks(stored, sighting.recent_tasks)
                    upserts.append(worker_sighting_columns(sighting, merged))
                conn.executemany(_Q["upsert_worker"], upserts)

        if queues or workers:
            await self._run(record)

    async def run_counts_of(
        self, queues: Sequence[TaskQueue], *, now: int
    ) -> dict[TaskQueue, RunCounts]:
        if not queues:
            return {}
        params: dict[str, Any] = {"now": now}
        for index, queue in enumerate(queues):
            params[f"p{index}"], params[f"w{index}"] = queue.provisioner_id, queue.worker_type
        statement = _Q["run_counts_of"].format(
            queues=",".join(f"(:p{index}, :w{index})" for index in range(len(queues)))
        )
        rows = await self._run(lambda conn: conn.execute(statement, params).fetchall())
        return counts_from_rows(rows)
