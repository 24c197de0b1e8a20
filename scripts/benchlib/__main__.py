"""``scripts/bench``: run every row on this machine with the same settings, print one table.

    scripts/bench [--duration S] [--warmup S] [--workers K] [--batch N] [--producers P]
                  [--depth D] [--create-batch N] [--create-requests R]
                  [--artifact-count N] [--artifact-mib M] [--big-artifact-mib M]
                  [--create-rate R] [--latency-duration S] [--hold S]
                  [--rows raw-rest,e2e-sqlite,...] [--rounds N]
                  [--auth] [--profile]
                  [--json FILE] [--markdown FILE]

Rows: raw-rest, raw-sdk (row 1); e2e-sqlite, e2e-postgres (row 2: createTasks and the batching
SDK), e2e-sqlite-single, e2e-postgres-single (row 2, one request per step), e2e-sqlite-runlog
(e2e-sqlite with the workers' run log uploaded; every other row runs its workers with
--no-run-log), e2e-sqlite-app (e2e-sqlite with tasks as Python functions: queue-worker --app
serving a function that returns None); coord-sqlite, coord-postgres (row 3: createTasks, claimRuns,
resolveRuns), coord-sqlite-single, coord-postgres-single (row 3: createTask, claimTask,
reportCompleted); the peers celery, dramatiq, rq (RQ's default forking worker), rq-simple (its
SimpleWorker, no fork), procrastinate (row 4); idle (four idle workers' Azure requests, and the
pickup time their backoff costs); create-single (createTask) and create-batch (createTasks),
SQLite with Azurite hints, and create-dispatch and create-dispatch-many, the same through
worker_sdk.App's dispatch and dispatch_many (row 6); isolation (e2e-sqlite with queue-worker
--isolation none, then process: rows isolation-none and isolation-process) (row 7);
artifacts-directory, artifacts-azure (row 8: upload and download MiB/s through the coordinator
against the same bytes straight to the backend, --artifact-count artifacts of --artifact-mib MiB
each way); artifact-1gib (row 9: one --big-artifact-mib MiB upload, the coordinator's RSS growth,
createTask p99 during it against without it; about 20-30 s and 1 GiB of disk with the
defaults); events-sqlite, events-postgres (row 10: createTask + claimTask + reportCompleted with
Pulse publishing off and on, and the outbox's drain after a broker outage; needs the RabbitMQ of
COORDINATOR_TEST_AMQP); store-sqlite, store-postgres (row 2 under store dispatch: no Azurite,
the workers claim through claimWork), store-sqlite-defaults, store-postgres-defaults (the same
with the defaults on: Hawk authentication, the run log, a handler that logs a line),
store-sqlite-events, store-postgres-events (with Pulse publishing on, to the RabbitMQ of
COORDINATOR_TEST_AMQP), store-postgres-vacuum-held (store-postgres while another connection
holds a transaction open), store-postgres-processes (store-postgres with two serve
processes); auth (rows auth-clients-file and auth-api-clients: authenticated requests for a
client of the clients file against one the auth API made);
index-find-sqlite, index-find-postgres (findTask of random entries among 100,000: its rate and
p50/p99), index-lag (store-sqlite with every task indexed on completion: its rate, and how
soon after a run resolved its entry is found); cancel-store, cancel-azure (--batch running
handlers cancelled by cancelTask spread over the window, under store and Azure dispatch: the
time from cancelTask's answer to the handler's CancelledError, p50/p99). The
ratios (row 5) are computed from whichever ran; the Latency section gives pending time at 50 %
and 80 % of each row's rate (e2e-sqlite, e2e-postgres, store-<store> and
store-<store>-defaults, and the peers).
Everything talks to 127.0.0.1 only; each row is bounded by warm-up + duration + drain.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from benchlib import (
    artifacts,
    authn,
    cancel,
    coordinator_only,
    create,
    e2e,
    events,
    idle,
    index,
    isolation,
    peers,
    raw,
    rounds,
)
from benchlib.common import TIMES, Row, Settings, machine_description
from benchlib.coordproc import StoreKind
from devharness.azurite import AzuriteProcess

ALL_ROWS = (
    "raw-rest",
    "raw-sdk",
    "e2e-sqlite",
    "e2e-sqlite-runlog",
    "e2e-sqlite-app",
    "e2e-postgres",
    "e2e-sqlite-single",
    "e2e-postgres-single",
    "coord-sqlite",
    "coord-postgres",
    "coord-sqlite-single",
    "coord-postgres-single",
    *peers.PEERS,
    "idle",
    "create-single",
    "create-batch",
    "create-dispatch",
    "create-dispatch-many",
    "isolation",
    "artifacts-directory",
    "artifacts-azure",
    "artifact-1gib",
    "events-sqlite",
    "events-postgres",
    "store-sqlite",
    "store-postgres",
    "store-sqlite-defaults",
    "store-postgres-defaults",
    "store-sqlite-events",
    "store-postgres-events",
    "store-postgres-vacuum-held",
    "store-postgres-processes",
    "auth",
    "index-find-sqlite",
    "index-find-postgres",
    "index-lag",
    "cancel-store",
    "cancel-azure",
)

PERCENT = "{:.0%}"
FACTOR = "{:.1f}" + TIMES


class Ratio(NamedTuple):
    """One ratio line: ``figure`` of row ``top`` over that of row ``bottom``, written with
    ``form``, named ``label`` (default ``top / bottom``). A ratio of rates also gives the
    ratio of their CPU ceilings."""

    top: str
    bottom: str
    form: str
    label: str = ""
    figure: Literal["rate", "p99_ms"] = "rate"


RATIOS = (
    Ratio("e2e-sqlite", "raw-rest", PERCENT),
    Ratio("e2e-postgres", "raw-rest", PERCENT),
    Ratio("e2e-sqlite-single", "raw-rest", PERCENT),
    Ratio("e2e-postgres-single", "raw-rest", PERCENT),
    Ratio("e2e-sqlite", "e2e-sqlite-single", FACTOR),
    Ratio("e2e-postgres", "e2e-postgres-single", FACTOR),
    Ratio("e2e-sqlite-runlog", "e2e-sqlite", PERCENT),
    Ratio("e2e-sqlite", "raw-sdk", PERCENT),
    Ratio("e2e-postgres", "raw-sdk", PERCENT),
    # store dispatch (rows store-sqlite and store-postgres) against the raw limit and the peers
    *(
        Ratio(f"store-{store}", bottom, PERCENT)
        for store in ("sqlite", "postgres")
        for bottom in ("raw-rest", *peers.PEERS)
    ),
    *(
        Ratio(f"e2e-{store}", peer, PERCENT)
        for store in ("sqlite", "postgres")
        for peer in peers.PEERS
    ),
    Ratio("store-sqlite", "e2e-sqlite", PERCENT),
    Ratio("store-postgres", "e2e-postgres", PERCENT),
    # what the defaults (auth, run log), events and a held transaction cost store dispatch
    *(
        ratio
        for store in ("sqlite", "postgres")
        for ratio in (
            Ratio(f"store-{store}-defaults", "dramatiq", PERCENT),
            Ratio(f"store-{store}-defaults", f"store-{store}", PERCENT),
            Ratio(f"store-{store}-events", f"store-{store}", PERCENT),
        )
    ),
    Ratio("store-postgres-vacuum-held", "store-postgres", PERCENT),
    Ratio("store-postgres-processes", "store-postgres", PERCENT),
    Ratio("index-lag", "store-sqlite", PERCENT),
    Ratio("create-batch", "create-single", FACTOR),
    Ratio(
        "create-dispatch-many",
        "create-batch",
        PERCENT,
        "create-dispatch-many / create-batch (target >= 90%)",
    ),
    Ratio(
        "create-dispatch",
        "create-single",
        PERCENT,
        "create-dispatch / create-single (target >= 80%)",
    ),
    Ratio("e2e-sqlite-app", "e2e-sqlite", PERCENT),
    Ratio("e2e-sqlite-app", "e2e-sqlite-runlog", PERCENT),
    Ratio("isolation-process", "isolation-none", PERCENT),
    *(
        Ratio(
            f"artifacts-{backend}-{way}",
            f"artifacts-{backend}-{way}-direct",
            PERCENT,
            f"artifacts-{backend} {way} / direct",
        )
        for backend in ("directory", "azure")
        for way in ("upload", "download")
    ),
    *(
        Ratio(
            f"events-{store}-on",
            f"events-{store}-off",
            PERCENT,
            f"events-on / events-off, {label} (target >= 80%)",
        )
        for store, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL"))
    ),
    Ratio(
        "auth-api-clients",
        "auth-clients-file",
        PERCENT,
        "auth-api-clients / auth-clients-file (target >= 90%)",
    ),
    Ratio(
        "artifact-1gib-createtask",
        "artifact-1gib-createtask-quiet",
        FACTOR,
        "artifact-1gib createTask p99 during the upload / without (target < 2" + TIMES + ")",
        figure="p99_ms",
    ),
)


def _parser() -> argparse.ArgumentParser:
    defaults = Settings()
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=defaults.duration, help="s per row")
    parser.add_argument("--warmup", type=float, default=defaults.warmup, help="s before each")
    parser.add_argument("--drain", type=float, default=defaults.drain, help="s to finish up")
    parser.add_argument(
        "--workers", type=int, default=defaults.workers, help="worker/consumer processes"
    )
    parser.add_argument(
        "--batch", type=int, default=defaults.batch, help="messages per get = SDK capacity"
    )
    parser.add_argument(
        "--producers", type=int, default=defaults.producers, help="concurrent creates/puts"
    )
    parser.add_argument("--depth", type=int, default=defaults.depth, help="queue depth kept")
    parser.add_argument("--priority", default=defaults.priority, help="task priority")
    parser.add_argument(
        "--lifecycle-tasks",
        type=int,
        default=defaults.lifecycle_tasks,
        help="tasks pre-created for the coordinator-alone rows",
    )
    parser.add_argument(
        "--latency-duration",
        type=float,
        default=defaults.latency_duration,
        help="s of open-loop load at each of 50%% and 80%% of a row's rate",
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=defaults.hold,
        help="s store-postgres-vacuum-held has held its transaction when its window ends",
    )
    parser.add_argument(
        "--create-batch",
        type=int,
        default=defaults.create_batch,
        help="tasks per createTasks request (create-batch row, at most 1000)",
    )
    parser.add_argument(
        "--create-requests",
        type=int,
        default=defaults.create_requests,
        help="concurrent createTasks requests (create-batch row)",
    )
    parser.add_argument(
        "--artifact-count",
        type=int,
        default=defaults.artifact_count,
        help="artifacts each way per phase (artifacts-* rows)",
    )
    parser.add_argument(
        "--artifact-mib",
        type=int,
        default=defaults.artifact_mib,
        help="MiB per artifact (artifacts-* rows)",
    )
    parser.add_argument(
        "--big-artifact-mib",
        type=int,
        default=defaults.big_artifact_mib,
        help="MiB of the artifact-1gib row's one upload",
    )
    parser.add_argument(
        "--create-rate",
        type=float,
        default=defaults.create_rate,
        help="createTask calls started per second during and after that upload",
    )
    parser.add_argument("--auth", action="store_true", help="Hawk auth on (generated clients)")
    parser.add_argument(
        "--worker-log-level", default=defaults.worker_log_level, help="queue-worker --log-level"
    )
    parser.add_argument(
        "--coordinator-log-level",
        default=defaults.coordinator_log_level,
        help="COORDINATOR_LOG_LEVEL of the coordinator process",
    )
    parser.add_argument(
        "--profile", action="store_true", help="run the coordinator and worker 0 under pyinstrument"
    )
    parser.add_argument(
        "--rows",
        default=",".join(ALL_ROWS),
        help=f"comma-separated subset of {', '.join(ALL_ROWS)} (default: all)",
    )
    parser.add_argument(
        "--rounds",
        type=_positive,
        default=1,
        help="run the rows this many times, every other round in reverse order; the table "
        "shows each row's median round, and each ratio the median of the rounds' ratios",
    )
    parser.add_argument("--postgres", default=defaults.postgres_dsn, help="admin DSN")
    parser.add_argument("--redis", default=defaults.redis_url, help="Redis URL")
    parser.add_argument("--workdir", type=Path, help="logs and data (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the workdir")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--markdown", type=Path, help="also write the report as Markdown here")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number")
    return value


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _cpu(row: Row) -> str:
    return ", ".join(f"{name} {ms:.2f}" for name, ms in row.cpu_ms.items()) or "-"


def render(
    rows: list[Row],
    ran: Sequence[Sequence[Row]],
    settings: Settings,
    started: float,
    elapsed: float,
) -> str:
    """The report of the rounds ``ran`` (one list of rows each), whose rows the table shows
    are ``rows`` (:func:`benchlib.rounds.median_rows`)."""
    lines = [
        f"queue-coordinator bench, {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}"
        f", {elapsed:.0f} s in all",
        "",
        *machine_description(),
        "",
        f"Settings: {settings.workers} worker/consumer processes x batch {settings.batch} "
        f"(SDK capacity), {settings.producers} concurrent producer requests, target depth "
        f"{settings.depth}, window {settings.duration:g} s after {settings.warmup:g} s warm-up, "
        f"priority {settings.priority}, auth {'on' if settings.auth else 'off'}, "
        f"log level coordinator {settings.coordinator_log_level}, "
        f"workers {settings.worker_log_level}"
        + (", PROFILED (slower)" if settings.profile else "")
        + (f", {len(ran)} rounds (the median of each)" if len(ran) > 1 else ""),
        "",
        "| row | rate | CPU ceiling | unit | items | p50 ms | p99 ms | depth mean/max "
        "| busy cores (others) | CPU ms per item, by process |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        if row.error:
            lines.append(f"| {row.title} | FAILED | | | | | | | | {row.error} |")
            continue
        depth = (
            "-"
            if row.depth_mean is None
            else f"{row.depth_mean:.0f}/{row.depth_max if row.depth_max is not None else '-'}"
        )
        lines.append(
            f"| {row.title} | {_fmt(row.rate)} | {_fmt(row.ceiling)} | {row.unit} | {row.count} | "
            f"{_fmt(row.p50_ms, 1)} | {_fmt(row.p99_ms, 1)} | {depth} | "
            f"{_fmt(row.busy_cores, 2)} ({_fmt(row.other_cores, 2)}) | {_cpu(row)} |"
        )
    lines += [
        "",
        "CPU ceiling: the rate the row's measured CPU time per item allows on this machine's "
        "cores with nothing else running (a single-process group is held to one core).",
        "",
        "Ratios (measured rate; CPU ceiling):",
    ]
    for ratio in RATIOS:
        lines += _ratio_line(ratio, ran)
    loads = [
        f"- {row.key} at {load.load}%: pending p50/p95/p99 {'≥' if load.unstarted else '='} "
        f"{_fmt(load.p50_ms, 1)}/{_fmt(load.p95_ms, 1)}/{_fmt(load.p99_ms, 1)} ms "
        f"({load.count} jobs at {load.offered:,.0f}/s"
        + (f", {load.unstarted} not started" if load.unstarted else "")
        + ")"
        for row in rows
        for load in row.latency
    ]
    if loads:
        lines += [
            "",
            "Latency (pending time: the producer's enqueue call -> the handler's start):",
            *loads,
        ]
    memory = [
        f"- {row.key}: "
        + ", ".join(
            f"{name} {start:,.1f} -> {end:,.1f}" for name, (start, end) in row.rss_mib.items()
        )
        for row in rows
        if row.rss_mib
    ]
    if memory:
        lines += [
            "",
            "Memory (RSS in MiB of each process group, summed: after the warm-up -> at the end "
            "of the window):",
            *memory,
        ]
    notes = [f"- {row.key}: {note}" for row in rows for note in row.notes]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines)


def _ratio_line(ratio: Ratio, ran: Sequence[Sequence[Row]]) -> list[str]:
    """The line of ``ratio`` (over several rounds: the median of theirs, and their range), or
    none if no round has both rows with the figure."""
    values, ceilings = rounds.ratios(ran, ratio.top, ratio.bottom, ratio.figure)
    if not values:
        return []
    form = ratio.form
    line = f"- {ratio.label or f'{ratio.top} / {ratio.bottom}'}: "
    line += form.format(statistics.median(values))
    if ratio.figure == "rate":
        line += "; " + (form.format(statistics.median(ceilings)) if ceilings else "-")
    if len(ran) > 1:
        line += (
            f" (median of {len(values)} rounds: "
            f"{form.format(min(values))} to {form.format(max(values))})"
        )
    return [line]


async def _row(settings: Settings, key: str) -> list[Row]:
    if key in ("raw-rest", "raw-sdk"):
        client: raw.Client = "rest" if key == "raw-rest" else "sdk"
        async with AzuriteProcess() as azurite:
            return [await raw.run(settings, azurite, client)]
    store: StoreKind = "postgres" if "-postgres" in key else "sqlite"
    batching = not key.endswith("-single")
    if key.startswith("e2e-"):
        async with AzuriteProcess() as azurite:
            run_log, app = key.endswith("-runlog"), key.endswith("-app")
            return [
                await e2e.run(settings, azurite, store, batching=batching, run_log=run_log, app=app)
            ]
    if key.startswith("store-"):
        variant: e2e.StoreVariant = key.removeprefix(f"store-{store}").lstrip("-") or "bare"  # type: ignore[assignment]
        return [await e2e.run_store(settings, store, variant)]
    if key.startswith("coord-"):
        return await coordinator_only.run(settings, store, batching=batching)
    if key.startswith("create-"):
        mode: create.Mode = key.removeprefix("create-")  # type: ignore[assignment]
        async with AzuriteProcess() as azurite:
            return [await create.run(settings, azurite, mode)]
    if key == "isolation":
        return await isolation.run(settings)
    if key in ("artifacts-directory", "artifacts-azure"):
        return await artifacts.run(settings, "azure" if key == "artifacts-azure" else "directory")
    if key == "artifact-1gib":
        return await artifacts.run_big(settings)
    if key.startswith("events-"):
        return await events.run(settings, store)
    if key == "idle":
        return [await idle.run(settings)]
    if key == "auth":
        return await authn.run(settings)
    if key.startswith("index-find-"):
        return [await index.run_find(settings, store)]
    if key == "index-lag":
        return [await e2e.run_indexed(settings)]
    if key in ("cancel-store", "cancel-azure"):
        return [await cancel.run(settings, "azure" if key == "cancel-azure" else "store")]
    return [await peers.run(settings, key)]


async def _run(settings: Settings, selected: list[str], count: int) -> list[list[Row]]:
    """Run ``count`` rounds of the rows (:mod:`benchlib.rounds`), each in a workdir of its own
    when there are several; the rows of each round."""
    if count == 1:
        return [await _run_round(settings, selected, "")]
    ran = []
    for n in range(count):
        workdir = settings.workdir / f"round-{n + 1}"
        workdir.mkdir(parents=True)
        within = dataclasses.replace(settings, workdir=workdir)
        ran.append(await _run_round(within, rounds.round_order(selected, n), f"round {n + 1}: "))
    return ran


async def _run_round(settings: Settings, selected: list[str], label: str) -> list[Row]:
    """Run the rows one after the other; a fresh in-memory Azurite for each Azure row, so no
    row inherits another's queues or heap."""
    rows: list[Row] = []
    for key in selected:
        print(f"bench: {label}{key} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            new = await _row(settings, key)
        except Exception as error:
            new = [Row(key=key, title=key, unit="", error=f"{type(error).__name__}: {error}")]
        rows += new
        summary = "; ".join(f"{_fmt(r.rate)} {r.unit} {r.error or ''}" for r in new)
        print(
            f"bench: {label}{key} done in {time.monotonic() - started:.0f} s: {summary}",
            file=sys.stderr,
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    selected = [key.strip() for key in args.rows.split(",") if key.strip()]
    unknown = sorted(set(selected) - set(ALL_ROWS))
    if unknown:
        print(f"scripts/bench: unknown rows {unknown}; choose from {ALL_ROWS}", file=sys.stderr)
        return 2
    if args.workdir is not None and args.workdir.is_dir() and any(args.workdir.iterdir()):
        # an earlier run's rows would start on its data (a store, a clients file) and fail
        print(
            f"scripts/bench: --workdir {args.workdir} is not empty; name a new or empty directory",
            file=sys.stderr,
        )
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="qc-bench-"))
    settings = Settings(
        duration=args.duration,
        warmup=args.warmup,
        drain=args.drain,
        workers=args.workers,
        batch=args.batch,
        producers=args.producers,
        depth=args.depth,
        priority=args.priority,
        auth=args.auth,
        worker_log_level=args.worker_log_level,
        coordinator_log_level=args.coordinator_log_level,
        postgres_dsn=args.postgres,
        redis_url=args.redis,
        lifecycle_tasks=args.lifecycle_tasks,
        create_batch=args.create_batch,
        create_requests=args.create_requests,
        artifact_count=args.artifact_count,
        artifact_mib=args.artifact_mib,
        big_artifact_mib=args.big_artifact_mib,
        create_rate=args.create_rate,
        latency_duration=args.latency_duration,
        hold=args.hold,
        profile=args.profile,
        workdir=workdir,
    )
    started = time.time()
    try:
        ran = asyncio.run(_run(settings, selected, args.rounds))
    finally:
        if not (args.keep or args.profile or args.workdir):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"bench: logs and data in {workdir}", file=sys.stderr)
    rows = rounds.median_rows(ran)
    report = render(rows, ran, settings, started, time.time() - started)
    print(report)
    if args.markdown:
        args.markdown.write_text(report + "\n")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "settings": {
                        k: str(v) if isinstance(v, Path) else v
                        for k, v in dataclasses.asdict(settings).items()
                    },
                    "rows": [dataclasses.asdict(row) for row in rows],
                    **(
                        {"rounds": [[dataclasses.asdict(row) for row in rows] for rows in ran]}
                        if len(ran) > 1
                        else {}
                    ),
                },
                indent=2,
            )
        )
    return 1 if any(row.error for rows in ran for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
