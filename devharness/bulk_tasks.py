"""Filling a store with many tasks for measurements and tests: :func:`fill` writes ``count``
tasks, varied as a busy deployment's are, straight into the tables of a migrated store (the
coordinator's own migration creates them first), far faster than the API could.

Every row is what the coordinator itself would have stored. A task's kind (its
:class:`Shape`: task queue, tags, end state, pace) is built once with the coordinator's domain
code (``definitions.normalise``, then the ``lifecycle`` transitions the end state needs:
``create``, ``claim``, ``report``, ``cancel``) and ``rows.insert_columns``; each task of that
kind is then the same row with its own ids and its times shifted, which is what the domain code
gives for the same events at another time (it never reads a clock). Each kind's template is
checked against a second build at another time with other ids before any row leaves, so a
column the shift does not cover fails loudly instead of being stored wrong. The domain code
costs about 90 µs per task; a task from its template, ids drawn and tags included, about 30.

The distribution (deterministic for a seed and ``now``): tasks in queues ``bench/wt-00`` ..
``bench/wt-19``, in task groups of about 1,000, each group with one of 10 schedulerIds and one
of 5 projectIds; tags ``kind`` (build, test, lint) and ``platform``; ``created`` spread over
30 days (task ids are random, so unrelated to it). Old tasks are resolved; the unresolved ones
are recent, as deadlines force (a task's deadline is 5 days after it was created): running
tasks were created within the last 20 hours, pending and unscheduled ones within the last 4
days. In all about 10 % pending (a fifth of them delayed by ``notBefore``, some on a retry
run), 5 % running, 70 % completed, 10 % failed, 5 % exception (canceled or malformed-payload)
and 1 % unscheduled (waiting for an unresolved task of their group). Running tasks carry a
24-hour ``claimTimeout``, so that their claims outlast a measurement without a worker
reclaiming them.

The rows stream: PostgreSQL gets them by ``COPY`` and SQLite by ``executemany``, in chunks, all
in one transaction, then ``VACUUM (ANALYZE)`` and ``ANALYZE``; nothing holds more than a chunk
of rows.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import random
import re
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

import asyncpg
import slugid

from coordinator.config import Config
from coordinator.domain import definitions, lifecycle
from coordinator.domain.records import TaskRecord, from_iso, record_from_definition, to_iso
from coordinator.domain.task_filters import FilterState
from coordinator.store.factory import open_store, sqlite_path
from coordinator.store.rows import insert_columns, tag_rows
from devharness.tasks import task_definition

PROVISIONER_ID: Final = "bench"
WORKER_TYPES: Final = tuple(f"wt-{number:02d}" for number in range(20))
"""The worker types; the task queues are ``bench/<worker type>``."""
SCHEDULERS: Final = tuple(f"scheduler-{number}" for number in range(10))
PROJECTS: Final = tuple(f"project-{number}" for number in range(5))
KINDS: Final = {"build": 0.3, "test": 0.6, "lint": 0.1}
"""The ``kind`` tag of a task, with its share."""
PLATFORMS: Final = ("linux", "windows", "macos")
GROUP_SIZE: Final = 1000
DAYS: Final = 30

HOUR: Final = 3_600_000
DAY: Final = 24 * HOUR
DEADLINE_AFTER: Final = 5 * DAY
"""Every task's deadline after its creation: the most the coordinator allows by default, so
that the tasks left pending 4 days ago are still a day from the deadline resolver."""
NOT_BEFORE_AFTER: Final = 4 * DAY + 12 * HOUR
"""A delayed task's ``notBefore`` after its creation: half a day or more after ``now``."""
CLAIM_TIMEOUT_S: Final = 86_400

EndState = Literal[
    "unscheduled",
    "pending",
    "pending-retry",
    "delayed",
    "running",
    "completed",
    "completed-retry",
    "failed",
    "exception",
    "canceled",
]
END_STATES: Final[tuple[EndState, ...]] = get_args(EndState)

