"""The SQLite store's scheduler: which call has the one connection, where its statements run,
and which calls share a transaction (group commit). :mod:`coordinator.store.sqlite` holds the
statements; this module knows nothing of tasks.

One ``sqlite3`` connection serves every call, one call's statements at a time, so a
multi-statement call can never interleave with another coroutine's.

Where each call runs is a matter of CPU, measured in docs/performance-history.md: a statement
run on a helper thread while the event loop is busy costs three to four times its own CPU in
hand-offs of the interpreter lock. So the short calls of the request path (:attr:`Where.LOOP`)
run their statements on the event loop, and only their COMMIT, which waits for the fsync, goes
to the store thread (a transaction that wrote nothing commits on the loop). Calls that scan
(:attr:`Where.THREAD`: counts, filtered listings, sweeps) run wholly on the store thread, in
their own transaction, so a long scan never stalls the loop.

The event loop never waits for another process's write lock (the event publisher's, deleting
what the broker confirmed): the connection's busy timeout is 0 there, and a group whose BEGIN
finds the file locked waits for it on the store thread, with the timeout the connection was
opened with, while the loop goes on; the calls run on the loop once the lock is theirs.

An fsync per call would cost throughput, so short calls are group-committed: those that arrive
while a commit is in flight wait, then run together in one transaction, each in its own
SAVEPOINT (a call that raises rolls back only itself and gets its own error), and every caller
gets its result once the one COMMIT has returned. A call that finds the connection free runs
at once, alone.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import enum
import functools
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")

# A group commit holds its callers until the COMMIT, and its statements hold the event loop,
# so it stops taking more calls at either bound; what is left runs in the next transaction.
GROUP_MAX_CALLS = 256
GROUP_MAX_SECONDS = 0.005

_CLOSED = "SQLiteStore used after close()"


class Where(enum.Enum):
    """Where a call runs, and in what transaction."""

    LOOP = "statements on the event loop, group-committed; the COMMIT on the store thread"
    THREAD = "on the store thread, alone in its own transaction"
    BARE = "on the store thread, outside any transaction (executescript, close)"


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
    """One store call waiting for the connection, and the future its caller awaits."""

    fn: Callable[[sqlite3.Connection], T]
    future: asyncio.Future[T]
    where: Where
    outcome: tuple[T | None, BaseException | None] = (None, None)

    def run(self, conn: sqlite3.Connection, *, in_savepoint: bool) -> None:
        """Run the call and keep its outcome, result or error; in a savepoint, an error also
        undoes the call's writes."""
        try:
            with _savepoint(conn, "call") if in_savepoint else contextlib.nullcontext():
                self.outcome = (self.fn(conn), None)
        except Exception as error:  # handed to the caller, who raises it
            self.outcome = (None, error)

    @property
    def failed(self) -> bool:
        return self.outcome[1] is not None

    def deliver(self) -> None:
        """Hand the outcome to the caller (on the event loop)."""
        if self.future.done():  # the caller was cancelled
            return
        result, error = self.outcome
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(cast(T, result))


def _busy_timeout(conn: sqlite3.Connection, ms: int) -> None:
    conn.execute(f"PRAGMA busy_timeout={ms}")


@contextlib.contextmanager
def _waiting(conn: sqlite3.Connection, ms: int) -> Iterator[None]:
    """The connection waits up to ``ms`` for another process's lock meanwhile (on the store
    thread only: the event loop never waits for one)."""
    _busy_timeout(conn, ms)
    try:
        yield
    finally:
        with contextlib.suppress(sqlite3.ProgrammingError):  # closed by the call (close())
            _busy_timeout(conn, 0)


def _locked(error: sqlite3.Error) -> bool:
    """Whether ``error`` is another connection holding the lock (SQLITE_BUSY)."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_BUSY


def _begin(conn: sqlite3.Connection, calls: Sequence[_Call[Any]]) -> sqlite3.Error | None:
    """BEGIN IMMEDIATE (the write lock up front, so no upgrade deadlock); if it fails, make
    its error every call's and return it."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as error:
        for call in calls:
            call.outcome = (None, error)
        return error
    return None


def _commit(conn: sqlite3.Connection, calls: Sequence[_Call[Any]]) -> None:
    """COMMIT the open transaction; if it fails, roll back and make its error every call's."""
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as error:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the callers get the COMMIT's error
                conn.execute("ROLLBACK")
        for call in calls:
            call.outcome = (None, error)


def _alone(
    conn: sqlite3.Connection, call: _Call[Any], wait_ms: int, written: Callable[[], None]
) -> None:
    """Run a :attr:`Where.THREAD` call in a transaction of its own (on the store thread)."""
    with _waiting(conn, wait_ms):
        failed = _begin(conn, [call])
    if failed is not None:
        return
    changes = conn.total_changes
    call.run(conn, in_savepoint=False)
    if not call.failed:
        _commit(conn, [call])
        if conn.total_changes != changes:
            written()
    elif conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # the caller gets its own error
            conn.execute("ROLLBACK")


