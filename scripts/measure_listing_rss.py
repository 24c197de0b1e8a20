"""Do the listings that read every match keep the coordinator's memory flat? (docs/protocol.md:
listings stream, one page at a time.)

For each store asked for (PostgreSQL, SQLite or both) this script:

1. makes an empty store: a new PostgreSQL database on the server of ``--admin-dsn`` (dropped
   at the end), or a SQLite file in a temporary directory (deleted at the end);
2. fills it with ``--tasks`` tasks (default 100,000) in one task group with
   :func:`devharness.bulk_tasks.fill`: measurement set-up, not API traffic. The coordinator's
   migrations create the schema, then the rows go in with one bulk statement per table and
   chunk (PostgreSQL ``COPY``, SQLite ``executemany``, in one transaction), each row what the
   coordinator would store for a task that went through its lifecycle (tasks of 20 queues,
   every state, created over 30 days);
3. starts ``queue-coordinator serve`` on that store as a child process (no Azure: listings do
   not touch it; auth on, listings need no credentials);
4. exports every task through the management API as NDJSON (``GET /tasks?createdAfter=...``
   with ``Accept: application/x-ndjson``, a filter every task matches), reading the stream
   line by line, while it samples the process's RSS with psutil every ``--sample-ms``;
5. then pages through the whole group with ``listTaskGroup`` (``--page-limit`` a page,
   following ``continuationToken`` until there is none), sampling alike;
6. prints one line per listing: the RSS before it (baseline), after its first page or chunk,
   the peak, the growth (peak - baseline), tasks listed, pages and time taken. Each listing
   checks that every task arrives exactly once: ids strictly increasing, as many as were
   written.

Exit status: 0 if every listing of every store listed every task with growth below
``--limit-mb`` (default 50), 1 otherwise, 2 if a store's run overran ``--timeout`` seconds.

    .venv/bin/python scripts/measure_listing_rss.py                 # both stores
    .venv/bin/python scripts/measure_listing_rss.py --store sqlite --tasks 20000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import psutil

# Run as a file, this script has scripts/ first on the path; devharness lies in the
# repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devharness.api import call
from devharness.bulk_tasks import fill
from devharness.postgres import ADMIN_DSN, throwaway_database
from devharness.processes import serving

MB = 1024 * 1024
EVERYTHING = {"createdAfter": "2000-01-01T00:00:00.000Z"}
"""A management filter every task matches: the NDJSON export reads them all."""
NDJSON = "application/x-ndjson"


@dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    store: str
    listing: str
    tasks: int
    listed: int
    pages: int
    list_s: float
    baseline: int
    after_first_page: int
    peak: int

    @property
    def growth(self) -> int:
        return self.peak - self.baseline

    def line(self) -> str:
        return (
            f"store={self.store} listing={self.listing} tasks={self.tasks} "
            f"listed={self.listed} pages={self.pages} "
            f"baseline_rss={self.baseline / MB:.1f}MB "
            f"after_first_page_rss={self.after_first_page / MB:.1f}MB "
            f"peak_rss={self.peak / MB:.1f}MB growth={self.growth / MB:.1f}MB "
            f"list_time={self.list_s:.1f}s ({self.listed / max(self.list_s, 1e-9):.0f} tasks/s)"
        )


class Order:
    """Checks that task ids arrive strictly increasing, hence each at most once."""

    def __init__(self) -> None:
        self.last = ""
        self.count = 0

    def see(self, task_id: str) -> None:
        if task_id <= self.last:
            raise RuntimeError(f"task {task_id} listed out of order or twice")
        self.last = task_id
        self.count += 1


# --- the listings ---------------------------------------------------------------------------------

Listing = Callable[[aiohttp.ClientSession, str, Callable[[], None]], Awaitable[tuple[int, int]]]
"""Lists every task through the API root given; calls its third argument after the first page
(or chunk); returns (tasks, pages)."""


async def ndjson_export(
    http: aiohttp.ClientSession, api: str, first_page: Callable[[], None]
) -> tuple[int, int]:
    """listTasks as an NDJSON stream of every task (one "page": the stream)."""
    order = Order()
    url = f"{api}/tasks?{urlencode(EVERYTHING)}"
    async with http.get(url, headers={"Accept": NDJSON}) as response:
        if response.status != 200:
            raise RuntimeError(f"listTasks answered {response.status}: {await response.text()}")
        async for line in response.content:
            if line.strip():
                order.see(json.loads(line)["status"]["taskId"])
                if order.count == 1:
                    first_page()
    return order.count, 1


def task_group_pages(group: str, page_limit: int) -> Listing:
    """listTaskGroup, page after page."""

    async def listing(
        http: aiohttp.ClientSession, api: str, first_page: Callable[[], None]
    ) -> tuple[int, int]:
        order = Order()
        pages = 0
        token: str | None = None
        while True:
            params = {"limit": str(page_limit)}
            if token:
                params["continuationToken"] = token
            response = await call(http, "GET", f"{api}/task-group/{group}/list?{urlencode(params)}")
            if response.status != 200:
                raise RuntimeError(f"listTaskGroup answered {response.status}: {response.body}")
            for entry in response.body["tasks"]:
                order.see(entry["status"]["taskId"])
            pages += 1
            if pages == 1:
                first_page()
            token = response.body.get("continuationToken")
            if not token:
                return order.count, pages

    return listing


# --- the measurement ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def empty_store(store: str, admin_dsn: str) -> AsyncIterator[str]:
    if store == "postgres":
        async with throwaway_database(admin_dsn, "qc_measure") as url:
            yield url
    else:
        with tempfile.TemporaryDirectory(prefix="qc-measure-") as directory:
            yield f"sqlite:///{Path(directory) / 'coordinator.db'}"


async def sample(process: psutil.Process, every: float, peak: list[int]) -> None:
    while True:
        peak[0] = max(peak[0], process.memory_info().rss)
        await asyncio.sleep(every)


async def measure_listing(
    store: str,
    name: str,
    listing: Listing,
    api: str,
    process: psutil.Process,
    args: argparse.Namespace,
) -> Result:
    baseline = process.memory_info().rss
    peak = [baseline]
    after_first_page: list[int] = []
    sampler = asyncio.create_task(sample(process, args.sample_ms / 1000, peak))
    started = time.monotonic()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            listed, pages = await listing(
                http, api, lambda: after_first_page.append(process.memory_info().rss)
            )
    finally:
        list_s = time.monotonic() - started
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    peak[0] = max(peak[0], process.memory_info().rss)
    return Result(
        store=store,
        listing=name,
        tasks=args.tasks,
        listed=listed,
        pages=pages,
        list_s=list_s,
        baseline=baseline,
        after_first_page=after_first_page[0] if after_first_page else peak[0],
        peak=peak[0],
    )


async def measure(store: str, args: argparse.Namespace) -> list[Result]:
    async with empty_store(store, args.admin_dsn) as url:
        with tempfile.TemporaryDirectory(prefix="qc-measure-run-") as directory:
            # one group of every task, so that listTaskGroup pages through all of them too
            filled = await fill(url, args.tasks, seed=args.seed, group_size=args.tasks)
            print(
                f"store={store} setup: {filled.tasks} tasks, {filled.tags} tags written and "
                f"analysed in {filled.seconds:.1f}s; states {dict(sorted(filled.states.items()))}",
                flush=True,
            )
            (group,) = filled.task_group_ids
            listings = {
                "ndjson": ndjson_export,
                "task-group-pages": task_group_pages(group, args.page_limit),
            }
            async with serving(url, Path(directory), COORDINATOR_LOG_LEVEL="WARNING") as serve:
                assert serve.process is not None
                process = psutil.Process(serve.process.pid)
                return [
                    await measure_listing(store, name, listing, serve.api, process, args)
                    for name, listing in listings.items()
                ]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["postgres", "sqlite", "both"], default="both")
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0, help="of the generated tasks")
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
            results = await asyncio.wait_for(measure(store, args), args.timeout)
        except TimeoutError:
            print(f"store={store} FAILED: not done within {args.timeout:.0f} s", flush=True)
            return 2
        for result in results:
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
