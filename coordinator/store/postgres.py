"""The PostgreSQL store: one database shared by several coordinator replicas.

Every call borrows a connection from an asyncpg pool for one statement; the only
multi-statement transactions are the migration, the auth writes (a client or the roles, with
their audit entries and the auth generation), a store-dispatch claim (its select locks the
rows its compare-and-set writes), a batch write with index entries, inline artifacts or a
closing summary, and the outbox publisher's batch (which holds the outbox lock row while it
publishes). With Pulse publishing on (docs/events.md), a write inserts its outbox rows, and a
resolving write checks its task groups, in its own statement. Correctness across replicas
rests on the compare-and-set of :meth:`PostgresStore.compare_and_set` alone, as the
:mod:`~coordinator.store.base` contract says.

Choices:

* ``definition`` and ``runs`` are compact JSON in ``text`` columns, not ``jsonb``: the
  database never looks inside them except for one row in ``confirm_hint``, and text spares the
  server a jsonb parse on every write and a re-serialisation on every read (measured: about a
  quarter more server time for jsonb writes here), while Python decodes either with one
  ``json.loads``. So no asyncpg type codec is needed.
* The resolver scans are plain ``SELECT`` statements without ``FOR UPDATE SKIP LOCKED``: they
  run outside any transaction, so a row lock would be released when the statement ends, before
  the resolver acts; it would cost a tuple write per listed row and spread no work. Two replicas
  listing the same task both try the transition, and compare-and-set lets exactly one win.
  ``delete_expired`` is different, its scan and delete are one statement, so it does skip
  locked rows (see ``queries.sql``).
* Migrations run in one transaction holding ``pg_advisory_xact_lock``, so replicas starting at
  once apply each migration exactly once; the others wait and then find nothing to do.
* A server that cannot be reached, refuses connections (starting or shutting down, too many
  clients) or drops them is an outage: the call raises
  :class:`~coordinator.store.errors.StoreUnavailable` and the outage is logged once
  (:mod:`coordinator.store.outages`). The pool replaces a dropped connection on its next use,
  so calls succeed again as soon as the server is back.

The DSN is passed to asyncpg unchanged; query parameters it does not know become server
settings, e.g. ``postgresql://host/db?search_path=coordinator`` keeps the tables in the schema
``coordinator``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import zlib
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Container,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import asyncpg
from asyncpg.exceptions import (
    ForeignKeyViolationError,
    InsufficientResourcesError,
    InternalClientError,
    OperatorInterventionError,
    PostgresConnectionError,
)

from coordinator.domain.artifacts import Artifact, ArtifactKey, InlineRow
from coordinator.domain.concurrency_keys import Candidate, Key, serve_keys
from coordinator.domain.errors import InputError
from coordinator.domain.events import (
    BrokerReply,
    OutboxEntry,
    OutboxPass,
    QueueEvent,
    group_event,
)
from coordinator.domain.index import IndexedTask
from coordinator.domain.json_text import compact
from coordinator.domain.listings import ResolvedCounts, RunCounts
from coordinator.domain.records import TaskRecord
from coordinator.domain.task_filters import TaskFilter
from coordinator.domain.task_groups import TaskGroup
from coordinator.domain.task_queues import TaskQueue
from coordinator.domain.urls import without_credentials
from coordinator.domain.workers import RECENT_TASKS, TaskQueueSighting, WorkerSighting
from coordinator.store.artifact_rows import artifact_columns, inline_columns
from coordinator.store.base import ProcessLocks
from coordinator.store.claim_floors import LEVELS, ClaimFloors
from coordinator.store.contract.deduplication import KeyedInsert
from coordinator.store.contract.dispatch import ClaimPending, PendingAnnouncement, PickLevels
from coordinator.store.contract.inbox import InboxRow, IngestRows
from coordinator.store.index_rows import indexed_task_columns, namespace_columns
from coordinator.store.outages import OutageWatch
from coordinator.store.outbox_rows import (
    entry_from_row,
    outbox_rows,
    writes_after_reply,
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
from coordinator.store.task_filters import filter_clause
from coordinator.store.worker_rows import (
    counts_from_rows,
    resolved_counts_from_rows,
    task_queue_columns,
    task_queue_sighting_columns,
    worker_sighting_columns,
)

# ``:name`` but not the second colon of a ``::type`` cast; queries.sql keeps ``:word`` out of
# its string literals and comments, which this does not parse
_PARAMETER = re.compile(r"(?<!:):([A-Za-z_]\w*)")


@dataclass(frozen=True, kw_only=True, slots=True)
class _Statement:
    """A named query rewritten for asyncpg.

    :param sql: the statement with ``$1, $2, ...`` in place of ``:name`` parameters.
    :param names: the parameter name behind ``$1``, ``$2``, ... in order.
    """

    sql: str
    names: tuple[str, ...]

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        """The positional arguments, from a mapping that has every parameter by name."""
        return [params[name] for name in self.names]


def _positional(sql: str) -> _Statement:
    """Number the ``:name`` parameters of ``sql`` in order of first use; a repeated name reuses
    its number."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return _Statement(sql=_PARAMETER.sub(number, sql), names=tuple(names))


T = TypeVar("T")
log = logging.getLogger(__name__)


def _deleting(doomed: str) -> str:
    """``delete_tasks`` deleting the batch that the named statement ``doomed`` selects."""
    sql = queries("postgres")
    return sql["delete_tasks"].format(doomed=sql[doomed])


