"""A tiny run of the benchmark harness (``scripts/bench``): every row runs and lands in the
table, in two halves that run in parallel (the end-to-end rows with the peers and the raw
limit they are compared with; the rest). Its figures mean nothing at this size;
docs/performance.md has the real ones."""

from __future__ import annotations

import contextlib
import importlib
import json
import socket
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from devharness.processes import SCRIPTS, run_module

QUEUE_AND_PEERS = [
    "raw-rest",
    "raw-sdk",
    "e2e-sqlite",
    "e2e-sqlite-runlog",
    "e2e-sqlite-app",
    "e2e-postgres",
    "e2e-sqlite-single",
    "e2e-postgres-single",
    "celery",
    "dramatiq",
    "rq",
    "rq-simple",
    "procrastinate",
    "store-sqlite",
    "store-postgres",
    "store-sqlite-defaults",
    "store-postgres-defaults",
    "store-sqlite-events",
    "store-postgres-events",
    "store-postgres-vacuum-held",
    "store-postgres-processes",
    "index-lag",
]
"""The first half of the bench's rows (``--rows``): the end-to-end rows, the raw limit and
the peers they are compared with; each row prints itself."""
THE_REST = {
    "coord-sqlite": ["coord-sqlite-create", "coord-sqlite"],
    "coord-postgres": ["coord-postgres-create", "coord-postgres"],
    "coord-sqlite-single": ["coord-sqlite-single-create", "coord-sqlite-single"],
    "coord-postgres-single": ["coord-postgres-single-create", "coord-postgres-single"],
    "idle": ["idle"],
    "create-single": ["create-single"],
    "create-batch": ["create-batch"],
    "create-dispatch": ["create-dispatch"],
    "create-dispatch-many": ["create-dispatch-many"],
    "isolation": ["isolation-none", "isolation-process"],
    "artifacts-directory": [
        "artifacts-directory-upload",
        "artifacts-directory-upload-direct",
        "artifacts-directory-download",
        "artifacts-directory-download-direct",
    ],
    "artifacts-azure": [
        "artifacts-azure-upload",
        "artifacts-azure-upload-direct",
        "artifacts-azure-download",
        "artifacts-azure-download-direct",
    ],
    "artifact-1gib": [
        "artifact-1gib",
        "artifact-1gib-createtask",
        "artifact-1gib-createtask-quiet",
    ],
    "events-sqlite": ["events-sqlite-off", "events-sqlite-on", "events-sqlite-drain"],
    "events-postgres": ["events-postgres-off", "events-postgres-on", "events-postgres-drain"],
    "auth": ["auth-clients-file", "auth-api-clients"],
    "index-find-sqlite": ["index-find-sqlite"],
    "index-find-postgres": ["index-find-postgres"],
    "cancel-store": ["cancel-store"],
    "cancel-azure": ["cancel-azure"],
}
"""The second half: each ``--rows`` key and the rows it prints, in order."""
HALVES = {
    "queue-and-peers": (QUEUE_AND_PEERS, QUEUE_AND_PEERS),
    "the-rest": (list(THE_REST), [row for rows in THE_REST.values() for row in rows]),
}
"""Each half: the keys it passes as ``--rows``, the rows it must print. Together they are
every row of the bench (tests/e2e's halves run in parallel)."""
RATIOS = {
    "queue-and-peers": [
        "e2e-sqlite / raw-rest",
        "e2e-postgres / raw-rest",
        "e2e-sqlite-single / raw-rest",
        "e2e-sqlite / e2e-sqlite-single",
        "e2e-sqlite / rq-simple",
        "e2e-sqlite / celery",
        "e2e-sqlite / dramatiq",
        "e2e-postgres / procrastinate",
        "e2e-sqlite-app / e2e-sqlite",
        "e2e-sqlite-runlog / e2e-sqlite",
        "store-sqlite / raw-rest",
        "store-postgres / e2e-postgres",
        "index-lag / store-sqlite",
        "store-sqlite-defaults / dramatiq",
        "store-postgres-defaults / dramatiq",
        "store-sqlite-defaults / store-sqlite",
        "store-postgres-defaults / store-postgres",
        "store-sqlite-events / store-sqlite",
        "store-postgres-events / store-postgres",
        "store-postgres-vacuum-held / store-postgres",
        "store-postgres-processes / store-postgres",
    ],
    "the-rest": [
        "create-batch / create-single",
        "create-dispatch-many / create-batch",
        "create-dispatch / create-single",
        "isolation-process / isolation-none",
        "artifacts-directory upload / direct",
        "artifacts-directory download / direct",
        "artifacts-azure upload / direct",
        "artifacts-azure download / direct",
        "artifact-1gib createTask p99 during the upload / without",
        "events-on / events-off, SQLite",
        "events-on / events-off, PostgreSQL",
        "auth-api-clients / auth-clients-file",
    ],
}
"""The ratio lines each half prints."""
UNMETERED = {"artifact-1gib-createtask", "idle"}
"""Rows without CPU figures of their own (the first shares the artifact-1gib row's window;
idle workers' CPU says nothing)."""
LATENCY = [
    "e2e-sqlite",
    "e2e-postgres",
    "celery",
    "dramatiq",
    "rq",
    "rq-simple",
    "procrastinate",
    "store-sqlite",
    "store-postgres",
    "store-sqlite-defaults",
    "store-postgres-defaults",
    "store-postgres-processes",
]
"""Rows with pending time at 50 % and 80 % of their rate."""