FILTER_STATE: Final[Mapping[EndState, FilterState]] = {
    "unscheduled": "unscheduled",
    "pending": "pending",
    "pending-retry": "pending",
    "delayed": "delayed",
    "running": "running",
    "completed": "completed",
    "completed-retry": "completed",
    "failed": "failed",
    "exception": "exception",
    "canceled": "exception",
}
"""What countTasks calls each end state."""


@dataclass(frozen=True, slots=True)
class Band:
    """Tasks of one age: the share of all tasks, how long ago they were created (ms, the
    oldest first) and the states they end in, with their weights."""

    share: float
    oldest: int
    newest: int
    end_states: Mapping[EndState, float]


BANDS: Final = (
    Band(
        0.70,
        DAYS * DAY,
        4 * DAY,
        {"completed": 76, "completed-retry": 8, "failed": 11, "exception": 2.5, "canceled": 2.5},
    ),
    Band(
        0.15,
        4 * DAY,
        20 * HOUR,
        {
            "pending": 25,
            "pending-retry": 4,
            "delayed": 8,
            "unscheduled": 3,
            "completed": 40,
            "completed-retry": 5,
            "failed": 10,
            "exception": 2.5,
            "canceled": 2.5,
        },
    ),
    Band(
        0.15,
        20 * HOUR,
        HOUR,
        {
            "running": 33,
            "pending": 22,
            "pending-retry": 3,
            "delayed": 5,
            "unscheduled": 4,
            "completed": 22,
            "completed-retry": 3,
            "failed": 5,
            "exception": 1.5,
            "canceled": 1.5,
        },
    ),
)
"""Old tasks are resolved; unresolved ones are recent enough that their deadline (and a
running one's claim) is still well ahead of ``now``."""

PACES: Final = ((5_000, 120_000), (30_000, 600_000), (120_000, 1_500_000), (10_000, 45_000))
"""(wait before a worker claims the run, how long the run takes) in ms; the last run of a
task resolved in the recent band ends before ``now``."""

WORKER_GROUP: Final = "bench-workers"
_MAX_DEADLINE: Final = Config().max_deadline_ms


@dataclass(frozen=True, slots=True)
class Shape:
    """Everything a task's row depends on but its ids and its time."""

    worker_type: str
    kind: str
    platform: str
    end_state: EndState
    pace: int


@dataclass(frozen=True, slots=True)
class Ids:
    """The ids of one task."""

    task: str
    group: str
    scheduler: str
    project: str
    dependency: str | None = None


# --- building one row with the coordinator's code ---------------------------------------------


def _body(shape: Shape, ids: Ids, created: int) -> dict[str, Any]:
    """The createTask body a producer would have sent."""
    body = task_definition(
        created,
        lifetime_ms=DEADLINE_AFTER,
        provisionerId=PROVISIONER_ID,
        workerType=shape.worker_type,
        schedulerId=ids.scheduler,
        projectId=ids.project,
        taskGroupId=ids.group,
        priority="high" if shape.kind == "build" else "medium",
        retries=5,
        routes=[f"index.bench.{shape.kind}.{shape.platform}"],
        payload={
            "image": f"bench/{shape.platform}-toolchain:2026.11",
            "command": ["/bin/bash", "-c", f"./mach {shape.kind} --platform {shape.platform}"],
            "env": {"MOZ_AUTOMATION": "1", "TARGET": shape.platform},
            "maxRunTime": 3600,
            "artifacts": {"public/logs": {"type": "directory", "path": "logs"}},
        },
        metadata={
            "name": f"{shape.kind} {shape.platform}",
            "description": f"{shape.kind} on {shape.platform}, written by devharness.bulk_tasks",
            "owner": "bench@example.com",
            "source": "https://example.com/bench",
        },
        tags={"kind": shape.kind, "platform": shape.platform},
    )
    if ids.dependency is not None:
        body["dependencies"] = [ids.dependency]
    if shape.end_state == "delayed":
        body["notBefore"] = to_iso(created + NOT_BEFORE_AFTER)
    if shape.end_state == "running":
        body["claimTimeout"] = CLAIM_TIMEOUT_S
    return body


