"""How fast the management API (listTasks, countTasks) answers over a million tasks, and which
plan PostgreSQL runs for each filter.

1. A throwaway PostgreSQL database (on the server of ``--admin-dsn``, dropped at the end) gets
   ``--tasks`` tasks (default 1,000,000) from :func:`devharness.bulk_tasks.fill`: 20 task
   queues, 10 schedulerIds, groups of about 1,000, every state, created over 30 days.
2. ``queue-coordinator serve`` runs on it (no Azure; reads need no credentials).
3. Each query is sent once to warm up, then ``--repeat`` times; the table gives the median and
   the maximum wall-clock time at the client until the whole answer is read. listTasks asks
   for a first page of ``limit=100`` and of ``limit=1000``; countTasks counts.
4. For each query, the store's own statement (``queries.sql`` with the filter's clause) runs
   alone through asyncpg, ``--repeat`` times after a warm-up (the SQL columns, limit 100: the
   first page, and for listTasks the page after the middle task id, which a continuationToken
   would ask for), and EXPLAIN names the plan: the node types down to the first scan, then
   every scan with its index. A different plan at limit 1000, for the later page, or as the
   generic plan (what a prepared statement run often enough may use, whatever its values) is
   noted under the tables; a statement slower than ``--slow-ms`` alone gets its ``EXPLAIN
   (ANALYZE, BUFFERS)``.

Exit status 0 when every request answered 200, 1 otherwise.

    .venv/bin/python scripts/bench_management.py                  # 1,000,000 tasks
    .venv/bin/python scripts/bench_management.py --tasks 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import asyncpg
from multidict import MultiDict

# Run as a file, this script has scripts/ (benchlib) first on the path; devharness lies in
# the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib.common import CpuMeter, machine_description, own_process, pids, processes_named

from coordinator.api.filters import task_filter
from coordinator.domain.records import to_iso
from coordinator.domain.task_filters import TaskFilter
from coordinator.store.postgres import filtered_statement
from devharness.bulk_tasks import DAY, PROVISIONER_ID, WORKER_TYPES, Filled, fill
from devharness.postgres import ADMIN_DSN, throwaway_database
from devharness.processes import ServeProcess, serving
from devharness.query_plans import Plan, Statement, parameters, postgres_plan

LIMITS = (100, 1000)


@dataclass(frozen=True, kw_only=True, slots=True)
class Query:
    """One filter of the table: its label and its query string."""

    label: str
    params: tuple[tuple[str, str], ...]

    @property
    def task_filter(self) -> TaskFilter:
        """The filter as the coordinator reads the query string."""
        return task_filter(MultiDict(self.params))


@dataclass(kw_only=True)
class Timed:
    """A query's measurements."""

    query: Query
    matches: int | None = None
    api_ms: dict[int, list[float]] = field(default_factory=dict)
    """Per limit (0 for countTasks): wall-clock ms of each request."""
    sql_ms: list[float] = field(default_factory=list)
    deep_sql_ms: list[float] = field(default_factory=list)
    """listTasks: the statement alone for the page after the middle task id."""
    plans: dict[str, Plan] = field(default_factory=dict)
    """``custom`` (a first page of 100), ``generic``, and for listTasks the other pages."""
    failures: list[str] = field(default_factory=list)
    analyses: dict[str, str] = field(default_factory=dict)
    """What was slow (``first page``, ``count``, ...) -> its ``EXPLAIN ANALYZE``."""