class GroupCommit:
    """Runs calls on one connection, the short ones group-committed.

    :param conn: an open connection in autocommit mode (``isolation_level=None``), usable
        from the executor's thread and the event loop's (``check_same_thread=False``); its
        busy timeout is how long the store thread waits for another process's lock.
    :param executor: the store thread: one worker, which alone ever waits on the connection.
    :param written: called on the store thread after each COMMIT of a transaction that wrote.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        executor: ThreadPoolExecutor,
        *,
        written: Callable[[], None] = lambda: None,
    ) -> None:
        self._wait_ms: int = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        _busy_timeout(conn, 0)
        self._conn: sqlite3.Connection | None = conn
        self._executor = executor
        self._written = written
        self.waiting: collections.deque[_Call[Any]] = collections.deque()
        """Calls not started yet, in order (tests look at it)."""
        # The store thread has the connection (a COMMIT, or a whole call): the rest waits.
        self._busy = False

    @property
    def connection(self) -> sqlite3.Connection:
        """The connection (tests trace its statements).

        :raises RuntimeError: after :meth:`close`.
        """
        if self._conn is None:
            raise RuntimeError(_CLOSED)
        return self._conn

    def submit(self, fn: Callable[[sqlite3.Connection], T], where: Where) -> asyncio.Future[T]:
        """Queue ``fn`` to run ``where`` says; the future of its result (or its error) once
        its transaction is committed.

        :raises RuntimeError: after :meth:`close`.
        """
        if self._conn is None:
            raise RuntimeError(_CLOSED)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.waiting.append(_Call(fn, future, where))
        self._next()
        return future

    async def close(self) -> None:
        """Close the connection after the calls queued before; later calls are refused."""
        await self.submit(lambda conn: conn.close(), Where.BARE)
        self._conn = None

    def _next(self) -> None:
        """Start what waits, for as long as the connection is free (on the event loop)."""
        conn = self._conn
        while conn is not None and not self._busy and self.waiting:
            call = self.waiting[0]
            if call.future.done():  # a cancelled caller's call is not run
                self.waiting.popleft()
            elif call.where is Where.LOOP:
                self._group(conn)
            else:
                self.waiting.popleft()
                if call.where is Where.THREAD:
                    alone = functools.partial(_alone, conn, call, self._wait_ms, self._written)
                    self._on_thread(alone, [call])
                else:
                    self._on_thread(functools.partial(self._bare, conn, call), [call])

    def _bare(self, conn: sqlite3.Connection, call: _Call[Any]) -> None:
        """Run a :attr:`Where.BARE` call (a migration's script takes the write lock itself)."""
        with _waiting(conn, self._wait_ms):
            call.run(conn, in_savepoint=False)

    def _group(self, conn: sqlite3.Connection) -> None:
        """Run the event-loop calls at the head of the queue in one transaction, here; commit
        it here if it wrote nothing, else on the store thread. Calls left over (a bound was
        reached, or an error ended the transaction) go back to the head of the queue."""
        calls: list[_Call[Any]] = []
        while self.waiting and len(calls) < GROUP_MAX_CALLS and self.waiting[0].where is Where.LOOP:
            call = self.waiting.popleft()
            if not call.future.done():
                calls.append(call)
        error = _begin(conn, calls)
        if error is None:
            self._run_group(conn, calls)
        elif _locked(error):
            # Another process holds the write lock: wait for it on the store thread (up to the
            # busy timeout), the event loop going on meanwhile; then run the calls here.
            self._on_thread(
                functools.partial(self._begin_waiting, conn, calls),
                calls,
                then=functools.partial(self._run_group, conn, calls),
            )
        else:
            for call in calls:
                call.deliver()

    def _begin_waiting(self, conn: sqlite3.Connection, calls: list[_Call[Any]]) -> bool:
        """:func:`_begin` waiting for another process's lock; whether it began."""
        with _waiting(conn, self._wait_ms):
            return _begin(conn, calls) is None

    def _run_group(self, conn: sqlite3.Connection, calls: list[_Call[Any]]) -> None:
        """Run ``calls`` in the transaction just begun, here; commit it here if it wrote
        nothing, else on the store thread."""
        started = time.monotonic()
        changes = conn.total_changes
        done: list[_Call[Any]] = []
        for index, call in enumerate(calls):
            call.run(conn, in_savepoint=True)
            if not conn.in_transaction:
                # Its error ended the transaction: it alone failed; the calls before it lost
                # their writes and run again in the next transaction.
                call.deliver()
                self.waiting.extendleft(reversed(done + calls[index + 1 :]))
                return
            done.append(call)
            if time.monotonic() - started > GROUP_MAX_SECONDS:
                self.waiting.extendleft(reversed(calls[index + 1 :]))
                break
        if conn.total_changes == changes:  # nothing to make durable: no fsync to wait for
            _commit(conn, done)
            for call in done:
                call.deliver()
        else:
            self._on_thread(functools.partial(self._commit_written, conn, done), done)

    def _commit_written(self, conn: sqlite3.Connection, calls: list[_Call[Any]]) -> None:
        """:func:`_commit` of a transaction that wrote (on the store thread)."""
        _commit(conn, calls)
        self._written()

    def _on_thread(
        self,
        work: Callable[[], object],
        calls: list[_Call[Any]],
        *,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Run ``work`` on the store thread, the connection busy meanwhile; then go on with
        ``then`` if given and ``work`` returned true, else deliver ``calls``; and start what
        waits."""
        self._busy = True

        def finished(done: asyncio.Future[object]) -> None:
            self._busy = False
            error = asyncio.CancelledError() if done.cancelled() else done.exception()
            if error is None and then is not None and done.result():
                then()
                self._next()
                return
            for call in calls:
                if error is not None:  # not the calls' own errors: those are their outcomes
                    call.outcome = (None, error)
                call.deliver()
            self._next()

        loop = asyncio.get_running_loop()
        loop.run_in_executor(self._executor, work).add_done_callback(finished)