def build(shape: Shape, ids: Ids, created: int) -> tuple[TaskRecord, int]:
    """The record the coordinator stores for a task of ``shape`` created at ``created`` that
    went through its end state's transitions, and the row's version (one per write)."""
    timing = lifecycle.Timing()
    definition = definitions.normalise(
        ids.task, _body(shape, ids, created), now=created, max_deadline_ms=_MAX_DEADLINE
    )
    record = lifecycle.create(record_from_definition(ids.task, definition), now=created).record
    version = 1
    pickup, duration = PACES[shape.pace]
    at = created

    def write(result: lifecycle.TransitionResult) -> None:
        nonlocal record, version
        # What compare-and-set stores: notify_dependents only for a task with dependents
        # (none of these has any), the definition as written.
        record = result.record.replace(notify_dependents=False, definition_changed=False)
        version += 1

    def run(resolution: tuple[str, str] | None) -> None:
        """A worker claims the last run, then reports ``(state, reason)`` unless ``None``."""
        nonlocal at
        at += pickup
        run_id = len(record.runs) - 1
        write(
            lifecycle.claim(
                record,
                run_id=run_id,
                worker_group=WORKER_GROUP,
                worker_id=f"{shape.worker_type}-{shape.pace}",
                now=at,
                timing=timing,
            )
        )
        if resolution is not None:
            at += duration
            state, reason = resolution
            write(
                lifecycle.report(
                    record, run_id=run_id, state=state, reason=reason, now=at, timing=timing
                )
            )

    match shape.end_state:
        case "running":
            run(None)
        case "completed" | "failed":
            run((shape.end_state, shape.end_state))
        case "exception":
            run(("exception", "malformed-payload"))
        case "pending-retry":
            run(("exception", "worker-shutdown"))
        case "completed-retry":
            run(("exception", "intermittent-task"))
            run(("completed", "completed"))
        case "canceled":
            write(lifecycle.cancel(record, now=at + pickup))
    # a pending run's hint was put and confirmed, which clears hint_due without a new version
    return record.replace(hint_needed=False), version


def row(record: TaskRecord, version: int) -> dict[str, Any]:
    """Every ``tasks`` column of the stored record."""
    return {**insert_columns(record), "version": version}


# --- templates: one build per shape, shifted for each task ---------------------------------------

_SENTINELS: Final = Ids(
    task="@task@",
    group="@group@",
    scheduler="@scheduler@",
    project="@project@",
    dependency="@dependency@",
)
_ID_COLUMNS: Final = {
    "task_id": "task",
    "task_group_id": "group",
    "scheduler_id": "scheduler",
    "project_id": "project",
}
_TIME_COLUMNS: Final = frozenset(
    {"expires", "taken_until", "open_deadline", "hint_due", "visible_at", "resolved", "created"}
)
_JSON_COLUMNS: Final = frozenset({"definition", "runs"})
_SLOTS: Final = re.compile(
    r'"(@\w+@)"'  # an id
    r'|"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)"'  # a date-time of the definition
    r'|"(?:scheduled|visible_at|started|taken_until|resolved)":(\d+)'  # a time of a run
)
_REFERENCE: Final = from_iso("2030-01-01T00:00:00Z")
"""When a template's task is created: any time does."""

_Slot = Callable[[Ids, int], str]


def _id_slot(name: str) -> _Slot:
    field_name = name.strip("@")
    return lambda ids, _: f'"{getattr(ids, field_name)}"'


def _iso_slot(ms: int) -> _Slot:
    return lambda _, shift: f'"{to_iso(ms + shift)}"'


def _ms_slot(prefix: str, ms: int) -> _Slot:
    return lambda _, shift: f"{prefix}{ms + shift}"