def queries(filled: Filled) -> tuple[list[Query], list[Query]]:
    """The listTasks and countTasks queries, with values that match about as many tasks as
    their filter typically does: one queue of 20, one state, one scheduler of 10, one group,
    one project of 5, the rarest and the commonest ``kind`` tag, a one-day window ten days
    back."""
    task_queue_id = f"{PROVISIONER_ID}/{WORKER_TYPES[7]}"
    # a group created 3 days ago (78 % of the way through the stream): it has pending tasks
    group = filled.task_group_ids[int(len(filled.task_group_ids) * 0.78)]
    day = [to_iso(filled.now - 10 * DAY), to_iso(filled.now - 9 * DAY)]
    created = (("createdAfter", day[0]), ("createdBefore", day[1]))
    resolved = (("resolvedAfter", day[0]), ("resolvedBefore", day[1]))
    listed = [
        Query(label="taskQueueId", params=(("taskQueueId", task_queue_id),)),
        Query(label="state=pending", params=(("state", "pending"),)),
        Query(label="schedulerId", params=(("schedulerId", "scheduler-3"),)),
        Query(label="taskGroupId", params=(("taskGroupId", group),)),
        Query(label="projectId", params=(("projectId", "project-2"),)),
        Query(label="tag=kind:lint", params=(("tag", "kind:lint"),)),
        Query(label="tag=kind:test", params=(("tag", "kind:test"),)),
        Query(label="created, one day", params=created),
        Query(label="resolved, one day", params=resolved),
        Query(
            label="taskQueueId + state=pending",
            params=(("taskQueueId", task_queue_id), ("state", "pending")),
        ),
        Query(
            label="taskGroupId + state=pending",
            params=(("taskGroupId", group), ("state", "pending")),
        ),
        Query(
            label="schedulerId + created, one day",
            params=(("schedulerId", "scheduler-3"), *created),
        ),
    ]
    counted = [
        Query(label="taskQueueId", params=(("taskQueueId", task_queue_id),)),
        Query(
            label="taskQueueId + state=pending",
            params=(("taskQueueId", task_queue_id), ("state", "pending")),
        ),
        Query(label="state=completed", params=(("state", "completed"),)),
        Query(label="projectId", params=(("projectId", "project-2"),)),
        Query(label="tag=kind:lint", params=(("tag", "kind:lint"),)),
    ]
    return listed, counted


# --- measuring ----------------------------------------------------------------------------------


async def request_ms(http: aiohttp.ClientSession, url: str) -> tuple[float, int, bytes]:
    """Wall-clock ms until the whole answer is read, its status and its body."""
    started = time.perf_counter()
    async with http.get(url) as response:
        body = await response.read()
    return (time.perf_counter() - started) * 1000, response.status, body


async def time_api(
    http: aiohttp.ClientSession, timed: Timed, url: str, key: int, repeat: int
) -> bytes:
    """Warm up once, then time ``repeat`` requests; the last answer's body."""
    body = b""
    for attempt in range(repeat + 1):
        ms, status, body = await request_ms(http, url)
        if status != 200:
            timed.failures.append(f"{url} -> {status}: {body[:300]!r}")
            return body
        if attempt:
            timed.api_ms.setdefault(key, []).append(ms)
    return body


async def time_sql(
    conn: asyncpg.Connection,
    timed: Timed,
    statement: Statement,
    *,
    now: int,
    repeat: int,
    after: str = "",
) -> list[float]:
    """The store's statement run alone: ms of each of ``repeat`` runs after a warm-up."""
    filters, params = parameters(
        statement, timed.query.task_filter, postgres=True, now=now, limit=LIMITS[0], after=after
    )
    rewritten = filtered_statement(statement, filters)
    runs = []
    for attempt in range(repeat + 1):
        started = time.perf_counter()
        await conn.fetch(rewritten.sql, *rewritten.args(params))
        if attempt:
            runs.append((time.perf_counter() - started) * 1000)
    return runs