_INLINE_CTE = """, inline AS (
    INSERT INTO artifacts (task_id, run_id, name, storage_type, content_type, content_length,
                           expires, details, created, content)
    SELECT a.task_id, a.run_id, a.name, a.storage_type, a.content_type, a.content_length,
           a.expires, a.details, a.created, a.content
    FROM unnest(CAST(:inline_task_id AS TEXT[]), CAST(:inline_run_id AS INTEGER[]),
                CAST(:inline_artifact_name AS TEXT[]), CAST(:inline_storage_type AS TEXT[]),
                CAST(:inline_content_type AS TEXT[]), CAST(:inline_content_length AS BIGINT[]),
                CAST(:inline_expires AS BIGINT[]), CAST(:inline_details AS TEXT[]),
                CAST(:inline_created AS BIGINT[]), CAST(:inline_content AS BYTEA[]))
         WITH ORDINALITY AS a (task_id, run_id, name, storage_type, content_type,
                               content_length, expires, details, created, content, n)
    WHERE a.task_id IN (SELECT task_id FROM written)
    ORDER BY a.n
    ON CONFLICT (task_id, run_id, name) DO NOTHING
    RETURNING 1
)
"""
"""``insert_inline_artifact`` for the tasks a write wrote (``written``), its parameters as
arrays (``inline_<parameter>``), in the order given, so the first of a name wins: a report's
run log in the write's own round trip rather than in a transaction of four (BEGIN, the write,
the artifacts, COMMIT). A data-modifying CTE runs to completion whether or not the answer
reads it."""


_WRITTEN_ANSWER = "SELECT version, notify_dependents, task_id FROM written"
"""The answer of a compare-and-set composed as the CTE ``written``: what it wrote."""


def _as_written(write: str, *ctes: str) -> str:
    """The write ``write`` (a compare-and-set) as the CTE ``written``, followed by ``ctes``
    (each begins with its comma) and no answer yet."""
    return f"WITH written AS (\n{write}\n)" + "".join(ctes)


def _inlined(write: str) -> str:
    """``write`` with the inline artifacts of what it wrote (:data:`_INLINE_CTE`) and its own
    answer."""
    return _as_written(write, _INLINE_CTE) + _WRITTEN_ANSWER


_SQL = {
    **queries("postgres"),
    "delete_expired": _deleting("expired_tasks"),
    "delete_matching": _deleting("matching_tasks"),
    "compare_and_set_many_inline": _inlined(queries("postgres")["compare_and_set_many"]),
}
"""Every named statement, the task deletions composed from ``delete_tasks``, and
``compare_and_set_many`` with the inline artifacts of what it wrote."""

_Q = {name: _positional(sql) for name, sql in _SQL.items()}

_QUEUE_LOCK_SPACE = 0x7163
"""The first key of every task queue's claim lock ('qc')."""


def _queue_lock_key(task_queue: TaskQueue) -> int:
    """The second key of the queue's claim lock: its id's CRC-32 as a signed 32-bit integer."""
    crc = zlib.crc32(str(task_queue).encode())
    return crc - 2**32 if crc >= 2**31 else crc


_OUTBOX_CTE = """, outbox AS (
    INSERT INTO queue_event_outbox (event_key, exchange, routing_key, cc, body)
    SELECT e.event_key, e.exchange, e.routing_key, e.cc, e.body
    FROM unnest(CAST(:event_task_ids AS TEXT[]), CAST(:event_keys AS TEXT[]),
                CAST(:exchanges AS TEXT[]), CAST(:routing_keys AS TEXT[]),
                CAST(:ccs AS TEXT[]), CAST(:bodies AS TEXT[]))
         WITH ORDINALITY AS e (task_id, event_key, exchange, routing_key, cc, body, n)
    WHERE e.task_id IN (SELECT task_id FROM {written})
    ORDER BY e.n
    RETURNING id
)
"""
"""The outbox rows of a write, inserted by the write's own statement (one round trip): those of
the tasks it wrote (``{written}``: the CTE of its RETURNING rows, with their ``task_id``), in
the order given."""

_GROUPS_RESOLVED = """, groups_resolved AS (
    SELECT queue_task_group_resolved(g.task_group_id, g.task_ids)
    FROM (SELECT count(*) AS n FROM outbox) AS after_its_events
    CROSS JOIN LATERAL (
        SELECT r.task_group_id, array_agg(r.task_id) AS task_ids
        FROM unnest(CAST(:resolving_ids AS TEXT[]), CAST(:resolving_groups AS TEXT[]))
             AS r (task_id, task_group_id)
        WHERE after_its_events.n >= 0 AND r.task_id IN (SELECT task_id FROM written)
        GROUP BY r.task_group_id
        ORDER BY r.task_group_id
    ) AS g
)
"""
"""A resolving write's check of each group whose tasks it resolved (migration 0013), in group
order (their advisory locks too), after its own events are in the outbox: the lateral join
reads the outbox CTE first, so each task-group-resolved comes after its tasks' messages. The
statement's answer waits on it (a scalar subquery of its ``WHERE``), so it always runs."""


def _with_outbox() -> dict[str, _Statement]:
    """The writes that also insert their outbox rows (:data:`_OUTBOX_CTE`): ``insert_task``,
    ``insert_tasks``, ``compare_and_set``, ``compare_and_set_many`` and
    ``compare_and_set_many_inline``, the last three also as ``<name>_resolving``, which then
    checks the groups of the tasks they resolved."""
    raw = queries("postgres")
    statements = {}
    for name, answer in [
        ("insert_task", "SELECT count(*) FROM task"),
        ("insert_tasks", "SELECT task_id FROM task"),
    ]:
        # the CTEs go between the insert's own CTEs and its answer
        head, tail = raw[name].rsplit("\n" + answer, 1)
        assert not tail.strip(), f"{name} must end with {answer!r}"
        statements[name] = _positional(head + _OUTBOX_CTE.format(written="task") + answer)
    for name in ("compare_and_set", "compare_and_set_many", "compare_and_set_many_inline"):
        inline = (_INLINE_CTE,) if name.endswith("_inline") else ()
        outboxed = _as_written(
            raw[name.removesuffix("_inline")], _OUTBOX_CTE.format(written="written"), *inline
        )
        statements[name] = _positional(outboxed + _WRITTEN_ANSWER)
        statements[f"{name}_resolving"] = _positional(
            outboxed
            + _GROUPS_RESOLVED
            + _WRITTEN_ANSWER
            + "\nWHERE (SELECT count(*) FROM groups_resolved) >= 0"
        )
    return statements