@dataclass(frozen=True, slots=True)
class _Text:
    """A JSON column's text with its ids and times cut out, to be filled in per task."""

    pieces: tuple[str, ...]
    slots: tuple[_Slot, ...]

    @classmethod
    def parse(cls, text: str) -> _Text:
        pieces: list[str] = []
        slots: list[_Slot] = []
        start = 0
        for match in _SLOTS.finditer(text):
            pieces.append(text[start : match.start()])
            if match[1]:
                slots.append(_id_slot(match[1]))
            elif match[2]:
                slots.append(_iso_slot(from_iso(match[2])))
            else:
                prefix = text[match.start() : match.start(3)]
                slots.append(_ms_slot(prefix, int(match[3])))
            start = match.end()
        pieces.append(text[start:])
        return cls(tuple(pieces), tuple(slots))

    def render(self, ids: Ids, shift: int) -> str:
        out = [self.pieces[0]]
        for slot, piece in zip(self.slots, self.pieces[1:], strict=True):
            out.append(slot(ids, shift))
            out.append(piece)
        return "".join(out)


@dataclass(frozen=True, slots=True)
class Template:
    """The row of a :class:`Shape`, for any ids and creation time."""

    columns: tuple[str, ...]
    render_column: tuple[Callable[[Ids, int], Any], ...]
    tags: tuple[tuple[str, str], ...]
    expires_after: int

    @classmethod
    def of(cls, shape: Shape) -> Template:
        """Build the shape's record once; check the template against a second build."""
        ids = _SENTINELS if shape.end_state == "unscheduled" else _without_dependency(_SENTINELS)
        record, version = build(shape, ids, _REFERENCE)
        columns = row(record, version)
        template = cls(
            columns=tuple(columns),
            render_column=tuple(_column_renderer(name, value) for name, value in columns.items()),
            tags=tuple((tag["tag_key"], tag["tag_value"]) for tag in tag_rows([record])),
            expires_after=record.expires - _REFERENCE,
        )
        template._check(shape)
        return template

    def render(self, ids: Ids, created: int) -> tuple[Any, ...]:
        shift = created - _REFERENCE
        return tuple(render(ids, shift) for render in self.render_column)

    def _check(self, shape: Shape) -> None:
        other = Ids(
            task="Zm9yIHRoZSBjaGVjayBvbg",
            group="dGhlIHRlbXBsYXRlJ3MgZ3",
            scheduler="scheduler-check",
            project="project-check",
            dependency="c2hpZnQgYW5kIGlkcyBvaw" if shape.end_state == "unscheduled" else None,
        )
        created = _REFERENCE + 37 * DAY + 12_345
        expected = tuple(row(*build(shape, other, created)).values())
        rendered = self.render(other, created)
        if rendered != expected:
            wrong = [
                name for name, a, b in zip(self.columns, rendered, expected, strict=True) if a != b
            ]
            raise AssertionError(
                f"bulk_tasks: the {shape} template does not reproduce the coordinator's row "
                f"in columns {wrong}: a column that is not an id or a time shifted with created?"
            )


def _without_dependency(ids: Ids) -> Ids:
    return Ids(task=ids.task, group=ids.group, scheduler=ids.scheduler, project=ids.project)


def _column_renderer(name: str, value: Any) -> Callable[[Ids, int], Any]:
    if name in _ID_COLUMNS:
        attribute = _ID_COLUMNS[name]
        return lambda ids, _: getattr(ids, attribute)
    if name in _TIME_COLUMNS and value is not None:
        return lambda _, shift: value + shift
    if name in _JSON_COLUMNS:
        return _Text.parse(value).render
    return lambda _ids, _shift: value


# --- the stream -------------------------------------------------------------------------------


@dataclass(slots=True)
class Chunk:
    """Rows for each table, for a run of consecutive tasks."""

    tasks: list[tuple[Any, ...]] = field(default_factory=list)
    tags: list[tuple[str, str, str]] = field(default_factory=list)
    dependencies: list[tuple[str, str]] = field(default_factory=list)
    groups: list[tuple[str, str, int]] = field(default_factory=list)
    """``(task_group_id, scheduler_id, expires)`` of the groups whose last task is in it."""


TAG_COLUMNS: Final = ("task_id", "tag_key", "tag_value")
DEPENDENCY_COLUMNS: Final = ("required_task_id", "dependent_task_id")
GROUP_COLUMNS: Final = ("task_group_id", "scheduler_id", "expires")