async def explain(
    conn: asyncpg.Connection,
    timed: Timed,
    statement: Statement,
    *,
    now: int,
    middle: str,
    slow_ms: float,
) -> None:
    """The plans of the query, and how the slow ones spend their time."""
    matching = timed.query.task_filter
    timed.plans["custom"] = await postgres_plan(conn, statement, matching, now=now)
    timed.plans["generic"] = await postgres_plan(conn, statement, matching, now=now, generic=True)
    if statement == "list_tasks":
        timed.plans["at limit 1000"] = await postgres_plan(
            conn, statement, matching, now=now, limit=LIMITS[1]
        )
        timed.plans["after the middle task id"] = await postgres_plan(
            conn, statement, matching, now=now, after=middle
        )
    # the statement's own time: a page of 1,000 costs the coordinator more than the database
    if timed.sql_ms and statistics.median(timed.sql_ms) > slow_ms:
        analysed = await postgres_plan(conn, statement, matching, now=now, analyse=True)
        timed.analyses["first page" if statement == "list_tasks" else "count"] = analysed.text
    if timed.deep_sql_ms and statistics.median(timed.deep_sql_ms) > slow_ms:
        analysed = await postgres_plan(
            conn, statement, matching, now=now, after=middle, analyse=True
        )
        timed.analyses["the page after the middle task id"] = analysed.text


async def measure(
    api: str, dsn: str, filled: Filled, args: argparse.Namespace
) -> tuple[list[Timed], list[Timed]]:
    listed, counted = queries(filled)
    results = ([Timed(query=query) for query in listed], [Timed(query=query) for query in counted])
    conn = await asyncpg.connect(dsn)
    try:
        middle = await conn.fetchval(
            "SELECT task_id FROM tasks ORDER BY task_id OFFSET $1 LIMIT 1", filled.tasks // 2
        )
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http:
            for timed in results[0]:
                query = urlencode(timed.query.params)
                for limit in LIMITS:
                    await time_api(
                        http, timed, f"{api}/tasks?{query}&limit={limit}", limit, args.repeat
                    )
                _, status, body = await request_ms(http, f"{api}/tasks/count?{query}")
                if status == 200:
                    timed.matches = int(json.loads(body)["total"])
                timed.sql_ms = await time_sql(
                    conn, timed, "list_tasks", now=filled.now, repeat=args.repeat
                )
                timed.deep_sql_ms = await time_sql(
                    conn, timed, "list_tasks", now=filled.now, repeat=args.repeat, after=middle
                )
                await explain(
                    conn,
                    timed,
                    "list_tasks",
                    now=filled.now,
                    middle=middle,
                    slow_ms=args.slow_ms,
                )
            for timed in results[1]:
                query = urlencode(timed.query.params)
                body = await time_api(http, timed, f"{api}/tasks/count?{query}", 0, args.repeat)
                if not timed.failures:
                    timed.matches = int(json.loads(body)["total"])
                timed.sql_ms = await time_sql(
                    conn, timed, "count_tasks", now=filled.now, repeat=args.repeat
                )
                await explain(
                    conn,
                    timed,
                    "count_tasks",
                    now=filled.now,
                    middle=middle,
                    slow_ms=args.slow_ms,
                )
    finally:
        await conn.close()
    return results


# --- the report -----------------------------------------------------------------------------------


