"""Does listing a huge task group keep the coordinator's memory flat? (docs/protocol.md: listings
stream, one page at a time.)

For each store asked for (PostgreSQL, SQLite or both) this script:

1. makes an empty store: a new PostgreSQL database on the server of ``--admin-dsn`` (dropped
   at the end), or a SQLite file in a temporary directory (deleted at the end);
2. fills it with ``--tasks`` tasks (default 100,000) in one task group. This is measurement
   set-up, not API traffic: ``queue-coordinator migrate`` creates the schema, then the rows go
   in with one bulk statement (PostgreSQL ``COPY``, SQLite ``executemany`` in one
   transaction). Each row is what createTask would store, built by the coordinator's own code
   (``definitions.normalise``, ``lifecycle.create``, ``rows.insert_columns``): a pending task
   whose definition and runs are the same for every task, only the taskId differs;
3. starts ``queue-coordinator serve`` on that store as a child process (no Azure: the listing
   does not touch it; auth on, listings need no credentials);
4. samples the process's RSS with psutil every ``--sample-ms`` while it lists the whole group
   through the API (``listTaskGroup``, following ``continuationToken``
   until there is none), checking every task comes back exactly once, in order;
5. prints the baseline RSS (after start-up and a ping), RSS after the first page, the peak,
   the growth (peak - baseline), tasks listed, pages and time taken.

Exit status: 0 if every store listed every task with growth below ``--limit-mb`` (default
50), 1 otherwise, 2 if a run overran ``--timeout`` seconds.

    .venv/bin/python scripts/measure_listing_rss.py                 # both stores
    .venv/bin/python scripts/measure_listing_rss.py --store sqlite --tasks 20000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
import asyncpg
import psutil
import slugid

# Run as a file, this script has scripts/ first on the path; devharness lies in the
# repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The rows are built with the coordinator's own code (definitions, lifecycle, rows) because
# 100,000 createTask calls would take minutes and measure nothing this script is about.
from coordinator.api.clients import ensure_root_client
from coordinator.config import Config
from coordinator.domain import definitions, lifecycle
from coordinator.domain.records import record_from_definition, to_iso
from coordinator.service.clock import wall_clock
from coordinator.store.rows import insert_columns
from devharness.api import call
from devharness.postgres import ADMIN_DSN, throwaway_database
from devharness.processes import ServeProcess, child_env, log_tail, spawn

MB = 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    store: str
    tasks: int
    listed: int
    pages: int
    insert_s: float
    list_s: float
    baseline: int
    after_first_page: int
    peak: int

    @property
    def growth(self) -> int:
        return self.peak - self.baseline

    def line(self) -> str:
        return (
            f"store={self.store} tasks={self.tasks} listed={self.listed} pages={self.pages} "
            f"baseline_rss={self.baseline / MB:.1f}MB "
            f"after_first_page_rss={self.after_first_page / MB:.1f}MB "
            f"peak_rss={self.peak / MB:.1f}MB growth={self.growth / MB:.1f}MB "
            f"list_time={self.list_s:.1f}s ({self.listed / max(self.list_s, 1e-9):.0f} tasks/s) "
            f"setup_insert_time={self.insert_s:.1f}s"
        )


# --- the rows ---------------------------------------------------------------------------------


def rows(group: str, count: int) -> tuple[list[str], Iterator[tuple[Any, ...]]]:
    """Column names and ``count`` rows of pending tasks in ``group``, as createTask stores
    them."""
    now = wall_clock()
    body = {
        "provisionerId": "measure",
        "workerType": "listing",
        "taskGroupId": group,
        "created": to_iso(now),
        "deadline": to_iso(now + 86_400_000),
        "payload": {
            "image": "ubuntu:24.04",
            "command": ["/bin/bash", "-c", "make -j8 check"],
            "env": {"BUILD": "release", "TARGET": "x86_64-linux"},
            "maxRunTime": 3600,
        },
        "metadata": {
            "name": "listing measurement",
            "description": "created by scripts/measure_listing_rss.py",
            "owner": "measure@example.com",
            "source": "https://example.com/measure",
        },
        "tags": {"kind": "measurement"},
    }
    definition = definitions.normalise(
        "measure0000000000000A", body, now=now, max_deadline=Config().max_deadline
    )
    template = insert_columns(
        lifecycle.create(record_from_definition("x", definition), now=now).record
    )
    template["version"] = 1
    columns = list(template)
    values = [template[name] for name in columns]
    position = columns.index("task_id")

    def generate() -> Iterator[tuple[Any, ...]]:
        for _ in range(count):
            values[position] = slugid.nice()
            yield tuple(values)

    return columns, generate()


# --- the stores ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def sqlite_store() -> AsyncIterator[str]:
    with tempfile.TemporaryDirectory(prefix="qc-measure-") as directory:
        yield f"sqlite:///{Path(directory) / 'coordinator.db'}"


async def migrate(url: str, directory: Path) -> None:
    """Create the schema with ``queue-coordinator migrate``."""
    log = directory / "migrate.log"
    process = await spawn(
        [sys.executable, "-m", "coordinator.cli", "migrate", "--store-url", url],
        env=child_env(),
        log=log,
    )
    if await process.wait() != 0:
        raise RuntimeError(f"queue-coordinator migrate failed:\n{log_tail(log)}")


async def fill(url: str, group: str, count: int) -> None:
    columns, generated = rows(group, count)
    if url.startswith("sqlite"):
        path = "/" + urlsplit(url).path.lstrip("/")
        await asyncio.to_thread(_fill_sqlite, path, columns, generated)
        return
    conn = await asyncpg.connect(url)
    try:
        await conn.copy_records_to_table("tasks", records=generated, columns=columns)
        await conn.execute("ANALYZE tasks")
    finally:
        await conn.close()


def _fill_sqlite(path: str, columns: list[str], generated: Iterator[tuple[Any, ...]]) -> None:
    conn = sqlite3.connect(path)
    try:
        with conn:
            marks = ", ".join("?" for _ in columns)
            conn.executemany(
                f"INSERT INTO tasks ({', '.join(columns)}) VALUES ({marks})", generated
            )
        conn.execute("ANALYZE")
    finally:
        conn.close()


# --- the coordinator ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def coordinator(url: str, directory: Path) -> AsyncIterator[tuple[str, psutil.Process]]:
    """``queue-coordinator serve`` on the store; yields its API root and its process."""
    clients_file = directory / "clients.json"
    ensure_root_client(clients_file)
    serve = ServeProcess(
        data_dir=directory,
        store_url=url,
        clients_file=clients_file,
        log=directory / "coordinator.log",
        COORDINATOR_LOG_LEVEL="WARNING",
    )
    try:
        await serve.start()
        assert serve.process is not None
        yield serve.api, psutil.Process(serve.process.pid)
    finally:
        await serve.stop()


# --- the measurement ------------------------------------------------------------------------------


async def list_group(
    api: str, group: str, page_limit: int, after_first_page: list[int], process: psutil.Process
) -> tuple[int, int]:
    """List the whole group; returns (tasks, pages). Fails on a duplicate or out-of-order id."""
    listed = pages = 0
    last = ""
    token: str | None = None
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        while True:
            params = {"limit": str(page_limit)}
            if token:
                params["continuationToken"] = token
            response = await call(http, "GET", f"{api}/task-group/{group}/list?{urlencode(params)}")
            if response.status != 200:
                raise RuntimeError(f"listTaskGroup answered {response.status}: {response.body}")
            body = response.body
            for entry in body["tasks"]:
                task_id = entry["status"]["taskId"]
                if task_id <= last:
                    raise RuntimeError(f"task {task_id} listed out of order or twice")
                last = task_id
            listed += len(body["tasks"])
            pages += 1
            if pages == 1:
                after_first_page.append(process.memory_info().rss)
            token = body.get("continuationToken")
            if not token:
                return listed, pages


async def sample(process: psutil.Process, every: float, peak: list[int]) -> None:
    while True:
        peak[0] = max(peak[0], process.memory_info().rss)
        await asyncio.sleep(every)


async def measure(store: str, args: argparse.Namespace) -> Result:
    group = slugid.nice()
    store_context = (
        throwaway_database(args.admin_dsn, "qc_measure") if store == "postgres" else sqlite_store()
    )
    async with store_context as url:
        with tempfile.TemporaryDirectory(prefix="qc-measure-run-") as directory:
            await migrate(url, Path(directory))
            started = time.monotonic()
            await fill(url, group, args.tasks)
            insert_s = time.monotonic() - started
            async with coordinator(url, Path(directory)) as (api, process):
                baseline = process.memory_info().rss
                peak = [baseline]
                after_first_page: list[int] = []
                sampler = asyncio.create_task(sample(process, args.sample_ms / 1000, peak))
                started = time.monotonic()
                try:
                    listed, pages = await list_group(
                        api, group, args.page_limit, after_first_page, process
                    )
                finally:
                    list_s = time.monotonic() - started
                    sampler.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await sampler
                peak[0] = max(peak[0], process.memory_info().rss)
    return Result(
        store=store,
        tasks=args.tasks,
        listed=listed,
        pages=pages,
        insert_s=insert_s,
        list_s=list_s,
        baseline=baseline,
        after_first_page=after_first_page[0],
        peak=peak[0],
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["postgres", "sqlite", "both"], default="both")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--page-limit", type=int, default=1000, help="limit= of each page")
    parser.add_argument("--limit-mb", type=float, default=50.0, help="largest growth that passes")
    parser.add_argument("--sample-ms", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per store")
    parser.add_argument(
        "--admin-dsn",
        default=ADMIN_DSN,
        help="a PostgreSQL server and a database to create the measurement database from",
    )
    return parser.parse_args()


async def main() -> int:
    args = parse_args()
    stores = ["postgres", "sqlite"] if args.store == "both" else [args.store]
    status = 0
    for store in stores:
        try:
            result = await asyncio.wait_for(measure(store, args), args.timeout)
        except TimeoutError:
            print(f"store={store} FAILED: not done within {args.timeout:.0f} s", flush=True)
            return 2
        verdict = "ok"
        if result.listed != result.tasks:
            verdict = f"FAILED: listed {result.listed} of {result.tasks}"
        elif result.growth >= args.limit_mb * MB:
            verdict = f"FAILED: growth reached {args.limit_mb:.0f} MB"
        if verdict != "ok":
            status = 1
        print(f"{result.line()} {verdict}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
