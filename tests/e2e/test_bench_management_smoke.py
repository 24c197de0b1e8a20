"""A tiny run of ``scripts/bench_management.py``: it fills, serves, times every query and
prints its tables. Its figures mean nothing at this size; docs/performance.md has the real
ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

from devharness.processes import REPO, SCRIPTS, child_env

LISTED = (
    "taskQueueId",
    "state=pending",
    "schedulerId",
    "taskGroupId",
    "projectId",
    "tag=kind:lint",
    "tag=kind:test",
    "created, one day",
    "resolved, one day",
    "taskQueueId + state=pending",
    "taskGroupId + state=pending",
    "schedulerId + created, one day",
)
COUNTED = (
    "taskQueueId",
    "taskQueueId + state=pending",
    "state=completed",
    "projectId",
    "tag=kind:lint",
)


@pytest.mark.timeout(120)
def test_bench_management_prints_every_query() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_management.py"), "--tasks", "2000", "--repeat", "1"],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Store: 2,000 tasks" in done.stdout
    lines = done.stdout.splitlines()
    for table, labels in (("listTasks", LISTED), ("countTasks", COUNTED)):
        start = next(i for i, line in enumerate(lines) if line.startswith(f"| {table} filter"))
        rows = [line for line in lines[start + 2 :] if line.startswith("| ")][: len(labels)]
        assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == list(labels), rows
        for row in rows:
            # every cell measured: no "-" for a missing figure or plan
            assert " - |" not in row, row