def _ms(values: Sequence[float] | None) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):,.1f} / {max(values):,.1f}"


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def report(
    listed: Sequence[Timed], counted: Sequence[Timed], filled: Filled, args: argparse.Namespace
) -> list[str]:
    lines = [
        "| listTasks filter | matches | limit 100: median / max ms | limit 1000: median / max ms "
        "| SQL alone, limit 100: median / max ms | SQL alone, the page after the middle task "
        "id | plan (limit 100) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for timed in listed:
        lines.append(
            f"| {timed.query.label} | {_count(timed.matches)} | {_ms(timed.api_ms.get(100))} "
            f"| {_ms(timed.api_ms.get(1000))} | {_ms(timed.sql_ms)} | {_ms(timed.deep_sql_ms)} "
            f"| {timed.plans['custom'].summary() if timed.plans else '-'} |"
        )
    lines += [
        "",
        "| countTasks filter | total | median / max ms | SQL alone: median / max ms | plan |",
        "|---|---:|---:|---:|---|",
    ]
    for timed in counted:
        lines.append(
            f"| {timed.query.label} | {_count(timed.matches)} | {_ms(timed.api_ms.get(0))} "
            f"| {_ms(timed.sql_ms)} | {timed.plans['custom'].summary() if timed.plans else '-'} |"
        )
    notes = []
    slow = []
    for kind, timed in [("listTasks", t) for t in listed] + [("countTasks", t) for t in counted]:
        name = f"{kind} {timed.query.label}"
        for failure in timed.failures:
            notes.append(f"- {name} FAILED: {failure}")
        custom = timed.plans.get("custom")
        for what, plan in timed.plans.items():
            if custom is not None and plan.summary() != custom.summary():
                notes.append(f"- {name}, {what}: {plan.summary()}")
        for what, analysis in timed.analyses.items():
            slow += ["", f"{name}, {what}, slower than {args.slow_ms:.0f} ms:", "```", analysis]
            slow.append("```")
    if notes:
        lines += ["", "Plans other than the first page's, and failures:", "", *notes]
    return lines + slow


# --- main -----------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def coordinator(
    args: argparse.Namespace,
) -> AsyncIterator[tuple[ServeProcess, str, Filled]]:
    """A filled database and a coordinator serving it: (the coordinator, the database's DSN,
    what was written)."""
    async with throwaway_database(args.admin_dsn, "qc_bench_management") as dsn:
        filled = await fill(dsn, args.tasks, seed=args.seed)
        with tempfile.TemporaryDirectory(prefix="qc-bench-management-") as directory:
            async with serving(dsn, Path(directory), COORDINATOR_LOG_LEVEL="WARNING") as serve:
                yield serve, dsn, filled


async def server_version(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


async def main() -> int:
    args = parse_args()
    started = time.monotonic()
    print(f"queue-coordinator management bench, {datetime.now():%Y-%m-%d %H:%M:%S}", flush=True)
    print("", *machine_description()[:3], sep="\n", flush=True)
    async with coordinator(args) as (serve, dsn, filled):
        states = ", ".join(f"{state} {n:,}" for state, n in sorted(filled.states.items()))
        print(
            f"PostgreSQL {await server_version(dsn)}\n\n"
            f"Store: {filled.tasks:,} tasks ({states}), {filled.tags:,} tags, "
            f"{len(filled.task_group_ids):,} task groups, {filled.dependencies:,} dependencies; "
            f"written and analysed in {filled.seconds:.1f} s\n"
            f"Each figure: median / max of {args.repeat} runs after one warm-up; the API ones "
            "at the client until the whole answer is read, first page (no continuationToken)\n",
            flush=True,
        )
        # the machine is shared: how busy it was besides the bench tells how far to trust it
        # The whole server: parallel workers are reaped by the postmaster, whose children's
        # times are the only place their CPU shows up.
        meter = CpuMeter(
            {
                "coordinator": pids(serve.process),
                "postgres (whole server)": lambda: processes_named("postgres"),
                "bench": own_process,
            }
        )
        meter.start()
        listed, counted = await measure(serve.api, dsn, filled, args)
        meter.stop()
    print("\n".join(report(listed, counted, filled, args)))
    used = ", ".join(f"{name} {seconds:.1f}" for name, seconds in meter.used.items())
    print(
        f"\nWhile measuring: CPU seconds {used}; the machine {meter.busy_cores:.2f} cores busy, "
        f"{meter.other_cores:.2f} of them by other processes"
    )
    print(f"\n{time.monotonic() - started:.0f} s in all", flush=True)
    return 1 if any(t.failures for t in (*listed, *counted)) else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each query")
    parser.add_argument("--seed", type=int, default=0, help="of the generated tasks")
    parser.add_argument(
        "--slow-ms",
        type=float,
        default=200.0,
        help="explain-analyse the statements slower than this alone",
    )
    parser.add_argument(
        "--admin-dsn",
        default=ADMIN_DSN,
        help="a PostgreSQL server and a database to create the bench database from",
    )
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