def _redis_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            return True
    except OSError:
        return False


def _benchlib(module: str = "__main__") -> Any:
    """A module of ``scripts/benchlib``."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module(f"benchlib.{module}")


def test_the_halves_are_every_row_of_the_benchlib() -> None:
    assert sorted(QUEUE_AND_PEERS + list(THE_REST)) == sorted(_benchlib().ALL_ROWS)


def test_jobs_that_never_started_count_as_pending_until_the_row_stopped_waiting() -> None:
    latency = _benchlib("latency")
    sent = Counter({"100.000000": 2, "100.500000": 3, "99.000000": 1})  # 99.0: before the window
    starts = [(100.0, 100.004), (100.0, 100.006), (100.5, 100.508), (99.0, 99.001)]

    pending, unstarted = latency.pending_until(starts, sent, 100.0, 103.0)

    assert unstarted == 2
    assert sorted(round(p, 3) for p in pending) == [0.004, 0.006, 0.008, 2.5, 2.5]


def test_rounds_alternate_their_order_and_report_medians() -> None:
    """Every other round runs the rows in reverse; the table shows each row's median round,
    and a ratio is the median of the rounds' own ratios, with their range."""
    bench, rounds, common = _benchlib(), _benchlib("rounds"), _benchlib("common")

    def row(key: str, rate: float, error: str | None = None) -> Any:
        return common.Row(key=key, title=key, unit="tasks/s", rate=rate, ceiling=rate, error=error)

    assert rounds.round_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert rounds.round_order(["a", "b", "c"], 1) == ["c", "b", "a"]
    ran = [
        [row("store-sqlite", 1000), row("store-sqlite-events", 700)],
        [row("store-sqlite-events", 900), row("store-sqlite", 1000)],
        [row("store-sqlite", 1200), row("store-sqlite-events", 0, error="RuntimeError: gone")],
        [row("store-sqlite-events", 800), row("store-sqlite", 800)],
    ]
    shown = rounds.median_rows(ran)
    assert [(r.key, r.rate) for r in shown] == [
        ("store-sqlite", 1000),
        ("store-sqlite-events", 800),
    ]
    assert shown[1].notes == [
        "rate in each of the 4 rounds: 700, 900, failed, 800 tasks/s (shown: the median)"
    ]

    report = bench.render(shown, ran, common.Settings(), 0.0, 1.0)

    # the rounds that ran both: 70 %, 90 % and 100 %
    assert "- store-sqlite-events / store-sqlite: 90%; 90% (median of 3 rounds: 70% to 100%)" in (
        report.splitlines()
    )
    failed = [r for r in rounds.median_rows([ran[2]]) if r.error]
    assert [r.key for r in failed] == ["store-sqlite-events"]