@dataclass(slots=True)
class Generated:
    """What the stream wrote, filled in as it goes."""

    columns: tuple[str, ...] = ()
    states: Counter[FilterState] = field(default_factory=Counter)
    task_group_ids: list[str] = field(default_factory=list)
    tags: int = 0
    dependencies: int = 0


class _Weighted:
    """Draws one of ``choices`` with the given weights (bisect on the cumulative weights)."""

    def __init__(self, weights: Mapping[Any, float]) -> None:
        self.choices = list(weights)
        self.cumulative = list(itertools.accumulate(weights.values()))

    def draw(self, rng: random.Random) -> Any:
        return self.choices[bisect.bisect(self.cumulative, rng.random() * self.cumulative[-1])]


def _slug(rng: random.Random) -> str:
    """A "nice" v4 slugid from ``rng`` (slugid.nice, but deterministic)."""
    raw = bytearray(uuid.UUID(int=rng.getrandbits(128), version=4).bytes)
    raw[0] &= 0x7F
    encoded: str = slugid.encode(uuid.UUID(bytes=bytes(raw)))
    return encoded


def _created(position: float, now: int) -> tuple[int, int]:
    """The band (its index) and creation time of the task at ``position`` (0..1) of the
    stream: later tasks are newer, each band spread evenly over its ages."""
    start = 0.0
    for index, band in enumerate(BANDS):
        if position < start + band.share or index == len(BANDS) - 1:
            within = min(1.0, (position - start) / band.share)
            return index, now - band.oldest + round(within * (band.oldest - band.newest))
        start += band.share
    raise AssertionError("BANDS is empty")


