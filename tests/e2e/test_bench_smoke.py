"""A tiny run of the benchmark harness (``scripts/bench``): every row runs and lands in the
table. Its figures mean nothing at this size; docs/performance.md has the real ones."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from devharness.processes import run_module

ROWS = [
    "raw-rest",
    "raw-sdk",
    "e2e-sqlite",
    "e2e-sqlite-runlog",
    "e2e-sqlite-app",
    "e2e-postgres",
    "e2e-sqlite-single",
    "e2e-postgres-single",
    "coord-sqlite-create",
    "coord-sqlite",
    "coord-postgres-create",
    "coord-postgres",
    "coord-sqlite-single-create",
    "coord-sqlite-single",
    "coord-postgres-single-create",
    "coord-postgres-single",
    "celery",
    "dramatiq",
    "rq",
    "rq-simple",
    "procrastinate",
    "idle",
    "create-single",
    "create-batch",
    "create-dispatch",
    "create-dispatch-many",
    "isolation-none",
    "isolation-process",
    "artifacts-directory-upload",
    "artifacts-directory-upload-direct",
    "artifacts-directory-download",
    "artifacts-directory-download-direct",
    "artifacts-azure-upload",
    "artifacts-azure-upload-direct",
    "artifacts-azure-download",
    "artifacts-azure-download-direct",
    "artifact-1gib",
    "artifact-1gib-createtask",
    "artifact-1gib-createtask-quiet",
    "events-sqlite-off",
    "events-sqlite-on",
    "events-sqlite-drain",
    "events-postgres-off",
    "events-postgres-on",
    "events-postgres-drain",
    "store-sqlite",
    "store-postgres",
    "auth-clients-file",
    "auth-api-clients",
]
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
]
"""Rows with pending time at 50 % and 80 % of their rate."""


def _redis_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.timeout(580)
def test_bench_prints_a_table_with_every_row(tmp_path: Path) -> None:
    if not _redis_answers():
        pytest.skip("the RQ row needs Redis on 127.0.0.1:6379")
    result_file = tmp_path / "rows.json"
    done = run_module(
        "benchlib",
        "--duration=2",
        "--warmup=1.5",
        "--drain=5",
        "--depth=50",
        "--lifecycle-tasks=40",
        "--latency-duration=0.5",
        "--create-batch=50",
        "--artifact-count=2",
        "--artifact-mib=2",
        # Long enough (a few tenths of a second) for several createTask calls during it.
        "--big-artifact-mib=64",
        f"--workdir={tmp_path / 'work'}",
        f"--json={result_file}",
        timeout=560,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = json.loads(result_file.read_text())["rows"]
    assert [row["key"] for row in rows] == ROWS
    for row in rows:
        assert row["error"] is None, row
        assert row["count"] > 0, row
        assert row["rate"] > 0, row
        assert bool(row["cpu_ms"]) != (row["key"] in UNMETERED), row
        assert f"| {row['title']} | " in done.stdout
    for row in rows:
        loads = [load["load"] for load in row["latency"]]
        assert loads == ([50, 80] if row["key"] in LATENCY else []), row
        for load in row["latency"]:
            # a load the row could not keep up with in this tiny window may start no job in it
            if load["count"]:
                assert 0 < load["p50_ms"] <= load["p95_ms"] <= load["p99_ms"], row
            assert f"- {row['key']} at {load['load']}%: pending p50/p95/p99 = " in done.stdout
    big = next(row for row in rows if row["key"] == "artifact-1gib")["figures"]
    assert 0 < big["rss_before_mib"] <= big["rss_peak_mib"], big
    # Only the run-log row's workers uploaded logs into their coordinator's artifacts directory.
    logs = {
        key: [path for path in (tmp_path / "work" / key / "artifacts").rglob("*") if path.is_file()]
        for key in ("e2e-sqlite", "e2e-sqlite-runlog")
    }
    assert logs["e2e-sqlite"] == [], logs["e2e-sqlite"][:3]
    assert logs["e2e-sqlite-runlog"], "no run log was uploaded"
    assert all("live_backing.log" in path.name for path in logs["e2e-sqlite-runlog"])
    for ratio in (
        "e2e-sqlite / raw-rest",
        "e2e-postgres / raw-rest",
        "e2e-sqlite-single / raw-rest",
        "e2e-sqlite / e2e-sqlite-single",
        "e2e-sqlite / rq-simple",
        "e2e-sqlite / celery",
        "e2e-sqlite / dramatiq",
        "e2e-postgres / procrastinate",
        "create-batch / create-single",
        "create-dispatch-many / create-batch",
        "create-dispatch / create-single",
        "e2e-sqlite-app / e2e-sqlite",
        "isolation-process / isolation-none",
        "e2e-sqlite-runlog / e2e-sqlite",
        "artifacts-directory upload / direct",
        "artifacts-directory download / direct",
        "artifacts-azure upload / direct",
        "artifacts-azure download / direct",
        "artifact-1gib createTask p99 during the upload / without",
        "events-on / events-off, SQLite",
        "events-on / events-off, PostgreSQL",
        "store-sqlite / raw-rest",
        "store-postgres / e2e-postgres",
    ):
        assert ratio in done.stdout