@pytest.mark.slow(seconds=40)
@pytest.mark.timeout(300)
def test_rounds_run_each_in_a_workdir_of_its_own(tmp_path: Path) -> None:
    result_file = tmp_path / "rows.json"
    done = run_module(
        "benchlib",
        *("--duration=1", "--warmup=0.5", "--drain=5", "--depth=50", "--latency-duration=0.3"),
        *("--rows=store-sqlite,store-sqlite-events", "--rounds=2"),
        f"--workdir={tmp_path / 'work'}",
        f"--json={result_file}",
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    ran = json.loads(result_file.read_text())["rounds"]
    assert [[row["key"] for row in rows] for rows in ran] == [
        ["store-sqlite", "store-sqlite-events"],
        ["store-sqlite-events", "store-sqlite"],
    ]
    assert all(row["rate"] > 0 for rows in ran for row in rows)
    assert sorted(path.name for path in (tmp_path / "work").iterdir()) == ["round-1", "round-2"]
    assert "- store-sqlite-events / store-sqlite: " in done.stdout
    assert " (median of 2 rounds: " in done.stdout


def test_rounds_must_be_a_positive_number(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _benchlib().main(["--rows", "store-sqlite", "--rounds", "0"])
    assert exited.value.code == 2
    assert "--rounds: 0 is not a positive whole number" in capsys.readouterr().err


def test_a_workdir_holding_an_earlier_run_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "store-sqlite").mkdir()
    assert _benchlib().main(["--rows", "store-sqlite", "--workdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"scripts/bench: --workdir {tmp_path} is not empty; name a new or empty directory\n"
    )


@pytest.mark.slow(seconds=150)
@pytest.mark.timeout(580)
@pytest.mark.parametrize("half", list(HALVES))
def test_bench_prints_a_table_with_every_row(half: str, tmp_path: Path) -> None:
    if half == "queue-and-peers" and not _redis_answers():
        pytest.skip("the RQ row needs Redis on 127.0.0.1:6379")
    keys, expected = HALVES[half]
    result_file = tmp_path / "rows.json"
    done = run_module(
        "benchlib",
        # 2 s after 0.5 s: the end-to-end rows' warm-up starts once a first task is done,
        # but the events rows' clients count only the lives they begin inside the window,
        # and on a loaded machine a first life took longer than 1.25 s (a clean-clone CI
        # run's events-postgres-on counted nothing in a 1 s window after 0.25 s).
        "--duration=2",
        "--warmup=0.5",
        "--drain=5",
        "--depth=50",
        "--lifecycle-tasks=40",
        # Short latency loads: the rows load both cores, and the rest of the suite runs
        # beside them.
        "--latency-duration=0.3",
        # the held transaction's row: no warm-up beyond the others'
        "--hold=2.5",
        "--create-batch=50",
        "--artifact-count=2",
        "--artifact-mib=2",
        # Long enough (a few tenths of a second) for several createTask calls during it.
        "--big-artifact-mib=64",
        f"--rows={','.join(keys)}",
        f"--workdir={tmp_path / 'work'}",
        f"--json={result_file}",
        timeout=560,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = json.loads(result_file.read_text())["rows"]
    assert [row["key"] for row in rows] == expected
    for row in rows:
        assert row["error"] is None, row
        assert row["count"] > 0, row
        assert row["rate"] > 0, row
        assert bool(row["cpu_ms"]) != (row["key"] in UNMETERED), row
        assert f"| {row['title']} | " in done.stdout
        # every metered group's RSS, after the warm-up and at the end of the window
        if row["cpu_ms"]:
            assert row["rss_mib"] and all(
                start > 0 and end > 0 for start, end in row["rss_mib"].values()
            ), row
            assert f"- {row['key']}: " in done.stdout.split("Memory (RSS in MiB")[1], row
    for row in rows:
        loads = [load["load"] for load in row["latency"]]
        assert loads == ([50, 80] if row["key"] in LATENCY else []), row
        for load in row["latency"]:
            # jobs a load could not start in this tiny window count as pending to its end
            assert 0 <= load["unstarted"] <= load["count"], row
            if load["count"]:
                assert 0 < load["p50_ms"] <= load["p95_ms"] <= load["p99_ms"], row
            sign = "≥" if load["unstarted"] else "="
            line = f"- {row['key']} at {load['load']}%: pending p50/p95/p99 {sign} "
            assert line in done.stdout
    for ratio in RATIOS[half]:
        assert ratio in done.stdout
    if half == "the-rest":
        big = next(row for row in rows if row["key"] == "artifact-1gib")["figures"]
        assert 0 < big["rss_before_mib"] <= big["rss_peak_mib"], big
        finds = [row for row in rows if row["key"].startswith("index-find-")]
        assert all(0 < row["p50_ms"] <= row["p99_ms"] for row in finds), finds
    else:
        # The run-log rows' logs are small: they ride in the reports into the store's rows
        # (kept for the SQLite rows), and nothing reaches an artifacts directory.
        logging_rows = ("e2e-sqlite-runlog", "store-sqlite-defaults", "store-postgres-defaults")
        for key in ("e2e-sqlite", *logging_rows):
            files = [p for p in (tmp_path / "work" / key / "artifacts").rglob("*") if p.is_file()]
            assert files == [], (key, files[:3])
        for key in ("e2e-sqlite", "e2e-sqlite-runlog", "store-sqlite-defaults"):
            with contextlib.closing(
                sqlite3.connect(tmp_path / "work" / key / "coordinator.db")
            ) as db:
                [(logs,)] = db.execute(
                    "SELECT count(*) FROM artifacts WHERE name = 'public/logs/live_backing.log'"
                    " AND content IS NOT NULL"
                ).fetchall()
            assert (logs > 0) == (key != "e2e-sqlite"), (key, logs)
        notes = {row["key"]: " ".join(row["notes"]) for row in rows}
        for key in ("store-sqlite-events", "store-postgres-events"):
            assert "Pulse messages confirmed by the broker" in notes[key], notes[key]
        assert "held open" in notes["store-postgres-vacuum-held"], notes
        lag = next(row for row in rows if row["key"] == "index-lag")["figures"]
        assert 0 <= lag["lag_p50_ms"] <= lag["lag_p99_ms"] <= lag["lag_max_ms"], lag