def chunks(
    count: int,
    *,
    seed: int,
    now: int,
    generated: Generated,
    group_size: int | None = None,
    chunk_size: int = 5000,
) -> Iterator[Chunk]:
    """The rows of ``count`` tasks, ``chunk_size`` tasks at a time, in creation order;
    ``generated`` is filled in as they go. See :func:`fill` for ``group_size``."""
    rng = random.Random(seed)
    templates: dict[Shape, Template] = {}
    end_states = [_Weighted(band.end_states) for band in BANDS]
    kinds = _Weighted(KINDS)
    # a twentieth of the tasks at most, so that a few thousand tasks still make many groups
    mean_size = max(10, min(GROUP_SIZE, count // 20))
    chunk = Chunk()
    group_left = 0
    group = scheduler = project = ""
    group_expires = 0
    waiting_for: str | None = None
    for index in range(count):
        if group_left == 0:
            group, scheduler, project = _slug(rng), rng.choice(SCHEDULERS), rng.choice(PROJECTS)
            group_left = group_size or rng.randint(mean_size // 2, mean_size * 3 // 2)
            group_expires, waiting_for = 0, None
            generated.task_group_ids.append(group)
        band, created = _created(index / count, now)
        end_state: EndState = end_states[band].draw(rng)
        if end_state == "unscheduled" and waiting_for is None:
            end_state = "pending"  # nothing unresolved in the group yet to wait for
        kind = kinds.draw(rng)
        shape = Shape(
            rng.choice(WORKER_TYPES),
            kind,
            rng.choice(PLATFORMS),
            end_state,
            rng.randrange(len(PACES)),
        )
        template = templates.get(shape)
        if template is None:
            template = templates[shape] = Template.of(shape)
            generated.columns = template.columns
        ids = Ids(
            _slug(rng),
            group,
            scheduler,
            project,
            waiting_for if end_state == "unscheduled" else None,
        )
        created += rng.randrange(60_000)
        chunk.tasks.append(template.render(ids, created))
        chunk.tags += [(ids.task, key, value) for key, value in template.tags]
        if ids.dependency is not None:
            chunk.dependencies.append((ids.dependency, ids.task))
        if end_state in ("pending", "running"):
            waiting_for = ids.task
        generated.states[FILTER_STATE[end_state]] += 1
        group_expires = max(group_expires, created + template.expires_after)
        group_left -= 1
        if group_left == 0 or index == count - 1:
            chunk.groups.append((group, scheduler, group_expires))
            group_left = 0
        if len(chunk.tasks) >= chunk_size:
            generated.tags += len(chunk.tags)
            generated.dependencies += len(chunk.dependencies)
            yield chunk
            chunk = Chunk()
    if chunk.tasks:
        generated.tags += len(chunk.tags)
        generated.dependencies += len(chunk.dependencies)
        yield chunk


# --- the stores -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Filled:
    """What :func:`fill` wrote.

    :param now: the time the distribution is relative to (epoch ms).
    :param states: tasks by the state countTasks reports (``delayed`` apart from ``pending``).
    :param task_group_ids: in creation order.
    :param seconds: how long writing and analysing took.
    """

    tasks: int
    now: int
    states: Mapping[FilterState, int]
    task_group_ids: Sequence[str]
    tags: int
    dependencies: int
    seconds: float


async def fill(
    url: str,
    count: int,
    *,
    seed: int = 0,
    now: int | None = None,
    group_size: int | None = None,
    chunk_size: int = 5000,
) -> Filled:
    """Create the schema of the store at ``url`` (the coordinator's migrations) and write
    ``count`` tasks into it, with their tags, dependencies and task groups; then analyse them
    (PostgreSQL: and vacuum).

    :param now: what the tasks' times are relative to (default: the wall clock); the same seed
        and ``now`` give the same rows.
    :param group_size: tasks in every task group; by default 500 to 1,500 (a twentieth of
        ``count`` at most, 10 at least).
    """
    store = await open_store(url)
    await store.close()
    now = round(time.time() * 1000) if now is None else now
    generated = Generated()
    stream = chunks(
        count,
        seed=seed,
        now=now,
        generated=generated,
        group_size=group_size,
        chunk_size=chunk_size,
    )
    started = time.monotonic()
    if url.startswith("sqlite"):
        await asyncio.to_thread(_fill_sqlite, str(sqlite_path(url)), stream, generated)
    else:
        await _fill_postgres(url, stream, generated)
    return Filled(
        tasks=count,
        now=now,
        states=dict(generated.states),
        task_group_ids=tuple(generated.task_group_ids),
        tags=generated.tags,
        dependencies=generated.dependencies,
        seconds=time.monotonic() - started,
    )


async def _fill_postgres(url: str, stream: Iterator[Chunk], generated: Generated) -> None:
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            # the next chunk is generated in a thread while the server takes this one
            upcoming = asyncio.create_task(asyncio.to_thread(next, stream, None))
            while (chunk := await upcoming) is not None:
                upcoming = asyncio.create_task(asyncio.to_thread(next, stream, None))
                for table, records, columns in (
                    ("tasks", chunk.tasks, generated.columns),
                    ("task_tags", chunk.tags, TAG_COLUMNS),
                    ("task_dependencies", chunk.dependencies, DEPENDENCY_COLUMNS),
                    ("task_groups", chunk.groups, GROUP_COLUMNS),
                ):
                    if records:
                        await conn.copy_records_to_table(
                            table, records=records, columns=list(columns)
                        )
        # the tables as autovacuum leaves them (if the server runs it at all): statistics, the
        # visibility map and hint bits set, so that the first reads do not write every page
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()


def _fill_sqlite(path: str, stream: Iterator[Chunk], generated: Generated) -> None:
    conn = sqlite3.connect(path)
    try:
        with conn:
            for chunk in stream:
                for table, records, columns in (
                    ("tasks", chunk.tasks, generated.columns),
                    ("task_tags", chunk.tags, TAG_COLUMNS),
                    ("task_dependencies", chunk.dependencies, DEPENDENCY_COLUMNS),
                    ("task_groups", chunk.groups, GROUP_COLUMNS),
                ):
                    marks = ", ".join("?" for _ in columns)
                    conn.executemany(
                        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", records
                    )
        conn.execute("ANALYZE")
    finally:
        conn.close()