_Q_OUTBOX = _with_outbox()


_INLINE_PARAMETERS = {
    name: name.removeprefix("inline_")
    for name in _Q["compare_and_set_many_inline"].names
    if name.startswith("inline_")
}
"""Each array parameter of :data:`_INLINE_CTE`, and the ``insert_inline_artifact`` column
its elements come from."""


def _inline_arrays(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The arrays of :data:`_INLINE_CTE` for ``insert_inline_artifact`` rows."""
    return {name: [row[column] for row in rows] for name, column in _INLINE_PARAMETERS.items()}


def _with_outbox_args(
    name: str,
    params: Mapping[str, Any],
    records: Sequence[TaskRecord],
    events: Mapping[str, Sequence[QueueEvent]] | None,
    resolving: Collection[str] = (),
) -> tuple[_Statement, list[Any]]:
    """The write ``name`` of ``records`` and its arguments: with ``events`` (by task id), the
    statement that also writes the events of each record it writes (:data:`_Q_OUTBOX`), in
    the records' order, and then, for those of ``resolving`` it writes, checks their groups,
    in the same round trip; without, the plain statement ``name`` and ``params``."""
    if not events or not any(events.values()):
        return _Q[name], _Q[name].args(params)
    groups = {}
    if resolving:
        name += "_resolving"
        resolved = [record for record in records if record.task_id in resolving]
        groups = {
            "resolving_ids": [record.task_id for record in resolved],
            "resolving_groups": [record.task_group_id for record in resolved],
        }
    statement = _Q_OUTBOX[name]
    task_ids: list[str] = []
    rows: list[dict[str, Any]] = []
    for record in records:
        written = outbox_rows(events.get(record.task_id, ()))
        task_ids += [record.task_id] * len(written)
        rows += written
    arrays = {
        "event_task_ids": task_ids,
        "event_keys": [r["event_key"] for r in rows],
        "exchanges": [r["exchange"] for r in rows],
        "routing_keys": [r["routing_key"] for r in rows],
        "ccs": [r["cc"] for r in rows],
        "bodies": [r["body"] for r in rows],
    }
    return statement, statement.args({**params, **arrays, **groups})


def _is_outage(error: BaseException) -> bool:
    """Whether ``error`` means the server is not there: the network (refused, reset, timed
    out), SQLSTATE class 08 (connection exception, a connection closed mid-statement included),
    57 (operator intervention: shutting down, starting up, a statement canceled) or 53
    (insufficient resources: too many connections, a full disk). asyncpg raises the bare
    ``InterfaceError`` for a closed connection or pool (its subclasses are client mistakes),
    and ``InternalClientError`` for a connection whose protocol the server left mid-exchange
    (seen when a fast shutdown ends an idle connection that a call then takes)."""
    return (
        isinstance(
            error,
            OSError
            | PostgresConnectionError
            | OperatorInterventionError
            | InsufficientResourcesError
            | InternalClientError,
        )
        or type(error) is asyncpg.InterfaceError
    )


async def _write_index(
    conn: asyncpg.Connection,
    written: Sequence[TaskRecord],
    index: Mapping[str, Sequence[IndexedTask]],
) -> None:
    """The index entries of these written records' completions, in the caller's transaction
    (the rank rule judged at each one's ``resolved`` time). Every entry's row first, then
    every namespace row, each in path order: two batches indexing under the same paths lock
    the rows in one order, never each holding a row the other waits for."""
    upsert, namespaces = _Q["upsert_indexed_task"], _Q["upsert_index_namespace"]
    entries = sorted(
        (
            (entry, record.resolved or 0)
            for record in written
            for entry in index.get(record.task_id, ())
        ),
        key=lambda stored: (stored[0].namespace, stored[0].name),
    )
    above: dict[tuple[str, str], dict[str, Any]] = {}
    for entry, now in entries:
        if await conn.fetch(upsert.sql, *upsert.args(indexed_task_columns(entry, now=now))):
            for row in namespace_columns(entry):
                key = (row["parent"], row["name"])
                if key not in above or above[key]["expires"] < row["expires"]:
                    above[key] = row
    if above:
        await conn.executemany(namespaces.sql, [namespaces.args(above[k]) for k in sorted(above)])


@functools.lru_cache(maxsize=512)
def filtered_statement(name: str, filters: str) -> _Statement:
    """The named statement with ``{filters}`` filled in; cached, as filters repeat. Public
    for the tools that explain and time the management statements (devharness)."""
    return _positional(_SQL[name].format(filters=filters))


def _compare_and_set_values(records: Sequence[TaskRecord]) -> dict[str, list[str]]:
    """What ``compare_and_set_many`` takes: the status columns of each of ``records`` as a
    JSON object, in task id order. The statement locks the rows in the order it is given
    them (a nested loop over the array); two batches naming the same tasks in different
    orders could each hold a row the other waits for, and PostgreSQL would abort one of
    them as a deadlock."""
    ordered = sorted(records, key=lambda r: r.task_id)
    return {"rows": [compact({**status_columns(r), "version": r.version}) for r in ordered]}


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset of a released connection, in place of asyncpg's default (release
    advisory locks, close cursors, UNLISTEN, RESET ALL): that is a round trip and four
    statements after every call, in both processes. The store's calls leave none of it
    behind: no settings, cursors or LISTEN on pooled connections (each listener has
    its own connection), transaction-scoped advisory locks but for :meth:`PostgresStore.
    queue_lock`, which closes a connection that may still hold its lock. asyncpg still rolls
    back a transaction left open before calling this."""


PENDING_CHANNEL = "queue_coordinator_pending"
"""The channel of store dispatch's announcements (``notify_pending``): every coordinator on
the database listens to it."""

INBOX_CHANNEL = "queue_coordinator_inbox"
"""The channel the task inbox's trigger notifies on each committed insert (migration 0021)."""

POOL_CLOSE_SECONDS = 5.0
"""How long closing the store waits for its connections to be given back before it closes
them regardless."""

LISTEN_RETRY_SECONDS = 1.0
"""How long a listener waits before connecting again after losing its connection."""


def _queue_arrays(task_queues: Sequence[TaskQueue]) -> dict[str, list[str]]:
    """The ``provisioner_ids`` and ``worker_types`` arrays a per-queue count unnests."""
    return {
        "provisioner_ids": [task_queue.provisioner_id for task_queue in task_queues],
        "worker_types": [task_queue.worker_type for task_queue in task_queues],
    }


def _announcement(payload: str) -> PendingAnnouncement | None:
    """``provisionerId/workerType/visibleAt`` as :data:`PendingAnnouncement`; ``None`` for
    anything else (another program's notification on the channel)."""
    provisioner_id, _, rest = payload.partition("/")
    worker_type, _, visible_at = rest.partition("/")
    if not (provisioner_id and worker_type and visible_at.isdigit()):
        return None
    return TaskQueue(provisioner_id, worker_type), int(visible_at)


async def _claimable_runs(
    conn: asyncpg.Connection,
    task_queue: TaskQueue,
    params: Mapping[str, Any],
    pick: PickLevels | None,
    floors: ClaimFloors,
) -> list[asyncpg.Record]:
    """claim_pending's runs, locked: in priority order, or as ``pick`` draws them (one more
    round trip, to count each level's runs first); each level read from its floor."""
    by_level = floors.reading(task_queue, params["now"])
    if pick is not None:
        counted = _Q["claimable_levels"]
        levels = await conn.fetch(counted.sql, *counted.args(_from_floors(params, by_level)))
        quotas = pick({row["level"]: row["runs"] for row in levels if row["runs"]})
        if not quotas:
            return []
        drawn = dict(sorted(quotas.items(), reverse=True))
        rows = await _claim_levels(conn, task_queue, params, drawn, floors, by_level)
        if rows:
            return rows
    everywhere = dict.fromkeys(LEVELS, params["limit"])
    return await _claim_levels(conn, task_queue, params, everywhere, floors, by_level)


def _from_floors(
    params: Mapping[str, Any], by_level: Mapping[int, int], levels: Sequence[int] = LEVELS
) -> dict[str, Any]:
    """``params`` with ``levels`` and the floor of each (0: none) as arrays."""
    floor_of = [by_level.get(level, 0) for level in levels]
    return {**params, "levels": list(levels), "floors": floor_of}


async def _claim_levels(
    conn: asyncpg.Connection,
    task_queue: TaskQueue,
    params: Mapping[str, Any],
    quotas: Mapping[int, int],
    floors: ClaimFloors,
    by_level: Mapping[int, int],
) -> list[asyncpg.Record]:
    """The claimable runs of the levels of ``quotas``, in that order, up to each one's quota
    (claimable_runs), each level read from its floor in ``by_level``, locked; ``floors``
    raised by what they were."""
    statement = _Q["claimable_runs"]
    asked = {**_from_floors(params, by_level, list(quotas)), "quotas": list(quotas.values())}
    found: list[asyncpg.Record] = await conn.fetch(statement.sql, *statement.args(asked))
    read = [(row["level"], row["visible_at"]) for row in found]
    floors.advance(task_queue, params["now"], params["limit"], quotas, read)
    return found


async def _keyed_runs(
    conn: asyncpg.Connection,
    params: Mapping[str, Any],
    *,
    max_per_key: int,
    pick: PickLevels | None,
) -> tuple[list[asyncpg.Record], dict[Key, int]]:
    """claim_pending's runs of a queue with ``maxRunningPerKey``, locked, as
    :func:`~coordinator.domain.concurrency_keys.serve_keys` takes them from the candidates
    (read without locks), and the turns of the keys served."""
    limit = params["limit"]
    counted, turned = _Q["running_by_key"], _Q["key_turns"]
    running = {row[0]: row[1] for row in await conn.fetch(counted.sql, *counted.args(params))}
    turns = turns_from_rows(await conn.fetch(turned.sql, *turned.args(params)))
    found = _Q["claimable_by_key"]
    full = [key for key, count in running.items() if count >= max_per_key]
    listed = {**params, "per_key": min(limit, max_per_key), "full": full, "levels": LEVELS}
    candidates = [
        Candidate(row["task_id"], row["level"], row["key"])
        for row in await conn.fetch(found.sql, *found.args(listed))
    ]
    served = serve_keys(
        candidates, running=running, turns=turns, max_per_key=max_per_key, limit=limit, pick=pick
    )
    if not served.chosen:
        return [], {}
    chosen = _Q["claimable_runs_chosen"]
    task_ids = [candidate.task_id for candidate in served.chosen]
    rows = await conn.fetch(chosen.sql, *chosen.args({**params, "task_ids": task_ids}))
    order = {task_id: position for position, task_id in enumerate(task_ids)}
    return sorted(rows, key=lambda row: order[row["task_id"]]), served.turns


class _KeyReleased(Exception):
    """Rolls back a key claimed for a task that was then not inserted."""


def _inbox_row(row: asyncpg.Record) -> InboxRow:
    return InboxRow(
        id=row["id"],
        task_id=row["task_id"],
        client_id=row["client_id"],
        definition=row["definition"],
        created=row["created"],
        reason=row["reason"],
    )


class _Listener:
    """A connection of its own that ``LISTEN``s on ``channel`` and hands each payload to
    ``on_payload``; it connects again while the server is away (whoever waits on it falls back
    to polling meanwhile)."""

    def __init__(
        self,
        dsn: str,
        channel: str,
        on_payload: Callable[[str], None],
        *,
        unheard: Container[int] = (),
    ) -> None:
        self._dsn = dsn
        self._channel = channel
        self._on_payload = on_payload
        self._unheard = unheard
        """The server processes whose notifications are not handed on."""
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()

    async def start(self) -> None:
        """Listen before returning (a first failure raises), then keep listening."""
        conn = await self._connect()
        self._task = asyncio.create_task(self._keep(conn), name=f"listener-{self._channel}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _connect(self) -> asyncpg.Connection:
        conn = await asyncpg.connect(self._dsn)
        self._lost.clear()
        conn.add_termination_listener(lambda _: self._lost.set())
        await conn.add_listener(self._channel, self._notified)
        return conn

    def _notified(self, conn: object, pid: int, channel: str, payload: str) -> None:
        if pid not in self._unheard:
            self._on_payload(payload)

    async def _keep(self, conn: asyncpg.Connection) -> None:
        try:
            while True:
                await self._lost.wait()
                conn.terminate()
                while True:
                    await asyncio.sleep(LISTEN_RETRY_SECONDS)
                    try:
                        conn = await self._connect()
                        break
                    except Exception as error:
                        if not _is_outage(error):
                            log.warning(
                                "listener not connected channel=%s error=%r", self._channel, error
                            )
        finally:
            conn.terminate()


class PostgresStore(SQLStore):
    """Store in one PostgreSQL database (or schema, via ``search_path``).

    :param dsn: a ``postgresql://`` or ``postgres://`` URL, as asyncpg accepts it.
    :param min_size: connections the pool opens at :meth:`open` and keeps, reconnecting
        them in the background when the server drops them. The default, 0, opens connections
        as calls need them (then keeps them while they are used): asyncpg logs a traceback for
        every background reconnection that fails, so a server outage would fill the log.
    :param max_size: connections the pool may open under load; calls beyond that wait.
    """

    def __init__(self, dsn: str, *, min_size: int = 0, max_size: int = 10) -> None:
        self._dsn = dsn
        self._min_size = min_size
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None
        self._listeners: list[_Listener] = []
        self._own_backends: set[int] = set()
        self._outages = OutageWatch(store=without_credentials(dsn), is_outage=_is_outage)
        self._queue_locks = ProcessLocks()
        self._floors = ClaimFloors()

    @property
    def _connections(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("PostgresStore used before open() or after close()")
        return self._pool

    async def open(self) -> None:
        self._pool = await asyncpg.create_pool(
            self._dsn,
            min_size=self._min_size,
            max_size=self._max_size,
            reset=_keep_session,
            init=self._own_backend,
        )
        try:
            await self.migrate()
        except BaseException:
            await self.close()
            raise

    async def _own_backend(self, conn: asyncpg.Connection) -> None:
        """Remember the server process of a new pool connection while it lives, so that this
        process's own announcements are not heard back (it woke its waiters already)."""
        pid = conn.get_server_pid()
        self._own_backends.add(pid)
        conn.add_termination_listener(lambda _: self._own_backends.discard(pid))

    async def close(self) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            await listener.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            # asyncpg's close waits for every connection to come back, without a bound; past
            # this, cancelling it terminates the rest (a call still holding one has lost it
            # anyway: the process is stopping)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pool.close(), POOL_CLOSE_SECONDS)

    @contextlib.asynccontextmanager
    async def queue_lock(self, task_queue: TaskQueue) -> AsyncIterator[None]:
        # This process's lock first: at most one of its connections waits on the shared one
        # per queue, so waiting claims never take the pool's connections from everything else.
        # A session lock: a dropped connection releases it with the session. The pool does not
        # release session locks (_keep_session), so a connection that may still hold it (its
        # lock or unlock raised, or was cancelled) is closed rather than pooled.
        params = {"space": _QUEUE_LOCK_SPACE, "key": _queue_lock_key(task_queue)}
        async with self._queue_locks.hold(task_queue), self._connections.acquire() as conn:
            lock, unlock = _Q["lock_task_queue"], _Q["unlock_task_queue"]
            may_hold = True
            try:
                await self._outages.watch(conn.execute(lock.sql, *lock.args(params)))
                try:
                    yield
                finally:
                    await self._outages.watch(conn.execute(unlock.sql, *unlock.args(params)))
                    may_hold = False
            finally:
                if may_hold:
                    conn.terminate()

    async def migrate(self) -> list[int]:
        applied = []
        async with self._connections.acquire() as conn, conn.transaction():
            await conn.execute(_Q["lock_migrations"].sql)
            await conn.execute(_Q["create_schema_migrations"].sql)
            done = {row["version"] for row in await conn.fetch(_Q["applied_migrations"].sql)}
            record = _Q["record_migration"]
            for migration in migrations("postgres"):
                if migration.version in done:
                    continue
                # no arguments: asyncpg sends the file as a simple query, several statements
                await conn.execute(migration.sql)
                params = {"version": migration.version, "name": migration.name}
                await conn.execute(record.sql, *record.args(params))
                applied.append(migration.version)
        return applied

    async def _fetch(self, name: str, **params: Any) -> list[asyncpg.Record]:
        statement = _Q[name]
        return cast(
            "list[asyncpg.Record]",
            await self._outages.watch(
                self._connections.fetch(statement.sql, *statement.args(params))
            ),
        )

    async def _fetch_announcing(
        self, name: str, events: Sequence[QueueEvent], **params: Any
    ) -> list[asyncpg.Record]:
        if not events:
            return await self._fetch(name, **params)
        outbox = outbox_rows(events)
        return await self._with_events(
            self._fetcher(name, params), lambda rows: outbox if rows else []
        )

    async def _fetch_then(
        self,
        name: str,
        params: Mapping[str, Any],
        *,
        then: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
        events: Sequence[QueueEvent] = (),
    ) -> list[asyncpg.Record]:
        outbox = outbox_rows(events)

        async def run() -> list[asyncpg.Record]:
            async with self._connections.acquire() as conn, conn.transaction():
                head = _Q[name]
                rows = cast("list[asyncpg.Record]", await conn.fetch(head.sql, *head.args(params)))
                if rows:
                    for step, many in [*then, ("insert_outbox_event", outbox)]:
                        if many:
                            statement = _Q[step]
                            await conn.executemany(statement.sql, [statement.args(p) for p in many])
                return rows

        return await self._outages.watch(run())

    async def _fetch_filtered(
        self, name: str, matching: TaskFilter, **params: Any
    ) -> list[asyncpg.Record]:
        clause = filter_clause(matching, listed_apart=True)
        statement = filtered_statement(name, clause.sql)
        return cast(
            "list[asyncpg.Record]",
            await self._outages.watch(
                self._connections.fetch(statement.sql, *statement.args({**params, **clause.params}))
            ),
        )

    async def delete_matching(self, matching: TaskFilter, *, now: int, limit: int) -> int:
        rows = await self._fetch_filtered(
            "delete_matching", matching, now=now, after="", limit=limit
        )
        return int(rows[0][0])

    async def shared_secret(self, name: str, *, new: str) -> str:
        secret = await self._fetchval("shared_secret", secret_name=name, secret=new)
        if secret is None:
            # Another replica's insert committed while ours waited on it: ours did nothing,
            # and the statement's snapshot predates the winner's row. A new statement sees it.
            secret = await self._fetchval("shared_secret", secret_name=name, secret=new)
        return cast(str, secret)

    async def _fetchval(self, name: str, **params: Any) -> Any:
        statement = _Q[name]
        return await self._outages.watch(
            self._connections.fetchval(statement.sql, *statement.args(params))
        )

    # --- single records -------------------------------------------------------------------

    async def _with_events(
        self,
        fetch: Callable[[asyncpg.Connection], Awaitable[T]],
        events: Callable[[T], list[Any]],
        *,
        then: Callable[[asyncpg.Connection, T], Awaitable[None]] | None = None,
    ) -> T:
        """Run ``fetch`` and then insert the outbox rows ``events`` makes of its result (and
        ``then``), in one transaction (publishing on: the statement alone when off)."""

        async def run() -> T:
            async with self._connections.acquire() as conn, conn.transaction():
                result = await fetch(conn)
                rows = events(result)
                if rows:
                    statement = _Q["insert_outbox_event"]
                    await conn.executemany(statement.sql, [statement.args(r) for r in rows])
                if then is not None:
                    await then(conn, result)
                return result

        return await self._outages.watch(run())

    @staticmethod
    def _insert_params(record: TaskRecord) -> dict[str, Any]:
        """insert_task's parameters: the record's columns, its edges and tags as arrays."""
        tags = record.tags
        return {
            **insert_columns(record),
            "dependencies": list(record.dependencies),
            "tag_keys": [key for key, _ in tags],
            "tag_values": [value for _, value in tags],
        }

    async def insert(
        self, record: TaskRecord, *, events: Sequence[QueueEvent] = ()
    ) -> TaskRecord | None:
        statement, args = _with_outbox_args(
            "insert_task", self._insert_params(record), [record], {record.task_id: events}
        )
        inserted = await self._outages.watch(self._connections.fetchval(statement.sql, *args))
        return record.replace(version=1) if inserted else None

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
        read = _Q["deduplication_key_holder"]
        statement, args = _with_outbox_args(
            "insert_task", self._insert_params(record), [record], {record.task_id: events}
        )

        async def run() -> KeyedInsert:
            async with self._connections.acquire() as conn:
                try:
                    async with conn.transaction():
                        # a concurrent claim of the key waits here on the row until ours
                        # commits or rolls back, then finds it held, or moved
                        if await conn.fetchval(claim.sql, *claim.args(columns)) is None:
                            held = await conn.fetchval(read.sql, *read.args(columns))
                            return KeyedInsert(claimed=False, holder=held)
                        if not await conn.fetchval(statement.sql, *args):
                            raise _KeyReleased
                except _KeyReleased:
                    return KeyedInsert(claimed=True)
                return KeyedInsert(claimed=True, stored=record.replace(version=1))

        return await self._outages.watch(run())

    async def insert_many(
        self,
        records: Sequence[TaskRecord],
        *,
        events: Mapping[str, Sequence[QueueEvent]] | None = None,
    ) -> set[str]:
        if not records:
            return set()
        rows = [insert_columns(record) for record in records]
        values = {f"{column}_values": [row[column] for row in rows] for column in rows[0]}
        edges = [(dep, record.task_id) for record in records for dep in record.dependencies]
        tags = tag_rows(records)
        params = {
            **values,
            "required_task_ids": [required for required, _ in edges],
            "dependent_task_ids": [dependent for _, dependent in edges],
            "tag_task_ids": [tag["task_id"] for tag in tags],
            "tag_keys": [tag["tag_key"] for tag in tags],
            "tag_values": [tag["tag_value"] for tag in tags],
        }
        statement, args = _with_outbox_args("insert_tasks", params, records, events)
        inserted = await self._outages.watch(self._connections.fetch(statement.sql, *args))
        return {row["task_id"] for row in inserted}

    async def _fetch_in(self, name: str, task_ids: Sequence[str]) -> list[asyncpg.Record]:
        return await self._fetch(name, task_ids=list(task_ids)) if task_ids else []

    def _fetcher(
        self, name: str, params: Mapping[str, Any]
    ) -> Callable[[asyncpg.Connection], Awaitable[list[asyncpg.Record]]]:
        statement = _Q[name]

        async def fetch(conn: asyncpg.Connection) -> list[asyncpg.Record]:
            return cast(
                "list[asyncpg.Record]", await conn.fetch(statement.sql, *statement.args(params))
            )

        return fetch

    async def compare_and_set(
        self,
        record: TaskRecord,
        *,
        events: Sequence[QueueEvent] = (),
        resolving: bool = False,
        index: Sequence[IndexedTask] = (),
    ) -> TaskRecord | None:
        params = {**status_columns(record), "version": record.version}
        statement, args = _with_outbox_args(
            "compare_and_set",
            params,
            [record],
            {record.task_id: events},
            resolving={record.task_id} if resolving else (),
        )
        if index:

            async def indexing() -> list[asyncpg.Record]:
                async with self._connections.acquire() as conn, conn.transaction():
                    rows = cast("list[asyncpg.Record]", await conn.fetch(statement.sql, *args))
                    if rows:
                        await _write_index(conn, [record], {record.task_id: index})
                    return rows

            rows = await self._outages.watch(indexing())
        else:
            rows = await self._outages.watch(self._connections.fetch(statement.sql, *args))
        return (
            stored_after_cas(record, rows[0]["version"], rows[0]["notify_dependents"])
            if rows
            else None
        )

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
        if not records:
            return []
        if not events:  # the summary is a message too
            closing = None
        name, values = "compare_and_set_many", _compare_and_set_values(records)
        if artifacts and not (index or closing):
            name += "_inline"
            values |= _inline_arrays(inline_columns(records, artifacts))
        statement, args = _with_outbox_args(name, values, records, events, resolving)
        if name.endswith("_inline") or not (index or artifacts or closing):
            fetched = await self._outages.watch(self._connections.fetch(statement.sql, *args))
        else:

            def closed(rows: list[asyncpg.Record]) -> list[dict[str, Any]]:
                # only the write that leaves nothing to try again closes the batch
                if closing is None or len(rows) < len(records):
                    return []
                return outbox_rows(closing(len(records)))

            async def then(conn: asyncpg.Connection, rows: list[asyncpg.Record]) -> None:
                written = {row["task_id"] for row in rows}
                won = [record for record in records if record.task_id in written]
                if index:
                    await _write_index(conn, won, index)
                if artifacts:
                    insert = _Q["insert_inline_artifact"]
                    await conn.executemany(
                        insert.sql, [insert.args(c) for c in inline_columns(won, artifacts)]
                    )

            fetched = await self._with_events(
                lambda conn: conn.fetch(statement.sql, *args), closed, then=then
            )
        written = {row["task_id"]: row for row in fetched}
        return [
            None
            if (row := written.get(record.task_id)) is None
            else stored_after_cas(record, row["version"], row["notify_dependents"])
            for record in records
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
        params = {**task_queue_columns(task_queue), "now": now, "limit": limit}

        async def take() -> list[TaskRecord]:
            async with self._connections.acquire() as conn, conn.transaction():
                turns: dict[Key, int] | None = None
                if max_per_key is None:
                    rows = await _claimable_runs(conn, task_queue, params, pick, self._floors)
                else:
                    rows, turns = await _keyed_runs(
                        conn, params, max_per_key=max_per_key, pick=pick
                    )
                writes = claim([record_from_row(row) for row in rows]) if rows else ()
                if not writes:
                    return []
                records = [record for record, _ in writes]
                cas, args = _with_outbox_args(
                    "compare_and_set_many",
                    _compare_and_set_values(records),
                    records,
                    {record.task_id: messages for record, messages in writes},
                )
                # the rows are locked since the select: every version still holds
                fetched = await conn.fetch(cas.sql, *args)
                written = {row["task_id"]: row for row in fetched}
                stored = [
                    stored_after_cas(record, row["version"], row["notify_dependents"])
                    for record in records
                    if (row := written.get(record.task_id)) is not None
                ]
                if turns:
                    turn = _Q["set_key_turn"]
                    await conn.executemany(
                        turn.sql, [turn.args(row) for row in turn_rows(task_queue, turns, stored)]
                    )
                return stored

        return await self._outages.watch(take())

    async def announce_pending(self, announcements: Sequence[PendingAnnouncement]) -> None:
        if announcements:
            payloads = sorted(
                {f"{task_queue}/{visible_at}" for task_queue, visible_at in announcements}
            )
            await self._fetch("notify_pending", channel=PENDING_CHANNEL, payloads=payloads)

    async def listen_pending(self, on_pending: Callable[[PendingAnnouncement], None]) -> None:
        def on_payload(payload: str) -> None:
            announcement = _announcement(payload)
            if announcement is not None:
                on_pending(announcement)

        await self._listen(PENDING_CHANNEL, on_payload, unheard=self._own_backends)

    async def _listen(
        self, channel: str, on_payload: Callable[[str], None], *, unheard: Container[int] = ()
    ) -> None:
        listener = _Listener(self._dsn, channel, on_payload, unheard=unheard)
        await listener.start()
        self._listeners.append(listener)

    async def listen_inbox(self, on_insert: Callable[[], None]) -> None:
        await self._listen(INBOX_CHANNEL, lambda _: on_insert())

    async def ingest_inbox(self, limit: int, ingest: IngestRows) -> int:
        async def run() -> int:
            async with self._connections.acquire() as conn, conn.transaction():
                lock = _Q["lock_pending_inbox_rows"]
                rows = [
                    _inbox_row(row)
                    for row in await conn.fetch(lock.sql, *lock.args({"limit": limit}))
                ]
                if not rows:
                    return 0
                outcomes = await ingest(rows)
                taken = [
                    row.id for row, reason in zip(rows, outcomes, strict=True) if reason is None
                ]
                refused = [
                    (row.id, r) for row, r in zip(rows, outcomes, strict=True) if r is not None
                ]
                if taken:
                    await conn.execute(_Q["delete_inbox_rows"].sql, taken)
                if refused:
                    reject = _Q["reject_inbox_rows"]
                    params = {"ids": [i for i, _ in refused], "reasons": [r for _, r in refused]}
                    await conn.execute(reject.sql, *reject.args(params))
                return len(rows)

        return await self._outages.watch(run())

    async def rejected_inbox_rows(self, *, limit: int, after: int | None) -> list[InboxRow]:
        rows = await self._fetch("rejected_inbox_rows", limit=limit, after=after or 0)
        return [_inbox_row(row) for row in rows]

    async def delete_inbox_row(self, row_id: int) -> bool:
        return bool(await self._fetch("delete_rejected_inbox_row", id=row_id))

    async def count_rejected_inbox_rows(self) -> int:
        return int((await self._fetch("count_rejected_inbox_rows"))[0][0])

    async def publish_outbox(
        self,
        limit: int,
        publish: Callable[[Sequence[OutboxEntry]], Awaitable[BrokerReply]],
        *,
        now: int,
    ) -> OutboxPass:
        # The outbox lock row is held for the whole batch, publishing included: the other
        # replicas skip it (SKIP LOCKED) and pass, so one publisher at a time keeps the
        # order; a replica that dies mid-batch releases it with its connection.
        async def run() -> OutboxPass:
            async with self._connections.acquire() as conn, conn.transaction():
                if await conn.fetchval(_Q["lock_outbox"].sql) is None:
                    return OutboxPass()
                statement = _Q["outbox_events"]
                rows = await conn.fetch(
                    statement.sql, *statement.args({"limit": limit, "now": now})
                )
                if not rows:
                    return OutboxPass()
                entries = [entry_from_row(row) for row in rows]
                writes = writes_after_reply(entries, await publish(entries), now=now)
                for name, params in (
                    ("park_outbox_event", writes.parks),
                    ("retry_outbox_event", writes.retries),
                ):
                    if params:
                        await conn.executemany(_Q[name].sql, [_Q[name].args(p) for p in params])
                if writes.deleted:
                    delete = _Q["delete_outbox_events"]
                    await conn.execute(delete.sql, *delete.args({"ids": writes.deleted}))
                return writes.outcome

        return await self._outages.watch(run())

    async def _seal_announcing(self, task_group_id: str, *, now: int) -> TaskGroup | None:
        async def run() -> TaskGroup | None:
            async with self._connections.acquire() as conn, conn.transaction():
                seal = _Q["seal_task_group"]
                params = {"task_group_id": task_group_id, "now": now}
                rows = await conn.fetch(seal.sql, *seal.args(params))
                if not rows:
                    return None
                group = task_group_from_row(rows[0])
                insert = _Q["insert_outbox_event"]
                events = outbox_rows([group_event("task-group-sealed", group)])
                await conn.executemany(insert.sql, [insert.args(r) for r in events])
                return group

        return await self._outages.watch(run())

    async def append_events(self, events: Sequence[QueueEvent]) -> None:
        rows = outbox_rows(events)
        if rows:
            statement = _Q["insert_outbox_event"]
            await self._outages.watch(
                self._connections.executemany(statement.sql, [statement.args(r) for r in rows])
            )

    async def confirm_hints(self, hints: Sequence[tuple[str, int]]) -> None:
        if not hints:
            return
        statement = _Q["confirm_hint"]
        await self._outages.watch(
            self._connections.executemany(
                statement.sql,
                [
                    statement.args({"task_id": task_id, "run_id": run_id})
                    for task_id, run_id in hints
                ],
            )
        )

    async def delete_expired(self, now: int, limit: int) -> int:
        deleted = cast(int, await self._fetchval("delete_expired", now=now, limit=limit))
        await self._fetch("delete_expired_groups", now=now, limit=limit)
        await self._fetch("delete_expired_deduplication_keys", now=now, limit=limit)
        await self._fetch("delete_expired_key_turns", now=now, limit=limit)
        return deleted

    # --- task queues and workers ----------------------------------------------------------

    async def record_sightings(
        self, task_queues: Sequence[TaskQueueSighting], workers: Sequence[WorkerSighting]
    ) -> None:
        if task_queues or workers:
            # One statement (one round trip, one transaction); each side as a JSON array of
            # rows, which the statement unpacks with json_to_recordset.
            await self._fetch(
                "record_sightings",
                queues=json.dumps([task_queue_sighting_columns(s) for s in task_queues]),
                workers=json.dumps([worker_sighting_columns(s) for s in workers]),
                keep=RECENT_TASKS,
            )

    async def run_counts_of(
        self, task_queues: Sequence[TaskQueue], *, now: int
    ) -> dict[TaskQueue, RunCounts]:
        if not task_queues:
            return {}
        rows = await self._fetch("run_counts_of", **_queue_arrays(task_queues), now=now)
        return counts_from_rows(rows)

    # --- resolutions ------------------------------------------------------------------------

    async def resolved_counts_of(
        self, task_queues: Sequence[TaskQueue], *, since: int
    ) -> dict[TaskQueue, ResolvedCounts]:
        if not task_queues:
            return {}
        rows = await self._fetch("resolved_counts_of", **_queue_arrays(task_queues), since=since)
        return resolved_counts_from_rows(rows)

    # --- artifacts --------------------------------------------------------------------------

    async def insert_artifact(
        self, artifact: Artifact, *, events: Sequence[QueueEvent] = ()
    ) -> Artifact | None:
        columns = artifact_columns(artifact)
        try:
            if events:
                outbox = outbox_rows(events)
                inserted = await self._with_events(
                    self._fetcher("insert_artifact", columns), lambda rows: outbox if rows else []
                )
            else:
                inserted = await self._fetch("insert_artifact", **columns)
        except ForeignKeyViolationError:
            # the statement saw the task, and a concurrent delete removed it before the insert
            raise InputError("Task not found") from None
        if inserted:
            return None
        # A new statement, whose snapshot holds the row that the insert found in its way even
        # if another replica committed it after the insert's snapshot was taken. Nothing there
        # means the task does not exist (or the row went since, with its task or expired).
        existing = await self.get_artifact(*artifact.key)
        if existing is None:
            raise InputError("Task not found")
        return existing

    async def replace_artifact(
        self, artifact: Artifact, *, events: Sequence[QueueEvent] = ()
    ) -> None:
        columns = artifact_columns(artifact)
        if events:
            outbox = outbox_rows(events)
            await self._with_events(self._fetcher("replace_artifact", columns), lambda _: outbox)
        else:
            await self._fetch("replace_artifact", **columns)

    async def delete_artifacts(self, keys: Sequence[ArtifactKey]) -> int:
        if not keys:
            return 0
        deleted = await self._fetch(
            "delete_artifacts",
            task_ids=[task_id for task_id, _, _ in keys],
            run_ids=[run_id for _, run_id, _ in keys],
            names=[name for _, _, name in keys],
        )
        return len(deleted)
